"""FusedAdagrad (polyrec.kernels.dense_optim) through the Triton interpreter against torch.optim.Adagrad,
and its kernel's compile fit on sm_90 / gfx942 / gfx950."""

from __future__ import annotations

import copy
import io

import pytest
import torch

from compile_util import COMPILE_DEVICES, INTERPRETING, compile_only, unfit_jobs
from polyrec.kernels import dense_optim
from polyrec.kernels.dense_optim import BLOCK, FusedAdagrad

interpreted = pytest.mark.skipif(not INTERPRETING, reason="the kernel runs on the CPU only through Triton's "
                                 "interpreter (make test sets it)")
#: Odd sizes, one past a program's block, a scalar-sized tensor: every program's mask is exercised.
SHAPES = [(3, 7), (BLOCK + 1,), (1,), (40, 30)]


def _params(gen: torch.Generator) -> list[torch.Tensor]:
    return [torch.randn(s, generator=gen).requires_grad_() for s in SHAPES]


@interpreted
@pytest.mark.parametrize("lr_decay,init", [(0.0, 0.0), (0.1, 0.5)])
def test_steps_follow_torch_adagrad(lr_decay, init):
    """Four steps, one of them with a parameter that has no gradient (it keeps its step count): the
    parameters and sums follow torch.optim.Adagrad's."""
    gen = torch.Generator().manual_seed(0)
    ours = _params(gen)
    ref = [p.detach().clone().requires_grad_() for p in ours]
    opt = FusedAdagrad(ours, lr=0.05, lr_decay=lr_decay, eps=1e-10, initial_accumulator_value=init)
    ref_opt = torch.optim.Adagrad(ref, lr=0.05, lr_decay=lr_decay, eps=1e-10, initial_accumulator_value=init)
    for step in range(4):
        for i, (p, q) in enumerate(zip(ours, ref)):
            g = None if (step == 2 and i == 1) else torch.randn(p.shape, generator=gen)
            p.grad = None if g is None else g.clone()
            q.grad = None if g is None else g.clone()
        opt.step()
        ref_opt.step()
    for p, q in zip(ours, ref):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(opt.state[p]["sum"], ref_opt.state[q]["sum"], rtol=1e-6, atol=1e-7)
        assert opt.state[p]["step"].item() == ref_opt.state[q]["step"].item()


@interpreted
def test_state_dict_loads_across_torch_adagrad():
    """A torch.optim.Adagrad state dict continues in FusedAdagrad (and back) as torch's own would."""
    gen = torch.Generator().manual_seed(1)
    ref = _params(gen)
    ref_opt = torch.optim.Adagrad(ref, lr=0.05)
    for p in ref:
        p.grad = torch.randn(p.shape, generator=gen)
    ref_opt.step()
    ours = [p.detach().clone().requires_grad_() for p in ref]
    opt = FusedAdagrad(ours, lr=0.05)
    opt.load_state_dict(copy.deepcopy(ref_opt.state_dict()))  # as through a checkpoint file
    for p, q in zip(ours, ref):
        g = torch.randn(p.shape, generator=gen)
        p.grad, q.grad = g.clone(), g.clone()
    opt.step()
    ref_opt.step()
    for p, q in zip(ours, ref):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)
    back = torch.optim.Adagrad([p.detach().clone() for p in ours], lr=0.05)
    back.load_state_dict(copy.deepcopy(opt.state_dict()))
    assert all(torch.equal(back.state[b]["sum"], opt.state[p]["sum"]) for b, p in zip(back.param_groups[0]["params"], ours))


@interpreted
def test_bad_parameters_and_gradients_are_refused():
    p = torch.zeros(4, dtype=torch.float64, requires_grad=True)
    p.grad = torch.zeros(4, dtype=torch.float64)
    with pytest.raises(ValueError, match="contiguous fp32"):
        FusedAdagrad([p]).step()
    q = torch.zeros(4, requires_grad=True)
    q.grad = torch.zeros(8)[::2]  # strided
    with pytest.raises(ValueError, match="gradients must be dense contiguous fp32"):
        FusedAdagrad([q]).step()
    with pytest.raises(ValueError, match="must be >= 0"):
        FusedAdagrad([q], lr=-1.0)


@compile_only
@pytest.mark.parametrize("name", COMPILE_DEVICES)
def test_compile_jobs_fit(name):
    assert unfit_jobs(dense_optim.compile_jobs, name) == []


def test_the_trainer_takes_it_for_polyrecs_gpu_path_only():
    """``dense_optimizer``: FusedAdagrad where the trainer asks for the fused path (polyrec's dense
    layers on a GPU); torch's Adagrad otherwise (the direct port, the CPU), Adam always torch's."""
    from polyrec.runtime.trainer import dense_optimizer

    params = [torch.nn.Parameter(torch.zeros(3))]
    assert type(dense_optimizer(params, "adagrad", 0.1, fused=True)) is FusedAdagrad
    assert type(dense_optimizer(params, "adagrad", 0.1, fused=False)) is torch.optim.Adagrad
    assert type(dense_optimizer(params, "adam", 0.1, fused=True)) is torch.optim.Adam


@interpreted
def test_tables_are_kept_by_address_and_step_size(monkeypatch):
    """Steps whose gradients sit at addresses seen before reuse those tables (two gradient buffers
    taken in turn, as the trainer's allocator does); a new address builds new ones, dropping the least
    recently used; the parameters follow torch.optim.Adagrad's throughout (a stale table would update
    from the wrong gradient)."""
    monkeypatch.setattr(dense_optim, "TABLES_KEPT", 2)
    gen = torch.Generator().manual_seed(1)
    ours = _params(gen)
    ref = [p.detach().clone().requires_grad_() for p in ours]
    buffers = [[torch.zeros_like(p) for p in ours] for _ in range(3)]
    opt, ref_opt = FusedAdagrad(ours, lr=0.05), torch.optim.Adagrad(ref, lr=0.05)
    built = []
    real = dense_optim._device_tables
    monkeypatch.setattr(dense_optim, "_device_tables", lambda *args: built.append(1) or real(*args))
    for step, which in enumerate((0, 1, 0, 1, 2, 1, 0)):
        for p, q, buf in zip(ours, ref, buffers[which]):
            g = torch.randn(p.shape, generator=gen)
            p.grad, q.grad = buf.copy_(g), g.clone()
        opt.step()
        ref_opt.step()
    # buffers 0 and 1; 2 drops 0 (used before 1); 1 is kept; 0 again: 4 (emptying the cache when full: 5)
    assert len(built) == 4
    for p, q in zip(ours, ref):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)


@interpreted
def test_step_counts_stay_right_across_a_state_dict_and_partial_steps():
    """The step counts (one shared tensor of views) follow torch's through steps where one parameter
    has no gradient, a state dict saved and loaded into a new optimizer, and a count set by hand
    (unlinked: counted on its own); with lr_decay the step size depends on them."""
    gen = torch.Generator().manual_seed(2)
    ours = _params(gen)
    ref = [p.detach().clone().requires_grad_() for p in ours]
    opt = FusedAdagrad(ours, lr=0.05, lr_decay=0.3)
    ref_opt = torch.optim.Adagrad(ref, lr=0.05, lr_decay=0.3)

    def step(skip: int | None = None) -> None:
        for i, (p, q) in enumerate(zip(ours, ref)):
            g = None if i == skip else torch.randn(p.shape, generator=gen)
            p.grad, q.grad = (None, None) if g is None else (g.clone(), g.clone())
        opt.step()
        ref_opt.step()

    step()
    step(skip=1)
    buffer = io.BytesIO()
    torch.save(opt.state_dict(), buffer)  # as a checkpoint: the shared counts saved once, views of them
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    opt = FusedAdagrad(ours, lr=0.05, lr_decay=0.3)
    opt.load_state_dict(saved)
    assert all(opt.state[p]["step"]._base is opt._counts for p in ours)  # linked again after the load
    step()
    opt.state[ours[2]]["step"] = opt.state[ours[2]]["step"].clone()
    step()
    for p, q in zip(ours, ref):
        assert opt.state[p]["step"].item() == ref_opt.state[q]["step"].item()
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)
