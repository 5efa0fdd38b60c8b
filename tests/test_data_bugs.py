"""Data readers on bad input and on several ranks: strict Criteo numbers, bad rows counted once (per pass,
per evaluation, across a resume), MovieLens non-finite and non-UTF-8 rows, and the seeds and rows that
ranks share or split."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from polyrec.data import BadRows, DataError, open_source
from polyrec.data.criteo import CriteoTSVSource, parse_tsv_line
from polyrec.data.mlperf import MLPerfBinarySource
from polyrec.data.sources import canonical_spec
from polyrec.data.movielens import MovieLensSource
from polyrec.data.synthetic import SyntheticSource
from polyrec.runtime import TrainConfig, Trainer
from test_data import small, write_records

DATA = Path(__file__).parent / "data"
CPU = torch.device("cpu")
RANK_1_SEED = 1_000_000_007  # what polyrec.runtime.parallel.rank_seed gives rank 1 for seed 0


def criteo_lines() -> list[bytes]:
    return (DATA / "criteo_sample.tsv").read_bytes().splitlines(keepends=True)


def criteo_with(tmp_path: Path, column: int, value: bytes, line: int = 3) -> Path:
    """criteo_sample.tsv with ``column`` of line ``line`` (1-based) replaced by ``value``."""
    lines = criteo_lines()
    cols = lines[line - 1].rstrip(b"\n").split(b"\t")
    cols[column] = value
    lines[line - 1] = b"\t".join(cols) + b"\n"
    path = tmp_path / "edited.tsv"
    path.write_bytes(b"".join(lines))
    return path


def criteo(paths: Path | list[Path], batch_size: int, bad: BadRows, **kw) -> CriteoTSVSource:
    return CriteoTSVSource(paths if isinstance(paths, list) else [paths], small(), batch_size=batch_size,
                           bad_rows=bad, **kw)


# --- 1: Criteo numbers: int64 range, strict syntax ----------------------------------------------------------

@pytest.mark.parametrize("column,value,problem", [
    (1, b"1180591620717411303424", "I1 is b'1180591620717411303424': integer features must be"),  # 2^70
    (1, b"9223372036854775808", "I1 is b'9223372036854775808': integer features must be"),  # 2^63
    (2, b"9" * 5000, "I2 is b'999999999999999999999999': integer features must be"),  # int() refuses > 4300 digits
    (13, b"-9223372036854775809", "I13 is b'-9223372036854775809': integer features must be"),  # -2^63 - 1
    (14, b"fffffffffffffffff", "C1 is b'fffffffffffffffff': categorical features must be hex"),  # 17 digits
    (39, b"8000000000000000", "C26 is b'8000000000000000': categorical features must be hex"),  # 2^63
])
def test_criteo_huge_integers_are_bad_rows(tmp_path, column, value, problem):
    path = criteo_with(tmp_path, column, value)
    with pytest.raises(DataError, match=rf"edited\.tsv:3: {re.escape(problem)}"):
        criteo(path, 8, BadRows(skip=False)).next_batch()
    bad = BadRows(skip=True)
    assert criteo(path, 8, bad).next_batch().batch_size == 8 and bad.count == 1


def test_criteo_int64_limits_are_read():
    line = criteo_lines()[0].rstrip(b"\n").split(b"\t")
    line[1], line[2], line[14] = b"9223372036854775807", b"-9223372036854775808", b"7fffffffffffffff"
    out = np.empty(40, np.int64)
    parse_tsv_line(b"\t".join(line), "x.tsv", 1, out)
    assert out[1] == 2**63 - 1 and out[2] == -2**63 and out[14] == 2**63 - 1


def test_criteo_values_behind_more_zeros_than_python_converts_are_read():
    """Python's int() refuses over 4300 digits; zeros in front of a value within int64 are no reason to refuse it."""
    line = criteo_lines()[0].rstrip(b"\n").split(b"\t")
    line[1], line[2], line[3] = b"0" * 5000 + b"7", b"-" + b"0" * 5000 + b"9223372036854775808", b"0" * 5000
    out = np.empty(40, np.int64)
    parse_tsv_line(b"\t".join(line), "x.tsv", 1, out)
    assert out[1] == 7 and out[2] == -2**63 and out[3] == 0
    line[4] = b"0" * 5000 + b"9223372036854775808"  # 2^63 behind the zeros: still past int64
    with pytest.raises(DataError, match=r"x\.tsv:1: I4 is b'0000"):
        parse_tsv_line(b"\t".join(line), "x.tsv", 1, out)


@pytest.mark.parametrize("column,value", [
    (1, b" 5 "), (1, b"1_000"), (1, b"+7"), (1, b"5-"), (1, b"-"), (1, b"--1"), (1, b"\xd9\xa1"),
    (14, b"0x1f"), (14, b"-1f"), (14, b"dead_beef"), (14, b" ab"), (14, b"+ab"),
])
def test_criteo_rejects_lenient_numbers(tmp_path, column, value):
    path = criteo_with(tmp_path, column, value, line=1)
    name = f"I{column}" if column <= 13 else f"C{column - 13}"
    with pytest.raises(DataError, match=rf"edited\.tsv:1: {name} is .*: (integer|categorical) features must be"):
        criteo(path, 1, BadRows(skip=False)).next_batch()


def test_criteo_accepts_negative_counts_empty_fields_and_upper_case_hex(tmp_path):
    path = criteo_with(tmp_path, 1, b"-2", line=1)
    lines = path.read_bytes().splitlines(keepends=True)
    cols = lines[0].split(b"\t")
    upper = b"\t".join(cols[:14] + [c.upper() for c in cols[14:]])
    path.write_bytes(lines[0] + upper)
    b = criteo(path, 2, BadRows(skip=False)).next_batch()
    assert float(b.dense[0, 0]) == 0.0 and torch.equal(b.values[0::2], b.values[1::2])


# --- 2: each bad row counted once, not once per epoch ---------------------------------------------------

def test_criteo_bad_rows_counted_once_over_epochs():
    bad = BadRows(skip=True)
    src = criteo(DATA / "criteo_bad.tsv", 8, bad)
    for _ in range(7):  # 16 good rows of 20: two batches per epoch, into the fourth epoch
        src.next_batch()
    assert src.epoch == 3 and bad.count == 4 and len(bad.examples) == 4


def test_mlperf_bad_records_counted_once_over_epochs(tmp_path):
    rec = write_records(tmp_path / "b.bin", 10)
    rec[3, 0] = 5
    rec.tofile(tmp_path / "b.bin")
    bad = BadRows(skip=True)
    src = MLPerfBinarySource(tmp_path / "b.bin", small(), batch_size=4, bad_rows=bad)
    for _ in range(8):
        src.next_batch()
    assert src.epoch >= 3 and bad.count == 1
    assert bad.examples == [f"{tmp_path / 'b.bin'}:4: row 4: label must be 0 or 1"]


# --- 3: the eval file's bad rows: a counter of their own, counted once ---------------------------------

def test_eval_bad_rows_counted_apart_and_once(tmp_path):
    lines = criteo_lines()
    (tmp_path / "eval.tsv").write_bytes(b"".join(lines[:5]) + b"x\n" + b"".join(lines[5:]))
    src = open_source(f"criteo:{DATA / 'criteo_sample.tsv'}", small(), batch_size=4, seed=0, device=CPU,
                      skip_bad_rows=True, eval_spec=f"criteo:{tmp_path / 'eval.tsv'}", num_eval_batches=2)
    for _ in range(3):
        src.next_batch()
        assert len(src.eval_batches()) == 2
    assert src.bad_rows.count == 0
    assert src.eval_bad_rows.count == 1 and src.eval_bad_rows.examples[0].startswith(f"{tmp_path / 'eval.tsv'}:6: ")


def test_eval_bad_rows_of_a_small_eval_file_counted_once(tmp_path):
    """An eval file shorter than the eval batches is read once per evaluation, its bad record counted once."""
    rec = write_records(tmp_path / "e.bin", 6)
    rec[2, 0] = 9
    rec.tofile(tmp_path / "e.bin")
    write_records(tmp_path / "t.bin", 16)
    src = open_source(f"mlperf:{tmp_path / 't.bin'}", small(), batch_size=4, seed=0, device=CPU, skip_bad_rows=True,
                      eval_spec=f"mlperf:{tmp_path / 'e.bin'}", num_eval_batches=3)
    good = np.delete(rec, 2, axis=0)  # the 5 good records, each evaluated once
    for _ in range(2):
        batches = src.eval_batches()
        assert [b.batch_size for b in batches] == [4, 1]
        assert torch.equal(torch.cat([b.labels for b in batches]), torch.from_numpy(good[:, 0].astype(np.float32)))
    assert src.eval_bad_rows.count == 1 and src.bad_rows.count == 0


def test_criteo_eval_reads_a_small_eval_file_once(tmp_path):
    """--eval-batches is an upper limit: a file that ends first gives fewer batches, the last one short, every
    row once; the bad row in it is counted once over evaluations."""
    lines = criteo_lines()
    path = tmp_path / "eval.tsv"
    path.write_bytes(b"".join(lines[:3]) + b"x\n" + b"".join(lines[3:10]))  # 10 good rows, line 4 bad
    src = open_source(f"criteo:{DATA / 'criteo_sample.tsv'}", small(), batch_size=4, seed=0, device=CPU,
                      skip_bad_rows=True, eval_spec=f"criteo:{path}", num_eval_batches=10)
    want = torch.tensor([float(line[:1]) for line in lines[:10]])
    for _ in range(3):
        batches = src.eval_batches()
        assert [b.batch_size for b in batches] == [4, 4, 2]
        assert torch.equal(torch.cat([b.labels for b in batches]), want)
    assert src.eval_bad_rows.count == 1 and src.bad_rows.count == 0
    src.num_eval_batches = 2  # fewer than the file holds: the limit
    assert [b.batch_size for b in src.eval_batches()] == [4, 4]
    path.write_bytes(b"x\n")
    with pytest.raises(DataError, match=r"eval\.tsv:0: no good row to evaluate on"):
        src.eval_batches()


def test_training_streams_still_wrap_after_an_evaluation(tmp_path):
    """Training batches stay full and wrap into the next epoch; evaluations in between change nothing."""
    write_records(tmp_path / "t.bin", 10)
    spec = dict(batch_size=4, seed=0, device=CPU, eval_spec=f"mlperf:{tmp_path / 't.bin'}", num_eval_batches=5)
    src = open_source(f"mlperf:{tmp_path / 't.bin'}", small(), **spec)
    plain = open_source(f"mlperf:{tmp_path / 't.bin'}", small(), **spec)
    for _ in range(4):
        assert [b.batch_size for b in src.eval_batches()] == [4, 4, 2]
        assert torch.equal(src.next_batch().values, plain.next_batch().values)
    assert src.epoch == 1 and src.state_dict() == plain.state_dict()
    tsv = open_source(f"criteo:{DATA / 'criteo_sample.tsv'}", small(), batch_size=32, seed=0, device=CPU,
                      eval_spec=f"criteo:{DATA / 'criteo_sample.tsv'}", num_eval_batches=5)
    for _ in range(3):  # 48 rows: the second batch wraps
        assert [b.batch_size for b in tsv.eval_batches()] == [32, 16]
        assert tsv.next_batch().batch_size == 32
    assert tsv.epoch == 1


def test_eval_event_counts_the_rows_evaluated(tmp_path):
    cfg = TrainConfig(preset="dcnv2-small", data=f"criteo:{DATA / 'criteo_sample.tsv'}",
                      eval_data=f"criteo:{DATA / 'criteo_sample.tsv'}", steps=2, batch_size=32, row_cap=100,
                      eval_batches=10, log_every=1000, device="cpu", cpu_threads=1)
    result = Trainer(cfg, progress=False).train()
    assert [e["samples"] for e in result.evals] == [48]


def criteo_eval_with_bad_rows(tmp_path: Path) -> Path:
    """criteo_sample.tsv with two malformed lines, 3 and 8, among the first 16 rows (two eval batches of 8)."""
    lines = criteo_lines()
    path = tmp_path / "eval_bad.tsv"
    path.write_bytes(b"".join(lines[:2]) + b"x\n" + b"".join(lines[2:6]) + b"2\t1\n" + b"".join(lines[6:]))
    return path


def test_trainer_reports_the_eval_files_bad_rows(tmp_path):
    """The eval counter lands in TrainResult and the `end` record, apart from the training data's."""
    path = criteo_eval_with_bad_rows(tmp_path)
    cfg = TrainConfig(preset="dcnv2-small", data=f"criteo:{DATA / 'criteo_sample.tsv'}", eval_data=f"criteo:{path}",
                      skip_bad_rows=True, steps=4, batch_size=8, row_cap=100, eval_every=2, eval_batches=2,
                      log_every=1000, checkpoint_dir=tmp_path / "run", device="cpu", cpu_threads=1)
    result = Trainer(cfg, progress=False).train()
    assert result.status == "done" and len(result.evals) >= 2
    assert result.bad_rows == 0 and result.bad_row_examples == []
    assert result.eval_bad_rows == 2
    assert result.eval_bad_row_examples == [f"{path}:3: expected 40 tab-separated columns, found 1",
                                            f"{path}:8: expected 40 tab-separated columns, found 2"]
    end = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    assert end["event"] == "end" and end["bad_rows"] == 0
    assert end["eval_bad_rows"] == 2 and end["eval_bad_row_examples"] == result.eval_bad_row_examples


def test_sources_without_eval_file_have_no_eval_counter():
    assert open_source("synthetic", small(), batch_size=4, seed=0, device=CPU).eval_bad_rows is None
    ml = open_source(f"movielens:{DATA / 'ml_sample.data'}", small(), batch_size=4, seed=0, device=CPU)
    assert ml.eval_bad_rows is None
    assert open_source(f"criteo:{DATA / 'criteo_sample.tsv'}", small(), batch_size=4, seed=0,
                       device=CPU).eval_bad_rows is None


# --- 4: the bad-row count in the saved stream position --------------------------------------------------

def through_torch_save(state: dict) -> dict:
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def test_criteo_bad_row_count_resumes():
    straight = BadRows(skip=True)
    a = criteo(DATA / "criteo_bad.tsv", 8, straight)
    want = [a.next_batch() for _ in range(4)]
    first = BadRows(skip=True)
    b = criteo(DATA / "criteo_bad.tsv", 8, first)
    b.next_batch()  # lines 1..9, the bad line 5 counted
    state = through_torch_save(b.state_dict())
    resumed = BadRows(skip=True)
    c = criteo(DATA / "criteo_bad.tsv", 8, resumed)
    c.load_state_dict(state)
    for w in want[1:]:
        assert torch.equal(c.next_batch().values, w.values)
    assert resumed.count == straight.count == 4 and resumed.examples == straight.examples


def test_mlperf_bad_row_count_resumes(tmp_path):
    rec = write_records(tmp_path / "b.bin", 12)
    rec[[2, 9], 0] = 3
    rec.tofile(tmp_path / "b.bin")
    straight = BadRows(skip=True)
    a = MLPerfBinarySource(tmp_path / "b.bin", small(), batch_size=4, bad_rows=straight)
    for _ in range(6):
        a.next_batch()
    first = BadRows(skip=True)
    b = MLPerfBinarySource(tmp_path / "b.bin", small(), batch_size=4, bad_rows=first)
    b.next_batch()
    resumed = BadRows(skip=True)
    c = MLPerfBinarySource(tmp_path / "b.bin", small(), batch_size=4, bad_rows=resumed)
    c.load_state_dict(through_torch_save(b.state_dict()))
    for _ in range(5):
        c.next_batch()
    assert resumed.count == straight.count == 2 and resumed.examples == straight.examples


def test_state_without_bad_rows_still_loads(tmp_path):
    """Checkpoints from before the bad-row count was saved hold only the position."""
    src = criteo(DATA / "criteo_bad.tsv", 8, BadRows(skip=True))
    src.load_state_dict({"epoch": 0, "file_index": 0, "byte_offset": 0, "line_no": 0})
    assert src.next_batch().batch_size == 8 and src.bad_rows.count == 1
    rec = write_records(tmp_path / "b.bin", 8)
    rec[1, 0] = 3
    rec.tofile(tmp_path / "b.bin")
    src = MLPerfBinarySource(tmp_path / "b.bin", small(), batch_size=4, bad_rows=BadRows(skip=True))
    src.load_state_dict({"epoch": 0, "position": 0})
    assert src.next_batch().batch_size == 4 and src.bad_rows.count == 1


def test_bad_rows_read_again_after_their_count_was_put_back_are_counted(tmp_path):
    """The precompile's dry steps read batches, then put the position and the count back
    (``cold_start.StepSnapshot``): the real steps count those batches' bad rows as a run without it does."""
    rec = write_records(tmp_path / "b.bin", 16)
    rec[2, 0] = 5
    rec.tofile(tmp_path / "b.bin")
    makers = [lambda bad: criteo(DATA / "criteo_bad.tsv", 4, bad),
              lambda bad: MLPerfBinarySource(tmp_path / "b.bin", small(), batch_size=4, bad_rows=bad)]
    for make in makers:
        plain, put_back = make(BadRows(skip=True)), make(BadRows(skip=True))
        state = through_torch_save(put_back.state_dict())
        for _ in range(2):  # the dry steps
            put_back.next_batch()
        put_back.load_state_dict(state)
        for _ in range(3):
            plain.next_batch()
            put_back.next_batch()
        assert put_back.bad_rows.count == plain.bad_rows.count > 0
        assert put_back.bad_rows.examples == plain.bad_rows.examples


def test_mlperf_truncated_record_counted_by_one_rank(tmp_path):
    rec = write_records(tmp_path / "t.bin", 8)
    (tmp_path / "t.bin").write_bytes(rec.tobytes() + bytes(10))  # record 9 truncated: block 4 of 2, rank 0's
    counts = []
    for rank in range(2):
        bad = BadRows(skip=True)
        MLPerfBinarySource(tmp_path / "t.bin", small(), batch_size=2, bad_rows=bad, rank=rank, world_size=2)
        counts.append(bad.count)
    assert counts == [1, 0]


def test_resumed_run_reports_the_bad_rows_of_an_uninterrupted_one(tmp_path):
    def run(directory: str, steps: int, resume: bool = False):
        cfg = TrainConfig(preset="dcnv2-small", data=f"criteo:{DATA / 'criteo_bad.tsv'}", skip_bad_rows=True,
                          steps=steps, batch_size=8, row_cap=100, log_every=1000, checkpoint_dir=tmp_path / directory,
                          device="cpu", cpu_threads=1, resume=resume)
        return Trainer(cfg, progress=False).train()

    straight = run("a", 4)
    assert run("b", 2).bad_rows == 4
    resumed = run("b", 4, resume=True)
    assert resumed.bad_rows == straight.bad_rows == 4 and resumed.bad_row_examples == straight.bad_row_examples


def test_criteo_resume_refuses_a_file_that_changed(tmp_path):
    """A saved position beyond the file's end or in the middle of a line: the file changed since the checkpoint."""
    lines = criteo_lines()
    path = tmp_path / "mut.tsv"
    path.write_bytes(b"".join(lines))
    src = criteo(path, 8, BadRows(skip=False))
    for _ in range(3):
        src.next_batch()
    state = src.state_dict()  # after line 24
    path.write_bytes(b"".join(lines[:10]))
    with pytest.raises(ValueError, match=re.escape(f"{path} changed since the checkpoint was written: the saved "
                                                   f"position, byte {state['byte_offset']} (after line 24), is beyond "
                                                   "its end")):
        criteo(path, 8, BadRows(skip=False)).load_state_dict(state)
    path.write_bytes(b"".join(lines)[1:])  # one byte less before the position: it lands in line 25
    with pytest.raises(ValueError, match=r"mut\.tsv changed since the checkpoint was written: .* in the middle of a "
                                         "line; restore the file the run was trained on, or start a new --checkpoint-dir"):
        criteo(path, 8, BadRows(skip=False)).load_state_dict(state)
    path.write_bytes(b"".join(lines[:24]).rstrip(b"\n"))  # ends at the saved position, without a last newline
    state = {**state, "byte_offset": path.stat().st_size}
    resumed = criteo(path, 8, BadRows(skip=False))
    resumed.load_state_dict(state)  # the end of the file: on to the next epoch, no half line
    assert resumed.next_batch().batch_size == 8 and resumed.epoch == 1


def test_mlperf_resume_refuses_a_file_that_shrank(tmp_path):
    rec = write_records(tmp_path / "b.bin", 12)
    src = MLPerfBinarySource(tmp_path / "b.bin", small(), batch_size=4, bad_rows=BadRows(skip=False))
    src.next_batch()
    src.next_batch()
    state = src.state_dict()  # 8 records read
    rec[:8].tofile(tmp_path / "b.bin")
    shrunk = MLPerfBinarySource(tmp_path / "b.bin", small(), batch_size=4, bad_rows=BadRows(skip=False))
    with pytest.raises(ValueError, match=r"b\.bin changed since the checkpoint was written: it held 12 rows, "
                                         "now 8"):
        shrunk.load_state_dict(state)
    # a checkpoint from before the fifty-first session saved the position in the epoch
    with pytest.raises(ValueError, match=r"b\.bin changed since the checkpoint was written: the saved position, 8 "
                                         "rows into an epoch, is at or beyond the end of its 8 rows"):
        shrunk.load_state_dict({"epoch": 0, "position": 8})
    shrunk.load_state_dict({"read": 0})  # an eval rewind still loads
    shrunk.load_state_dict({"epoch": 1, "position": 4})
    assert shrunk.read == 12 and shrunk.epoch == 1


# --- 5: an empty MLPerf file ---------------------------------------------------------------------------

def test_movielens_resume_refuses_a_file_that_changed(tmp_path):
    """Was: resumed on whatever the file held, its split and shuffles over other rows."""
    lines = (DATA / "ml_sample.data").read_bytes().splitlines(keepends=True)
    (tmp_path / "m.data").write_bytes(b"".join(lines))
    src = MovieLensSource(tmp_path / "m.data", batch_size=8, seed=0, bad_rows=BadRows(skip=False))
    src.next_batch()
    state = through_torch_save(src.state_dict())
    (tmp_path / "m.data").write_bytes(b"".join(lines[:-5]))
    cut = MovieLensSource(tmp_path / "m.data", batch_size=8, seed=0, bad_rows=BadRows(skip=False))
    with pytest.raises(ValueError, match=rf"m\.data changed since the checkpoint was written: it had {len(lines)} "
                                         rf"good rows, now {len(lines) - 5}"):
        cut.load_state_dict(state)
    cut.load_state_dict({"epoch": 0, "cursor": 8})  # a checkpoint from before the row count was saved


def test_mlperf_empty_file_is_a_data_error(tmp_path):
    (tmp_path / "empty.bin").write_bytes(b"")
    for skip in (False, True):
        with pytest.raises(DataError, match=r"empty\.bin:0: file holds no complete row"):
            MLPerfBinarySource(tmp_path / "empty.bin", small(), batch_size=4, bad_rows=BadRows(skip=skip))


def test_an_empty_criteo_file_among_others_adds_no_rows(tmp_path):
    (tmp_path / "empty.tsv").write_bytes(b"")
    (tmp_path / "blank.tsv").write_bytes(b"\n\n")  # blank lines are no rows either
    path = tmp_path / "rows.tsv"
    path.write_bytes(b"".join(criteo_lines()))
    alone = criteo(path, 8, BadRows(skip=False))
    listed = criteo([tmp_path / "empty.tsv", path, tmp_path / "blank.tsv"], 8, BadRows(skip=False))
    for _ in range(len(criteo_lines()) // 8 + 2):  # over the end of the files, into the next epoch
        want, got = alone.next_batch(), listed.next_batch()
        assert torch.equal(got.values, want.values) and torch.equal(got.labels, want.labels)


def test_criteo_files_of_no_rows_at_all_are_refused_naming_them(tmp_path):
    """Was: "no rows left in any input file" under the name of the last file only."""
    paths = [tmp_path / "a.tsv", tmp_path / "b.tsv"]
    for p in paths:
        p.write_bytes(b"\n")
    with pytest.raises(DataError, match=re.escape(f"{paths[0]},{paths[1]}:0: no rows in any of the 2 files")):
        criteo(paths, 4, BadRows(skip=True)).next_batch()
    with pytest.raises(DataError, match=re.escape(f"{paths[0]}:0: no rows in the file")):
        criteo(paths[0], 4, BadRows(skip=False)).next_batch()


# --- 5b: compressed files are named as such, not read as malformed rows ------------------------------------

@pytest.mark.parametrize("compress, name", [("gzip", "gzip"), ("bz2", "bzip2"), ("lzma", "xz")])
def test_compressed_files_are_refused_naming_the_compression(tmp_path, compress, name):
    """Criteo 1TB ships as day_N.gz: was 'day_0.gz:1: expected 40 tab-separated columns, found 2' (MovieLens:
    'not UTF-8 text'; with --skip-bad-rows '1001 bad rows in a row')."""
    import importlib

    module = importlib.import_module(compress)
    for src, kind, spec_path in ((DATA / "criteo_sample.tsv", "Criteo TSV", "criteo"),
                                 (DATA / "ml_sample.data", "MovieLens", "movielens")):
        packed = tmp_path / f"{src.name}.{compress}"
        packed.write_bytes(module.compress(src.read_bytes()))
        for skip in (False, True):
            with pytest.raises(DataError, match=rf"{re.escape(str(packed))}:0: {name}-compressed: decompress it "
                                                rf"first \(polyrec reads {kind} files uncompressed\)"):
                open_source(f"{spec_path}:{packed}", small(), batch_size=4, seed=0, device=CPU, skip_bad_rows=skip)
    write_records(tmp_path / "r.bin", 8)
    (tmp_path / "r.bin.gz").write_bytes(module.compress((tmp_path / "r.bin").read_bytes()))
    with pytest.raises(DataError, match=f"{name}-compressed"):
        MLPerfBinarySource(tmp_path / "r.bin.gz", small(), batch_size=4, bad_rows=BadRows(skip=True))


@pytest.mark.parametrize("spec", ["criteo", "mlperf", "movielens"])
def test_a_pipe_or_device_is_named_not_reported_missing(tmp_path, spec):
    """Was: 'Criteo TSV file not found: /dev/fd/63' for --data criteo:<(zcat day_0.gz)."""
    import os

    os.mkfifo(tmp_path / "fifo")
    for path in (tmp_path / "fifo", Path("/dev/null")):
        with pytest.raises(ValueError, match=rf"path {re.escape(str(path))} is not a regular file \(a pipe or a "
                                             r"device\): give a file on disk"):
            open_source(f"{spec}:{path}", small(), batch_size=4, seed=0, device=CPU)
    with pytest.raises(FileNotFoundError, match="file not found"):
        open_source(f"{spec}:{tmp_path / 'missing'}", small(), batch_size=4, seed=0, device=CPU)


# --- 6, 7: MovieLens non-finite numbers and non-UTF-8 bytes ---------------------------------------------

def movielens_with(tmp_path: Path, line: bytes, at: int = 4) -> Path:
    """ml_sample.data with ``line`` inserted as line ``at`` (1-based)."""
    lines = (DATA / "ml_sample.data").read_bytes().splitlines(keepends=True)
    path = tmp_path / "edited.data"
    path.write_bytes(b"".join(lines[:at - 1]) + line + b"".join(lines[at - 1:]))
    return path


@pytest.mark.parametrize("row", [b"1\t2\t5\tinf\n", b"1\t2\tnan\t883498085\n", b"1\t2\t-inf\t1\n",
                                 b"1\t2\t4\t1e400\n"])
def test_movielens_rejects_non_finite_numbers(tmp_path, row):
    path = movielens_with(tmp_path, row)
    with pytest.raises(DataError, match=r"edited\.data:4: rating and timestamp must be finite"):
        MovieLensSource(path, batch_size=8, seed=0, bad_rows=BadRows(skip=False))
    bad = BadRows(skip=True)
    src = MovieLensSource(path, batch_size=8, seed=0, bad_rows=bad)
    assert bad.count == 1 and len(src.label) == 400 and bool(np.isfinite(src.time).all())


def test_movielens_non_utf8_is_a_bad_row(tmp_path):
    path = movielens_with(tmp_path, b"1\t2\t\xe94\t883498085\n", at=5)
    with pytest.raises(DataError, match=r"edited\.data:5: not UTF-8 text"):
        MovieLensSource(path, batch_size=8, seed=0, bad_rows=BadRows(skip=False))
    bad = BadRows(skip=True)
    src = MovieLensSource(path, batch_size=8, seed=0, bad_rows=bad)
    assert bad.count == 1 and len(src.label) == 400


def test_movielens_non_utf8_in_first_row_of_a_headerless_file(tmp_path):
    path = movielens_with(tmp_path, b"\xff\t2\t4\t1\n", at=1)
    bad = BadRows(skip=True)
    MovieLensSource(path, batch_size=8, seed=0, bad_rows=bad)
    assert bad.count == 1 and bad.examples[0].startswith(f"{path}:1: not UTF-8 text")


def test_movielens_reads_crlf_and_inter_files_as_before(tmp_path):
    (tmp_path / "crlf.data").write_bytes((DATA / "ml_sample.data").read_bytes().replace(b"\n", b"\r\n"))
    a = MovieLensSource(tmp_path / "crlf.data", batch_size=8, seed=0, bad_rows=BadRows(skip=False))
    b = MovieLensSource(DATA / "ml_sample.inter", batch_size=8, seed=0, bad_rows=BadRows(skip=False))
    assert torch.equal(a.next_batch().values, b.next_batch().values)


def test_movielens_byte_order_mark_is_not_part_of_the_first_field(tmp_path):
    """Was: a headerless file's first user became another user; an .inter header 'lacks column(s) user_id'."""
    for name in ("ml_sample.data", "ml_sample.inter"):
        (tmp_path / name).write_bytes(b"\xef\xbb\xbf" + (DATA / name).read_bytes())
        marked = MovieLensSource(tmp_path / name, batch_size=8, seed=0, bad_rows=BadRows(skip=False))
        plain = MovieLensSource(DATA / name, batch_size=8, seed=0, bad_rows=BadRows(skip=False))
        assert marked.num_users == plain.num_users and np.array_equal(marked.user, plain.user)


def test_movielens_takes_a_negative_seed_as_the_other_sources_do():
    """Was: 'expected non-negative integer' from numpy, naming no option."""
    a = MovieLensSource(DATA / "ml_sample.data", batch_size=8, seed=-1, bad_rows=BadRows(skip=False))
    b = MovieLensSource(DATA / "ml_sample.data", batch_size=8, seed=2**64 - 1, bad_rows=BadRows(skip=False))
    assert torch.equal(a.next_batch().values, b.next_batch().values)


def test_movielens_ids_are_indexed_without_padding_each_to_the_longest(tmp_path):
    """A fixed-width array of the ids held each at the longest one's width (4 bytes a character): here 2000
    ids and one of 10,000 characters would take 80 MB."""
    import tracemalloc

    rows = [f"u{i % 97}\ti{i % 13}\t{1 + i % 5}\t{i}\n" for i in range(2000)]
    rows[7] = f"{'x' * 10_000}\ti1\t5\t7\n"
    (tmp_path / "long.data").write_text("".join(rows))
    tracemalloc.start()
    src = MovieLensSource(tmp_path / "long.data", batch_size=8, seed=0, bad_rows=BadRows(skip=False))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 20e6  # 2000 ids at 10,000 characters of 4 bytes would be 80 MB
    assert src.num_users == 98 and src.user[7] == 97  # 'x...' sorts after 'u0'..'u96'


def test_movielens_too_small_for_a_test_split_is_refused(tmp_path):
    """Was: every evaluation scored no row and said nothing (no AUC)."""
    (tmp_path / "two.data").write_text("1\t2\t5\t1\n2\t3\t4\t2\n")
    with pytest.raises(ValueError, match=r"two\.data: 2 good rows leave no test rows \(20% are held out\); give a "
                                         r"file of at least 3 ratings"):
        MovieLensSource(tmp_path / "two.data", batch_size=1, seed=0, bad_rows=BadRows(skip=False))


def test_a_criteo_file_without_newlines_is_not_read_whole(tmp_path, monkeypatch):
    """Was: a file with few newlines (an archive given as criteo:) read into memory as one "line"."""
    import polyrec.data.criteo as criteo_module

    monkeypatch.setattr(criteo_module, "MAX_LINE_BYTES", 4096)
    (tmp_path / "blob.tsv").write_bytes(criteo_lines()[0] + b"x" * 10_000)
    src = criteo(tmp_path / "blob.tsv", 2, BadRows(skip=True))
    with pytest.raises(DataError, match=r"blob\.tsv:2: a line longer than 4,096 bytes; is this Criteo TSV\?"):
        src.next_batch()


def test_an_empty_path_in_a_criteo_list_is_named():
    """Was: 'path . is a directory' for criteo:a,,b."""
    for spec in ("criteo:a,,b", "criteo:a,"):
        with pytest.raises(ValueError, match=f"{spec}: an empty path in the comma-separated list"):
            open_source(spec, small(), batch_size=4, seed=0, device=CPU)


def test_a_long_criteo_list_with_a_missing_file_names_it(tmp_path, monkeypatch):
    """Was: OSError "File name too long": the list, joined at its commas, was looked up as one path holding them."""
    monkeypatch.chdir(tmp_path)
    spec = "criteo:" + ",".join(f"day_{k:02d}.tsv" for k in range(40))  # one name of 439 characters, joined
    with pytest.raises(FileNotFoundError, match="Criteo TSV file not found: day_00.tsv"):
        open_source(spec, small(), batch_size=4, seed=0, device=CPU)
    assert canonical_spec(spec).startswith(f"criteo:{tmp_path.resolve() / 'day_00.tsv'},")


def test_trainer_caps_the_movielens_tables(tmp_path):
    """--row-cap reaches MovieLens, whose table sizes come from the file, not from the preset."""
    cfg = TrainConfig(preset="dcnv2-small", data=f"movielens:{DATA / 'ml_sample.data'}", steps=1, batch_size=32,
                      row_cap=10, log_every=1000, device="cpu", cpu_threads=1)
    trainer = Trainer(cfg, progress=False)
    assert trainer.model_config.table_rows == (10, 10)
    assert trainer.train().status == "done"


# --- 8: synthetic ranks share one hidden model ----------------------------------------------------------

def test_synthetic_ranks_share_the_hidden_model():
    rank0 = open_source("synthetic", small(), batch_size=64, seed=0, shared_seed=0, device=CPU)
    rank1 = open_source("synthetic", small(), batch_size=64, seed=RANK_1_SEED, shared_seed=0, device=CPU)
    assert torch.equal(rank0.dense_w, rank1.dense_w) and torch.equal(rank0.table_w, rank1.table_w)
    assert torch.equal(rank0.dense_mean, rank1.dense_mean) and torch.equal(rank0.dense_std, rank1.dense_std)
    assert not torch.equal(rank0.next_batch().values, rank1.next_batch().values)  # own batch streams


def test_synthetic_ranks_do_not_read_each_others_batches_later():
    """Was: rank 1's batch i was rank 0's batch i + 1,000,003 (the rank stride a multiple of the batch stride)."""
    from polyrec.data.synthetic import TRAIN_STREAM
    from polyrec.runtime.dist import DistContext
    from polyrec.runtime.parallel import rank_seed

    ranks = [SyntheticSource(small(), batch_size=4, seed=rank_seed(0, DistContext(rank=r, world_size=2, local_rank=r,
                                                                                    device=CPU, backend="gloo")))
             for r in range(2)]
    seeds = [ranks[0]._generator(TRAIN_STREAM, i).initial_seed() for i in (0, 1_000_003)]
    assert ranks[1]._generator(TRAIN_STREAM, 0).initial_seed() not in seeds


def test_synthetic_single_process_unchanged():
    a = SyntheticSource(small(), batch_size=32, seed=3)
    b = SyntheticSource(small(), batch_size=32, seed=3, model_seed=3)
    x, y = a.next_batch(), b.next_batch()
    assert torch.equal(x.labels, y.labels) and torch.equal(x.values, y.values) and torch.equal(a.dense_w, b.dense_w)


# --- 9: ranks split the data --------------------------------------------------------------------------

def test_movielens_ranks_share_the_split():
    path = f"movielens:{DATA / 'ml_sample.data'}"
    rank0 = open_source(path, small(), batch_size=8, seed=0, shared_seed=0, device=CPU)
    rank1 = open_source(path, small(), batch_size=8, seed=RANK_1_SEED, shared_seed=0, device=CPU)
    assert np.array_equal(rank0.test_rows, rank1.test_rows) and not set(rank1.test_rows) & set(rank0.train_rows)
    single = open_source(path, small(), batch_size=8, seed=0, device=CPU)
    assert np.array_equal(single.test_rows, rank0.test_rows)
    assert torch.equal(single.next_batch().values, rank0.next_batch().values)


def test_criteo_ranks_read_alternate_blocks():
    """World 2, batch 8: rank 0 reads lines 1-8, 17-24, ...; rank 1 lines 9-16, 25-32, ... of each file;
    together the first global batch is the first 16 lines, as one process with batch 16 reads them."""
    spec = f"criteo:{DATA / 'criteo_sample.tsv'}"
    one = open_source(spec, small(), batch_size=8, seed=0, device=CPU)
    ranks = [open_source(spec, small(), batch_size=8, seed=0, device=CPU, rank=r, world_size=2) for r in (0, 1)]
    for _ in range(5):  # 48 lines: 3 blocks a rank an epoch, into the second epoch
        for r in ranks:
            want = one.next_batch()
            got = r.next_batch()
            assert torch.equal(got.values, want.values) and torch.equal(got.dense, want.dense)
    state = ranks[1].state_dict()
    again = open_source(spec, small(), batch_size=8, seed=0, device=CPU, rank=1, world_size=2)
    again.load_state_dict(state)
    assert torch.equal(again.next_batch().values, ranks[1].next_batch().values)


def test_criteo_rank_bad_rows_counted_by_their_rank():
    bad = [BadRows(skip=True), BadRows(skip=True)]
    ranks = [criteo(DATA / "criteo_bad.tsv", 4, bad[r], rank=r, world_size=2) for r in (0, 1)]
    for r in ranks:
        for _ in range(4):
            r.next_batch()
    # blocks of 4 lines: rank 0 lines 1-4, 9-12, 17-20 (bad 10, 18); rank 1 lines 5-8, 13-16 (bad 5, 15)
    assert bad[0].count == 2 and bad[1].count == 2
    assert sorted(e.split(": ", 1)[0].rsplit(":", 1)[1] for b in bad for e in b.examples) == ["10", "15", "18", "5"]


def test_ranks_deal_the_runs_whole_stream_so_their_steps_are_one_process_global_batches(tmp_path):
    """Blocks go to the ranks by their place in the run's stream (files one after another, epoch after epoch),
    not in each file from its first line: files of 5 and 3 lines, batch 2, world 2 read line 13 twice and
    line 22 never in the first epoch's two steps. A rank beyond the lines of a short file reads the next
    epoch's (was: 'no rows for rank 2 of 3'), as one process's global batch does."""
    lines = criteo_lines()
    (tmp_path / "a.tsv").write_bytes(b"".join(lines[:5]))
    (tmp_path / "b.tsv").write_bytes(b"".join(lines[5:8]))
    files = [tmp_path / "a.tsv", tmp_path / "b.tsv"]
    for batch, world in ((2, 2), (4, 3), (3, 2)):
        one = criteo(files, batch * world, BadRows(skip=False))
        ranks = [criteo(files, batch, BadRows(skip=False), rank=r, world_size=world) for r in range(world)]
        for _ in range(5):
            want = one.next_batch()
            got = [r.next_batch() for r in ranks]
            assert torch.equal(torch.cat([g.dense for g in got]), want.dense)
    rec = write_records(tmp_path / "t.bin", 30)
    for batch, world in ((4, 3), (4, 8), (5, 2)):
        one = MLPerfBinarySource(tmp_path / "t.bin", small(), batch_size=batch * world, bad_rows=BadRows(skip=False))
        ranks = [MLPerfBinarySource(tmp_path / "t.bin", small(), batch_size=batch, bad_rows=BadRows(skip=False),
                                    rank=r, world_size=world) for r in range(world)]
        for _ in range(4):
            want = one.next_batch()
            assert torch.equal(torch.cat([r.next_batch().dense for r in ranks]), want.dense)
    assert rec.shape == (30, 40)


def test_mlperf_ranks_read_alternate_blocks(tmp_path):
    write_records(tmp_path / "t.bin", 30)  # blocks of 4: rank 0 gets 0-3, 12-15, 24-27; rank 1 4-7, 16-19, 28-29
    one = MLPerfBinarySource(tmp_path / "t.bin", small(), batch_size=4, bad_rows=BadRows(skip=False))
    want = [one.next_batch() for _ in range(8)]  # records 0..31: wraps after 30
    ranks = [MLPerfBinarySource(tmp_path / "t.bin", small(), batch_size=4, bad_rows=BadRows(skip=False), rank=r,
                                world_size=3) for r in range(3)]
    for r, got in enumerate(ranks):
        for w in want[r::3]:  # over the epoch's end: rank 1's third block is records 28, 29, 0, 1
            assert torch.equal(got.next_batch().values, w.values)


def test_mlperf_rank_bad_record_named_by_its_file_position(tmp_path):
    rec = write_records(tmp_path / "t.bin", 16)
    rec[5, 0] = 2
    rec.tofile(tmp_path / "t.bin")
    src = MLPerfBinarySource(tmp_path / "t.bin", small(), batch_size=4, bad_rows=BadRows(skip=False), rank=1,
                             world_size=2)
    with pytest.raises(DataError, match=r"t\.bin:6: row 6: label must be 0 or 1"):
        src.next_batch()


def test_a_rank_dealt_only_bad_records_says_so(tmp_path):
    rec = write_records(tmp_path / "t.bin", 8)
    rec[4:, 0] = 3  # rank 1's block of every epoch
    rec.tofile(tmp_path / "t.bin")
    src = MLPerfBinarySource(tmp_path / "t.bin", small(), batch_size=4, bad_rows=BadRows(skip=True), rank=1,
                             world_size=2)
    with pytest.raises(DataError, match="no good row in the whole file dealt to rank 1 of 2"):
        src.next_batch()


# --- 10: --eval-data only for file sources; directories -------------------------------------------------

@pytest.mark.parametrize("spec", ["synthetic", f"movielens:{DATA / 'ml_sample.data'}"])
def test_eval_spec_rejected_where_it_would_be_ignored(spec):
    with pytest.raises(ValueError, match="eval data .* is only for criteo and mlperf data"):
        open_source(spec, small(), batch_size=4, seed=0, device=CPU, eval_spec=f"criteo:{DATA / 'criteo_sample.tsv'}")


@pytest.mark.parametrize("kind", ["criteo", "mlperf", "movielens"])
def test_directory_is_reported_as_a_directory(tmp_path, kind):
    with pytest.raises(FileNotFoundError, match=re.escape(f"{tmp_path} is a directory, not a file")):
        open_source(f"{kind}:{tmp_path}", small(), batch_size=4, seed=0, device=CPU)


@pytest.mark.parametrize("spec", [f"criteo:{DATA / 'criteo_sample.tsv'}", f"movielens:{DATA / 'ml_sample.data'}"])
def test_a_synthetic_pool_with_file_data_is_refused(spec):
    """Was ignored: `bench e2e --synthetic-pool 8 --data criteo:...` timed the file's batches as asked-for repeats."""
    with pytest.raises(ValueError, match="--synthetic-pool 8 repeats synthetic batches; .* data reads its file"):
        open_source(spec, small(), batch_size=4, seed=0, device=CPU, synthetic_pool=8)
