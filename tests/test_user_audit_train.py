"""A first user's audit of `polyrec train` and the data readers on the CPU: what it found broken."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from polyrec.data import DataError, open_source
from polyrec.models import preset
from polyrec.runtime import TrainConfig, Trainer
from polyrec.runtime.checkpoint import load_checkpoint

DATA = Path(__file__).parent / "data"


@pytest.fixture(autouse=True)
def _restore_threads():
    """cpu_threads=1 (fast when other test workers share the cores) changes a process-wide setting."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def criteo_config(run: Path, eval_path: Path, steps: int, **extra) -> TrainConfig:
    return TrainConfig(preset="dcnv2-small", data=f"criteo:{DATA / 'criteo_sample.tsv'}", eval_data=f"criteo:{eval_path}",
                       steps=steps, batch_size=8, row_cap=100, log_every=1000, checkpoint_dir=run, device="cpu",
                       cpu_threads=1, **extra)


def test_a_bad_eval_file_keeps_the_trained_state(tmp_path):
    """An eval file with a malformed row (found at the run's end, its first evaluation) stopped the run without
    its checkpoint: every step trained was lost. Now the state is saved, the error names it, and a resume with
    the eval file fixed goes on from it."""
    lines = (DATA / "criteo_sample.tsv").read_bytes().splitlines(keepends=True)
    bad = tmp_path / "eval_bad.tsv"
    bad.write_bytes(b"".join(lines[:2]) + b"1\t2\n" + b"".join(lines[2:]))
    run = tmp_path / "run"
    with pytest.raises(DataError, match=r"eval_bad\.tsv:3: expected 40 .*state at step 3 is saved in .*checkpoint\.pt"):
        Trainer(criteo_config(run, bad, 3), progress=False).train()
    assert load_checkpoint(run)["step"] == 3
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert (logged[-1]["event"], logged[-1]["reason"], logged[-1]["step"]) == ("stopped", "eval data", 3)
    result = Trainer(criteo_config(run, DATA / "criteo_sample.tsv", 4, resume=True), progress=False).train()
    assert (result.status, result.step, [e["step"] for e in result.evals]) == ("done", 4, [4])


def test_movielens_rows_of_another_width_are_bad(tmp_path):
    """u.data has 4 columns and an .inter row its header's count: a Criteo TSV given as MovieLens was read as
    ratings (user = label, item = I1, rating = I2, time = I3) until a row had an empty one of those fields."""
    with pytest.raises(DataError, match=r"criteo_sample\.tsv:1: expected 4 tab-separated columns, found 40"):
        open_source(f"movielens:{DATA / 'criteo_sample.tsv'}", preset("dcnv2-small"), batch_size=8, seed=0,
                    device=torch.device("cpu"))
    lines = (DATA / "ml_sample.inter").read_text().splitlines(keepends=True)
    wide = tmp_path / "wide.inter"
    wide.write_text("".join(lines[:3]) + lines[3].rstrip("\n") + "\t7\n" + "".join(lines[4:]))
    with pytest.raises(DataError, match=r"wide\.inter:4: expected 4 tab-separated columns, found 5"):
        open_source(f"movielens:{wide}", preset("dcnv2-small"), batch_size=8, seed=0, device=torch.device("cpu"))
