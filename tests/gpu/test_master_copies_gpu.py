"""On the GPU machine: the compute-dtype copies ``FusedAdagrad`` writes (polyrec.kernels.master_copies)
equal torch's cast of the updated masters bit for bit, and a training run that hands them to the forward
makes the same losses, bit for bit, as one that casts the masters every step."""

from __future__ import annotations

from unittest import mock

import pytest
import torch

from polyrec.kernels import dcn, gemm
from polyrec.kernels.dense_optim import FusedAdagrad
from polyrec.kernels.master_copies import cast, compute_copy, kept_copy
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
    with mock.patch.multiple(gemm, compute_copy=compute_copy if kept else cast), \
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
