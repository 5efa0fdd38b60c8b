"""On the GPU machine: the compute-dtype copies ``FusedAdagrad`` writes (polyrec.kernels.master_copies)
equal torch's cast of the updated masters bit for bit, and a training run that hands them to the forward
makes the same losses, bit for bit, as one that casts the masters every step."""

from __future__ import annotations

from unittest import mock

import pytest
import torch

from polyrec.kernels import dcn, gemm_layers
from polyrec.kernels.dense_optim import FusedAdagrad
from polyrec.kernels.master_copies import CapturedCopies, cast, compute_copy, kept_copy
from polyrec.runtime import TrainConfig, Trainer

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_copies_equal_torchs_cast_of_the_updated_masters(dtype):
    gen = torch.Generator(device="cuda").manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s, device="cuda", generator=gen)) for s in ((517, 33), (4099,), (1,))]
    opt = FusedAdagrad(params, lr=0.05)
    with torch.no_grad():
        copies = [compute_copy(p, dtype) for p in params]
    for _ in range(3):
        for p, c in zip(params, copies):
            p.grad = torch.randn(p.shape, device="cuda", generator=gen)
            c.fill_(float("nan"))
        opt.step()
        for p, c in zip(params, copies):
            assert kept_copy(p) is c
            assert torch.equal(c, p.detach().to(dtype))


def _run(kept: bool) -> tuple[list[float], Trainer]:
    cfg = TrainConfig(preset="dcnv2-small", data="synthetic:uniform", batch_size=2048, steps=8, device="cuda",
                      embedding_backend="polyrec", dense_backend="polyrec", log_every=10**9, cuda_graphs=False)
    with mock.patch.multiple(gemm_layers, compute_copy=compute_copy if kept else cast), \
            mock.patch.multiple(dcn, compute_copy=compute_copy if kept else cast):
        trainer = Trainer(cfg, progress=False)
        return [float(trainer.train_step()) for _ in range(8)], trainer


def test_training_with_kept_copies_makes_the_same_losses():
    kept, trainer = _run(kept=True)
    cast, _ = _run(kept=False)
    assert kept == cast
    dense = trainer.model.dense_parameters()
    held = [p for p in dense if kept_copy(p) is not None]
    assert len(held) >= len(dense) - 1  # all but a padded first weight (a new tensor each step)
    assert isinstance(trainer.optimizer, FusedAdagrad)


def _graphed_and_eager():
    """dcnv2-small's dense half on one batch, captured with ``keep_copies`` (``capture``) and eager over the same
    model."""
    from polyrec.models import DLRM, preset
    from polyrec.runtime.graphs import capture
    from polyrec.runtime.trainer import DenseLoss

    config = preset("dcnv2-small")
    model = DLRM(config, dense_backend="polyrec", device="cuda", seed=3)
    gen = torch.Generator(device="cuda").manual_seed(4)
    batch, features = 512, len(config.table_rows)
    sample = (torch.rand(batch, config.num_dense, device="cuda", generator=gen),
              torch.randn(batch, features, config.embedding_dim, device="cuda", generator=gen).requires_grad_(),
              torch.randint(0, 2, (batch,), device="cuda", generator=gen).float())
    graphed = capture(DenseLoss(model, torch.bfloat16), sample, keep_copies=True)
    return model, graphed, DenseLoss(model, torch.bfloat16), sample


def test_a_graph_keeping_copies_follows_masters_written_outside_the_optimizer():
    """Captured with ``keep_copies``, the graph reads the copies ``FusedAdagrad`` writes (the same tensors
    every step, no cast in the graph) and its loss follows the eager loss of the updated masters; masters
    then written by a torch op (as a checkpoint load writes them) are seen at the next replay, which without
    the refresh would read the stale copies."""
    model, graphed, eager, sample = _graphed_and_eager()
    params = model.dense_parameters()
    opt = FusedAdagrad(params, lr=0.05)
    held = [kept_copy(p) for p in params]
    assert sum(c is not None for c in held) >= len(params) - 1  # all but a padded first weight
    for _ in range(3):
        loss = graphed(*sample)
        loss.backward()
        with torch.no_grad():
            torch.testing.assert_close(loss, eager(*sample), rtol=2e-3, atol=1e-4)
        opt.step()
        opt.zero_grad(set_to_none=True)
        assert all(kept_copy(p) is c for p, c in zip(params, held) if c is not None)
    with torch.no_grad():
        for p in params:
            p.mul_(-0.5)
        expected = eager(*sample)  # casts the masters afresh (their copies are stale)
    with mock.patch.object(CapturedCopies, "refresh", lambda self: None):
        stale = graphed(*sample).detach()
    assert (stale - expected).abs() > 1e-2  # what the test would see without the refresh
    torch.testing.assert_close(graphed(*sample).detach(), expected, rtol=2e-3, atol=1e-4)
