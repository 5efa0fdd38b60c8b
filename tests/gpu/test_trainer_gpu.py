"""On the GPU machine: the trainer's step paths that only a GPU has (CUDA-graphed dense half, the
semi-synchronous side stream) train as the eager sync step does, through the gradient tap that hands
the embedding backward the dense half's gradient; a resumed run continues the same losses with the
GPU's dense optimizer (``FusedAdagrad``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from polyrec.runtime import TrainConfig, Trainer
from resume_check import assert_resume_repeats_losses

pytestmark = pytest.mark.gpu

STEPS = 6


def _losses(**changes) -> tuple[list[float], torch.Tensor, torch.Tensor]:
    """Losses of the first steps, and the embedding weights before and after them (dcnv2-small,
    fixed seed)."""
    cfg = TrainConfig(preset="dcnv2-small", data="synthetic:uniform", batch_size=2048, steps=STEPS, device="cuda",
                      embedding_backend="polyrec", dense_backend="polyrec", log_every=10**9, **changes)
    trainer = Trainer(cfg, progress=False)
    weights = trainer.model.embeddings.tbe.weights
    initial = weights.detach().clone()
    losses = [float(trainer.train_step()) for _ in range(STEPS)]
    return losses, initial, weights.detach().clone()


@pytest.mark.parametrize("changes", [{"cuda_graphs": True}, {"pipeline": "semi-sync"},
                                     {"pipeline": "semi-sync", "cuda_graphs": True}],
                         ids=["graphs", "semi-sync", "semi-sync+graphs"])
def test_gpu_step_paths_train_like_the_eager_step(changes):
    """Same losses as the eager sync step within bf16 noise (the graphed GEMMs may pick other
    kernels; semi-sync reads tables one update old, so its losses move a little more), and the
    embedding tables were updated by the backward (not left at their initial values)."""
    eager, initial, eager_weights = _losses()
    other, other_initial, weights = _losses(**changes)
    tolerance = 0.05 if changes.get("pipeline") == "semi-sync" else 0.01
    assert other == pytest.approx(eager, rel=tolerance)
    assert torch.equal(other_initial, initial)  # same seed, same tables before the first step
    assert not torch.equal(weights, initial) and torch.isfinite(weights).all()
    moved = float((weights - initial).abs().sum())  # a host float: pytest.approx cannot read a CUDA tensor
    assert moved == pytest.approx(float((eager_weights - initial).abs().sum()), rel=0.2)


@pytest.mark.parametrize("rows", ["fp16", "bf16"])
def test_half_precision_rows_train_like_fp32_rows(rows):
    """``--embedding-dtype fp16|bf16``: the tables are stored in that dtype, updated (stochastic
    rounding), and the losses follow the fp32-row run within half-precision noise."""
    fp32, _, _ = _losses()
    half, initial, weights = _losses(embedding_dtype=rows)
    assert weights.dtype == getattr(torch, {"fp16": "float16", "bf16": "bfloat16"}[rows])
    assert half == pytest.approx(fp32, rel=0.02)
    assert not torch.equal(weights, initial) and torch.isfinite(weights.float()).all()


@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "graphs"])
def test_resume_continues_the_same_losses_with_the_fused_dense_optimizer(tmp_path, graphs):
    """Checkpoint after 4 steps, resume to 8: the same losses bit for bit as 8 steps straight. On a GPU the
    dense Adagrad is ``FusedAdagrad`` (its step counts views into one tensor, re-linked when a state dict
    is loaded; its address tables kept between steps): a count or a sum left behind would change the
    resumed losses."""

    def run(directory: Path, steps: int, resume: bool = False):
        cfg = TrainConfig(preset="dcnv2-small", data="synthetic:uniform", batch_size=2048, steps=steps, device="cuda",
                          embedding_backend="polyrec", dense_backend="polyrec", log_every=1, cuda_graphs=graphs,
                          checkpoint_dir=directory, resume=resume)
        trainer = Trainer(cfg, progress=False)
        assert type(trainer.optimizer).__name__ == "FusedAdagrad"
        return trainer.train()

    assert_resume_repeats_losses(run, tmp_path)


def test_graphed_step_reads_the_lookup_where_it_was_written():
    """``--cuda-graphs`` with the sync pipeline: every step's lookup lands in the buffer the graph was
    captured on (``PolyrecEmbeddings.hold_output``), so a graphed step copies no tensor of the lookup's
    size into the graph and assembles DLRM-DCNv2's x0 with no cat (profiler: no copy or cat kernel half as
    long as a plain copy of the lookup's buffer)."""
    cfg = TrainConfig(preset="mlperf-dcnv2", row_cap=100_000, data="synthetic:uniform", batch_size=16384, steps=10,
                      device="cuda", embedding_backend="polyrec", dense_backend="polyrec", log_every=10**9,
                      cuda_graphs=True)
    trainer = Trainer(cfg, progress=False)
    for _ in range(3):
        trainer.train_step()
    embeddings = trainer.model.embeddings
    held = embeddings._held
    assert trainer._graphed and held is not None
    assert embeddings._latest == held.data_ptr() + embeddings.lead_columns * held.element_size()
    plain = torch.empty_like(held)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    plain.copy_(held)  # once untimed
    torch.cuda.synchronize()
    start.record()
    plain.copy_(held)
    end.record()
    torch.cuda.synchronize()
    copy_us = start.elapsed_time(end) * 1e3
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        trainer.train_step()
        torch.cuda.synchronize()
    assert embeddings._latest == held.data_ptr() + embeddings.lead_columns * held.element_size()
    kernels = [(e.key, e.device_time_total / e.count) for e in prof.key_averages() if e.device_time_total > 0]
    large = [(k, us) for k, us in kernels if ("copy_kernel" in k or "CatArrayBatchedCopy" in k) and us > 0.5 * copy_us]
    assert not large, (copy_us, large)
