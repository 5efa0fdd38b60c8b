"""On the GPU machine: the first step's kernels compiled ahead from a dry run (``TrainConfig.precompile``)
change nothing the run computes and leave no kernel of the first steps or the first evaluation to compile on
launch, nor launcher to build; a graphed run compiles no kernel inside its capture, precompiled or not; and a
graphed run's train loop logs each step's own loss."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from polyrec.runtime import TrainConfig, Trainer

pytestmark = pytest.mark.gpu

STEPS = 6
#: (id, TrainConfig changes): the eager fp32-row step and the fastest form (bf16 rows, fp8 GEMMs, CUDA graphs).
CASES = [("eager", {"cuda_graphs": False}),
         ("fp8-graphs", {"embedding_dtype": "bf16", "precision": "fp8", "cuda_graphs": True})]


def _config(**changes) -> TrainConfig:
    return TrainConfig(**{"preset": "dcnv2-small", "data": "synthetic:uniform", "batch_size": 2048, "steps": STEPS,
                          "device": "cuda", "embedding_backend": "polyrec", "dense_backend": "polyrec",
                          "log_every": 10**9, **changes})


def _run(**changes) -> tuple[list[float], torch.Tensor, Trainer]:
    trainer = Trainer(_config(**changes), progress=False)
    losses = [float(trainer.train_step()) for _ in range(STEPS)]
    return losses, trainer.model.embeddings.tbe.weights.detach().clone(), trainer


@pytest.mark.parametrize("changes", [c for _, c in CASES], ids=[i for i, _ in CASES])
def test_precompile_trains_exactly_as_without(changes):
    """Bit for bit the same losses and tables: the dry steps' state is all put back."""
    losses, weights, trainer = _run(precompile=True, **changes)
    assert trainer.cold_start is not None and trainer.precompile_skipped is None
    plain_losses, plain_weights, plain = _run(precompile=False, **changes)
    assert plain.cold_start is None
    assert losses == plain_losses
    assert torch.equal(weights, plain_weights)


#: A fresh process with an empty Triton cache: the kernels the first steps compile after the precompile, and the
#: launchers (C modules) they build.
LATE_COMPILES = """
import json, sys
import torch
import triton.runtime.build as build
from triton.runtime.jit import JITFunction
from polyrec.runtime import TrainConfig, Trainer
changes = json.loads(sys.argv[1])
cfg = TrainConfig(preset="dcnv2-small", data="synthetic:uniform", batch_size=2048, steps=10, device="cuda",
                  log_every=10**9, **changes)
trainer = Trainer(cfg, progress=False)
cold = trainer.precompile()
late, captured, do_compile = [], [], JITFunction._do_compile
def counted(self, *args):
    late.append(self.fn.__qualname__)
    if torch.cuda.is_current_stream_capturing():
        captured.append(self.fn.__qualname__)
    return do_compile(self, *args)
JITFunction._do_compile = counted
builds, c_build = [], build._build
def built(name, *args):
    builds.append(name)
    return c_build(name, *args)
build._build = built
for _ in range(3):
    float(trainer.train_step())
steps_late, late[:] = list(late), []
trainer.evaluate()
eval_late, late[:] = list(late), []
from polyrec.data import open_source
short = open_source("synthetic:uniform", trainer.model_config, batch_size=1000, seed=1, device=trainer.rt.device)
trainer.source.eval_batches = lambda: [short.next_batch()]  # a held-out set's short last batch
trainer.evaluate()
print(json.dumps({"kernels": cold.kernels if cold else 0, "late": steps_late, "captured": captured,
                  "launchers": builds, "eval_late": eval_late, "short_eval_late": late}))
"""


def _late_compiles(changes: dict, tmp_path) -> dict:
    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "triton")}
    out = subprocess.run([sys.executable, "-c", LATE_COMPILES, json.dumps(changes)], env=env, capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("changes", [c for _, c in CASES], ids=[i for i, _ in CASES])
def test_first_steps_compile_nothing_after_the_precompile(changes, tmp_path):
    found = _late_compiles(changes, tmp_path)
    assert found["kernels"] >= 10  # dcnv2-small's step launches more distinct kernels than that
    # a graphed run's dry steps select their GEMMs as its capture will
    assert found["late"] == []
    assert found["eval_late"] == []  # the dry run's evaluation forward compiled the first evaluation's kernels
    assert found["short_eval_late"] == []  # a short held-out batch padded to them (Trainer.evaluate)
    assert found["launchers"] == []  # every launcher of a precompiled kernel was built with it


def test_graphed_run_compiles_no_kernel_inside_its_capture(tmp_path):
    """Without the precompile the kernels compile at their first launch: the dense half's in the graph's
    warm-up, none in its capture (a GEMM there is selected by GPU time alone, as in the warm-up)."""
    found = _late_compiles({**dict(CASES)["fp8-graphs"], "precompile": False}, tmp_path)
    assert len(found["late"]) >= 10  # all compiled at their first launch, as they should be without the precompile
    assert found["captured"] == []


def test_graphed_train_loop_logs_each_steps_loss():
    """A graphed step's loss is the graph's output buffer; the losses the loop keeps until it logs are each
    step's own (they were all the last step's)."""
    per_step, _, _ = _run(cuda_graphs=True)
    trainer = Trainer(_config(cuda_graphs=True, log_every=STEPS), progress=False)
    result = trainer.train()
    assert result.losses == pytest.approx(per_step, rel=1e-6)
    assert len(set(result.losses)) > 1
