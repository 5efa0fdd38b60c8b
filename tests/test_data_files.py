"""Data readers and their files: a source closes what it holds open (``close``, ``with``, garbage collection),
and a file with old-Mac CR-only line endings is named as such, not read as one long line."""

from __future__ import annotations

import gc
import re
import warnings
from pathlib import Path

import pytest
import torch

from polyrec.data import BadRows, DataError, open_source
from polyrec.data.criteo import MAX_LINE_BYTES, CriteoTSVSource
from polyrec.data.mlperf import MLPerfBinarySource
from polyrec.data.movielens import MovieLensSource
from test_data import small, write_records

DATA = Path(__file__).parent / "data"
CPU = torch.device("cpu")


def criteo(path: Path, **kw) -> CriteoTSVSource:
    return CriteoTSVSource([path], small(), batch_size=4, bad_rows=BadRows(skip=False), **kw)


def resource_warnings(drop) -> list[str]:
    """The ResourceWarnings raised while ``drop()`` runs and garbage is collected after it."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        drop()
        gc.collect()
    return [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]


# --- 1: closing a source ----------------------------------------------------------------------------------

def test_a_criteo_source_dropped_mid_file_leaves_no_open_file():
    """Its file stayed open across batches and was never closed: "unclosed file" when the source was dropped."""
    def drop():
        source = criteo(DATA / "criteo_sample.tsv")
        source.next_batch()
        del source

    assert resource_warnings(drop) == []


def test_close_closes_the_criteo_files_and_the_eval_files():
    eval_source = criteo(DATA / "criteo_sample.tsv")
    source = criteo(DATA / "criteo_sample.tsv", eval_source=eval_source, num_eval_batches=1)
    source.next_batch()
    source.eval_batches()
    held = source._file
    assert eval_source._file is None  # an evaluation closes the eval file when it is done
    source.close()
    assert held.closed and source._file is None


def test_a_closed_criteo_source_reads_on_from_its_position():
    a, b = criteo(DATA / "criteo_sample.tsv"), criteo(DATA / "criteo_sample.tsv")
    a.next_batch(), b.next_batch()
    a.close()
    assert torch.equal(a.next_batch().values, b.next_batch().values)
    a.close(), b.close()


def _open_paths() -> set[str]:
    """The files this process holds open (/proc/self/fd's links)."""
    fds = Path("/proc/self/fd")
    return {str(Path(fd).resolve()) for fd in fds.iterdir() if Path(fd).exists()}


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads the open files from /proc")
def test_a_finished_run_closes_its_data_files():
    """The trainer left its Criteo file open after train() returned (until the trainer was collected)."""
    from polyrec.runtime import TrainConfig, Trainer

    data = DATA / "criteo_sample.tsv"
    trainer = Trainer(TrainConfig(data=f"criteo:{data}", eval_data=f"criteo:{data}", steps=2, batch_size=4,
                                  row_cap=64, device="cpu", cpu_threads=1), progress=False)
    trainer.train()
    assert str(data.resolve()) not in _open_paths()


@pytest.mark.parametrize("spec", ["synthetic", f"criteo:{DATA / 'criteo_sample.tsv'}",
                                  f"movielens:{DATA / 'ml_sample.data'}", "mlperf"])
def test_every_source_closes_in_a_with_block(tmp_path, spec):
    if spec == "mlperf":
        write_records(tmp_path / "r.bin", 64)
        spec = f"mlperf:{tmp_path / 'r.bin'}"

    def use():
        with open_source(spec, small(), batch_size=4, seed=0, device=CPU) as source:
            source.next_batch()

    assert resource_warnings(use) == []


# --- 2: CR-only line endings --------------------------------------------------------------------------------

def cr_only(tmp_path: Path, name: str, repeat: int = 1) -> Path:
    """``name`` of tests/data with its line endings turned into old-Mac ones (b"\\r" alone), ``repeat`` times."""
    path = tmp_path / f"mac-{name}"
    path.write_bytes((DATA / name).read_bytes().replace(b"\n", b"\r") * repeat)
    return path


@pytest.mark.parametrize("repeat", [1, MAX_LINE_BYTES // 2000])  # a small file, one over MAX_LINE_BYTES
def test_criteo_cr_only_line_endings_are_named(tmp_path, repeat):
    """Was: "expected 40 tab-separated columns, found 1873" (the whole file one row), or for a big file "a line
    longer than 1,048,576 bytes; is this Criteo TSV?"."""
    path = cr_only(tmp_path, "criteo_sample.tsv", repeat)
    source = criteo(path)
    with pytest.raises(DataError, match=rf"{re.escape(str(path))}:1: .*CR-only line endings.*tr '\\r' '\\n'"):
        source.next_batch()
    source.close()


def test_criteo_cr_only_endings_stop_skip_bad_rows_too(tmp_path):
    path = cr_only(tmp_path, "criteo_sample.tsv")
    with pytest.raises(DataError, match="CR-only line endings"):
        CriteoTSVSource([path], small(), batch_size=4, bad_rows=BadRows(skip=True)).next_batch()


def test_criteo_windows_line_endings_still_read(tmp_path):
    path = tmp_path / "crlf.tsv"
    path.write_bytes((DATA / "criteo_sample.tsv").read_bytes().replace(b"\n", b"\r\n"))
    a, b = criteo(path), criteo(DATA / "criteo_sample.tsv")
    assert torch.equal(a.next_batch().values, b.next_batch().values)
    a.close(), b.close()


def test_a_stray_cr_inside_a_criteo_row_is_still_a_bad_row(tmp_path):
    lines = (DATA / "criteo_sample.tsv").read_bytes().splitlines(keepends=True)
    lines[2] = lines[2].replace(b"\t", b"\r\t", 1)
    path = tmp_path / "stray.tsv"
    path.write_bytes(b"".join(lines))
    with pytest.raises(DataError, match=r"stray\.tsv:3: label must be 0 or 1"):
        criteo(path).next_batch()


def test_a_binary_file_without_newlines_is_not_called_cr_only(tmp_path):
    path = tmp_path / "blob.tsv"
    path.write_bytes(b"1\t\x00\x01\r" * (MAX_LINE_BYTES // 4))
    with pytest.raises(DataError, match="a line longer than"):
        criteo(path).next_batch()


@pytest.mark.parametrize("name", ["ml_sample.data", "ml_sample.inter"])
def test_movielens_cr_only_line_endings_are_named(tmp_path, name):
    """Was: "expected 4 tab-separated columns, found 1201" for u.data, the .inter header read as u.data."""
    path = cr_only(tmp_path, name)
    with pytest.raises(DataError, match=rf"{re.escape(str(path))}:1: .*CR-only line endings.*tr '\\r' '\\n'"):
        MovieLensSource(path, batch_size=8, seed=0, bad_rows=BadRows(skip=True))


def test_movielens_cr_only_rows_after_a_newline_header_are_named(tmp_path):
    header, rest = (DATA / "ml_sample.inter").read_bytes().split(b"\n", 1)
    path = tmp_path / "mixed.inter"
    path.write_bytes(header + b"\n" + rest.replace(b"\n", b"\r"))
    with pytest.raises(DataError, match=r"mixed\.inter:2: .*CR-only line endings"):
        MovieLensSource(path, batch_size=8, seed=0, bad_rows=BadRows(skip=True))


def test_eval_files_that_are_training_files_are_named(tmp_path, monkeypatch):
    """An --eval-data file that the training data reads too measures how well the model remembers its training
    rows, not how it generalises (an AUC near 1 on a small file): named, however each spec spells it."""
    from polyrec.data.sources import shared_files

    days = [tmp_path / f"day_{d}.tsv" for d in range(3)]
    for day in days:
        day.write_bytes((DATA / "criteo_sample.tsv").read_bytes())
    (tmp_path / "link.tsv").symlink_to(days[2])
    monkeypatch.chdir(tmp_path)
    train = f"criteo:{days[0]},day_1.tsv"
    assert shared_files(train, "criteo:./day_1.tsv") == [days[1].resolve()]
    assert shared_files(train, f"criteo:{days[2]}") == []  # the same bytes in another file: the user's call
    assert shared_files(f"criteo:{days[2]}", "criteo:link.tsv") == [days[2].resolve()]
    assert shared_files(train, None) == [] and shared_files("synthetic", None) == []
    assert shared_files(train, "criteo:missing.tsv") == []  # the reader names a missing file


def test_a_run_evaluating_on_its_training_file_warns(tmp_path):
    from polyrec.runtime import TrainConfig, Trainer
    from polyrec.runtime.trainer import RunWarning

    data = DATA / "criteo_sample.tsv"
    with pytest.warns(RunWarning, match=re.escape(f"--eval-data reads {data.resolve()}, which the training data "
                                                  "reads too")):
        Trainer(TrainConfig(data=f"criteo:{data}", eval_data=f"criteo:{data}", steps=1, batch_size=4,
                            row_cap=100, device="cpu", cpu_threads=1), progress=False)
