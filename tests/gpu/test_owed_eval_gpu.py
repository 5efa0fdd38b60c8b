"""On the GPU machine: a resume that runs the evaluation a bad eval file stopped evaluates what the run would have,
eager and with the dense half CUDA-graphed: the final one (``Trainer._owed_evaluation``, which skips the precompile
and any step) and a periodic one (made before the precompile, then training on). Their CPU tests
(tests/test_user_audit_train.py) ran neither the precompile nor a graph."""

from __future__ import annotations

from pathlib import Path

import pytest

from polyrec.data import DataError
from polyrec.runtime import TrainConfig, Trainer

pytestmark = pytest.mark.gpu

SAMPLE = Path(__file__).parent.parent / "data" / "criteo_sample.tsv"
STEPS = 4


def _config(run: Path, eval_path: Path, graphs: bool, eval_every: int, resume: bool = False) -> TrainConfig:
    return TrainConfig(preset="dcnv2-small", data=f"criteo:{SAMPLE}", eval_data=f"criteo:{eval_path}", steps=STEPS,
                       eval_every=eval_every, batch_size=8, row_cap=100, log_every=1000, checkpoint_dir=run,
                       device="cuda", embedding_backend="polyrec", dense_backend="polyrec", cuda_graphs=graphs,
                       resume=resume)


@pytest.mark.parametrize("eval_every", [0, 2], ids=["final", "periodic"])
@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "graphs"])
def test_the_owed_evaluation_is_the_one_the_run_would_have_made(tmp_path, graphs, eval_every):
    good, bad = tmp_path / "eval.tsv", tmp_path / "eval_bad.tsv"  # copies: no warning that training reads them
    good.write_bytes(SAMPLE.read_bytes())
    bad.write_bytes(b"1\t2\n" + SAMPLE.read_bytes())  # its first row has 2 columns of 40
    straight = Trainer(_config(tmp_path / "straight", good, graphs, eval_every), progress=False).train()
    with pytest.raises(DataError, match=r"eval_bad\.tsv:1: expected 40"):
        Trainer(_config(tmp_path / "run", bad, graphs, eval_every), progress=False).train()
    owed = Trainer(_config(tmp_path / "run", good, graphs, eval_every, resume=True), progress=False).train()
    steps = [2, STEPS] if eval_every else [STEPS]
    assert (owed.status, owed.step, [e["step"] for e in owed.evals]) == ("done", STEPS, steps), owed.message
    assert [e["step"] for e in straight.evals] == steps
    for want, got in zip(straight.evals, owed.evals):
        assert got["logloss"] == pytest.approx(want["logloss"], rel=1e-4)
        assert got["auc"] == pytest.approx(want["auc"], abs=1e-3)
