"""User audit of distributed training on the CPU (gloo, 2 processes): failing-first tests of what it found."""

from __future__ import annotations

import datetime as dt
import json
import os

import numpy as np
import pytest
import torch

from distributed_util import criteo_file as _criteo_file, train_on_ranks as _run
from polyrec.data import BadRows
from polyrec.data.criteo import CriteoTSVSource
from polyrec.data.mlperf import MLPerfBinarySource
from polyrec.models import preset
from polyrec.runtime import parallel

B = 4  # rows per block (the batch size per rank)
CONFIG = preset("dcnv2-small").with_capped_rows(64)


def _mlperf_file(path, records: int) -> None:
    """``records`` MLPerf records, record i's first count i."""
    data = np.random.default_rng(0).integers(0, 50, size=(records, 40), dtype=np.int32)
    data[:, 0], data[:, 1] = np.arange(records) % 2, np.arange(records)
    data.tofile(path)


def _source(kind: str, path, rank: int, world: int):
    bad = BadRows(skip=False)
    if kind == "criteo":
        return CriteoTSVSource([path], CONFIG, batch_size=B, bad_rows=bad, rank=rank, world_size=world)
    return MLPerfBinarySource(path, CONFIG, batch_size=B, bad_rows=bad, rank=rank, world_size=world)


def _rows(batch) -> list[int]:
    """The file rows of a batch (their first count, log1p-transformed by the source)."""
    return [round(float(x)) for x in torch.expm1(batch.dense[:, 0])]


@pytest.mark.parametrize("kind", ["criteo", "mlperf"])
@pytest.mark.parametrize(("old", "new", "steps"), [(2, 1, 3), (1, 2, 3), (2, 3, 2), (3, 2, 2), (1, 2, 0)])
def test_a_resharded_resume_reads_the_blocks_after_the_old_jobs(tmp_path, kind, old, new, steps):
    """A dealt file resumed under another number of ranks continues where the old job's ranks had read
    together: the new ranks' next batches are the blocks that follow, each once. Before, each rank took its
    old namesake's position: 1 -> 2 ranks, rank 1 read the file from its start again (rows 4-7 after 12 rows
    trained); 2 -> 1, the last block of rank 1 was read once more."""
    path = tmp_path / ("data.tsv" if kind == "criteo" else "data.bin")
    (_criteo_file if kind == "criteo" else _mlperf_file)(path, 200)
    saved = []
    for rank in range(old):
        src = _source(kind, path, rank, old)
        for _ in range(steps):
            src.next_batch()
        saved.append(src.state_dict())
    for rank in range(new):
        src = _source(kind, path, rank, new)
        position = parallel.data_position(saved, rank, new, B)
        if position is not None:
            src.load_state_dict(position)
        first = (old * steps + (rank - old * steps) % new) * B  # the block after the old job's dealt to this rank
        assert _rows(src.next_batch()) == list(range(first, first + B)), (rank, position)


def test_a_resharded_resume_keeps_the_bad_row_count_on_rank_0():
    """The count reported is the sum over ranks: after resharding rank 0 carries every old rank's."""
    saved = [{"stream_line": 8 * (r + 1), "bad_rows": {"count": 2, "examples": [f"f:{r}a", f"f:{r}b"]}}
             for r in range(3)]
    moved = [parallel.data_position(saved, rank, 2, B) for rank in range(2)]
    assert moved[0]["bad_rows"] == {"count": 6, "examples": ["f:0a", "f:0b", "f:1a", "f:1b", "f:2a"]}
    assert moved[1]["bad_rows"] == {"count": 0, "examples": []}
    assert moved[0]["stream_line"] == moved[1]["stream_line"] == 24


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                    reason="the TBE runs on the CPU only through Triton's interpreter")
def test_polyrec_train_resumes_a_criteo_stream_on_another_rank_count(tmp_path):
    """2 ranks -> one process -> 2 ranks on a Criteo file: each run reads the blocks after the last one's
    (positions in lines; block k is lines 16k+1..16k+16)."""
    data = tmp_path / "train.tsv"
    _criteo_file(data, 400)
    ckpt = tmp_path / "ckpt"
    common = ["--data", f"criteo:{data}", "--row-cap", "64", "--batch-size", "16", "--device", "cpu",
              "--embedding-backend", "polyrec", "--dense-backend", "torch", "--eval-batches", "1", "--json",
              "--checkpoint-dir", str(ckpt)]

    def positions() -> list[int]:
        state = torch.load(ckpt / "checkpoint.pt", weights_only=True)
        return [d["stream_line"] for d in state.get("data_by_rank") or [state["data"]]]

    _run(2, *common, "--steps", "2")
    assert positions() == [48, 64]
    _run(0, *common, "--steps", "3", "--resume")
    assert positions() == [80]  # block 4 (was block 3 again: [64])
    _run(2, *common, "--steps", "4", "--resume")
    assert positions() == [112, 96]  # blocks 5 and 6 (was rank 1 from the file's start: [112, 16])
    assert torch.load(ckpt / "checkpoint.pt", weights_only=True)["step"] == 4


TINY = ["--row-cap", "64", "--batch-size", "16", "--device", "cpu", "--embedding-backend", "polyrec",
        "--dense-backend", "torch", "--eval-batches", "1", "--json"]


def _records(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                    reason="the TBE runs on the CPU only through Triton's interpreter")
def test_a_bad_row_in_rank_1s_first_block_stops_every_rank_before_the_first_step(tmp_path):
    """A malformed row in rank 1's first block: every rank stops before the first step (nothing trained, nothing
    saved), each names the row and rank 0's metrics log and --json output end with it. Before, rank 1 stopped
    alone and rank 0 failed in its next collective ("a peer rank failed"), its log without a ``stopped`` event."""
    data, ckpt = tmp_path / "train.tsv", tmp_path / "ckpt"
    _criteo_file(data, 200, bad=20)  # line 21: block 1, rank 1's
    proc = _run(2, *TINY, "--data", f"criteo:{data}", "--steps", "4", "--checkpoint-dir", str(ckpt), ok=False)
    unsaved = "no step trained since the run started: nothing saved"
    assert f"error: rank 1: {data}:21: expected 40 tab-separated columns, found 3; {unsaved}" in proc.stderr
    assert f"error: rank 0: {data}:21: expected 40 tab-separated columns, found 3 (rank 1's training data); " \
           f"{unsaved}" in proc.stderr, proc.stderr[-3000:]
    assert "peer rank failed" not in proc.stderr and not (ckpt / "checkpoint.pt").exists()
    stopped = _records((ckpt / "metrics.jsonl").read_text())[-1]
    assert (stopped["event"], stopped["reason"], stopped["step"], stopped["rank"]) == ("stopped", "training data", 0, 1)
    last = _records(proc.stdout)[-1]
    assert (last["event"], last["status"], last["step"]) == ("result", "data_error", 0), last


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                    reason="the TBE runs on the CPU only through Triton's interpreter")
def test_a_bad_row_of_rank_1_mid_run_keeps_the_last_step_on_every_rank(tmp_path):
    """A malformed row in rank 1's 5th block (line 149: block 9 of 16 rows). Before, rank 1 stopped alone while
    reading it ahead, after step 2, rank 0 failed as its peer went, nothing was saved and rank 0's metrics log
    had no ``stopped`` event. Now the ranks agree to stop after step 4 (the last before that batch), save its
    state with every rank's data position at the start of its next batch, rank 0 logs rank 1's error, and a
    resume with --skip-bad-rows trains as a run that skipped it from the start."""
    data = tmp_path / "train.tsv"
    _criteo_file(data, 400, bad=148)
    common = [*TINY, "--data", f"criteo:{data}", "--steps", "8", "--log-every", "1"]
    ckpt = tmp_path / "ckpt"
    proc = _run(2, *common, "--checkpoint-dir", str(ckpt), ok=False)
    saved = f"the run's state at step 4 is saved in {ckpt / 'checkpoint.pt'}"
    assert f"error: rank 1: {data}:149: expected 40 tab-separated columns, found 3; {saved}" in proc.stderr
    assert f"error: rank 0: {data}:149: expected 40 tab-separated columns, found 3 (rank 1's training data); " \
           f"{saved}" in proc.stderr, proc.stderr[-3000:]
    state = torch.load(ckpt / "checkpoint.pt", weights_only=True)
    assert state["step"] == 4 and [d["stream_line"] for d in state["data_by_rank"]] == [112, 128]
    stopped = _records((ckpt / "metrics.jsonl").read_text())[-1]
    assert (stopped["event"], stopped["reason"], stopped["step"], stopped["rank"]) == ("stopped", "training data", 4, 1)
    assert f"{data}:149: expected 40" in stopped["message"] and saved in stopped["message"]
    last = _records(proc.stdout)[-1]
    assert (last["event"], last["status"], last["step"]) == ("result", "data_error", 4), last

    def losses(out: str) -> list[float]:
        return [r["loss"] for r in _records(out) if r["event"] == "train"]

    resumed = _run(2, *common, "--skip-bad-rows", "--checkpoint-dir", str(ckpt), "--resume")
    whole = _run(2, *common, "--skip-bad-rows", "--checkpoint-dir", str(tmp_path / "whole"))
    assert losses(resumed.stdout) == losses(whole.stdout)[4:]
    assert losses(proc.stdout) == losses(whole.stdout)[:4]


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                    reason="the TBE runs on the CPU only through Triton's interpreter")
def test_a_non_finite_loss_error_names_each_rank():
    """Errors name their rank (docs/distributed.md); the non-finite loss's was the same bare line twice."""
    proc = _run(2, *TINY, "--steps", "3", "--log-every", "1", "--lr", "1e30", "--embedding-lr", "1e30", ok=False)
    for rank in (0, 1):
        assert f"error: rank {rank}: loss became nan" in proc.stderr, proc.stderr[-3000:]


def test_the_collective_timeout_is_an_option_of_polyrec_train(monkeypatch):
    """`--collective-timeout SECONDS` reaches the process group (it was DEFAULT_TIMEOUT_S, 600 s, with no option),
    is listed by --help and is refused unless a number of seconds above 0."""
    from typer.testing import CliRunner

    from polyrec.cli import app

    class Joined(Exception):
        """Raised by the stand-in for torch's init_process_group: the run goes no further."""

    timeouts = []

    def init_process_group(*args, timeout, **kwargs):
        timeouts.append(timeout)
        raise Joined

    monkeypatch.setattr(torch.distributed, "init_process_group", init_process_group)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    runner = CliRunner()
    result = runner.invoke(app, ["train", "--device", "cpu", "--collective-timeout", "7.5"])
    assert isinstance(result.exception, Joined) and timeouts == [dt.timedelta(seconds=7.5)], result.output
    assert "--collective-timeout" in runner.invoke(app, ["train", "--help"]).output
    for bad in ("0", "-1", "inf", "nan"):
        result = runner.invoke(app, ["train", "--device", "cpu", f"--collective-timeout={bad}"])
        assert result.exit_code == 2 and "error: rank 0: --collective-timeout must be" in result.stderr, result.output
    assert len(timeouts) == 1
