"""Kept compute-dtype copies of master weights (polyrec.kernels.master_copies), written by FusedAdagrad
through the Triton interpreter: always equal to a fresh cast of the master when handed out."""

from __future__ import annotations

import pytest
import torch

from compile_util import INTERPRETING
from polyrec.kernels.dense_optim import BLOCK, FusedAdagrad
from polyrec.kernels import master_copies
from polyrec.kernels.master_copies import ATTR, compute_copy, keeping_in_capture, kept_copy

interpreted = pytest.mark.skipif(not INTERPRETING, reason="FusedAdagrad runs on the CPU only through Triton's "
                                 "interpreter (make test sets it)")
SHAPES = [(3, 7), (BLOCK + 1,), (1,), (40, 30)]


def _params(seed: int) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in SHAPES]


def _as_written(p: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``p`` rounded to ``dtype`` as ``adagrad_kernel`` writes it here: to nearest even (torch's cast) on a
    GPU; Triton 3.6's interpreter rounds fp32 -> bf16 toward zero (polyrec.kernels.place_columns)."""
    if INTERPRETING and dtype == torch.bfloat16:
        return (p.detach().view(torch.int32) & -65536).view(torch.float32).to(dtype)
    return p.detach().to(dtype)


def _grads(params, seed: int, skip: int | None = None) -> None:
    gen = torch.Generator().manual_seed(seed)
    for i, p in enumerate(params):
        p.grad = None if i == skip else torch.randn(p.shape, generator=gen)


@torch.no_grad()  # as inside the layers' autograd Functions
def test_a_parameters_copy_is_kept_and_handed_out_while_current():
    p = torch.nn.Parameter(torch.randn(5, 3))
    first = compute_copy(p, torch.bfloat16)
    assert torch.equal(first, p.detach().to(torch.bfloat16))
    assert compute_copy(p, torch.bfloat16) is first  # no second cast
    with torch.no_grad():
        p.mul_(3)  # a torch in-place op bumps the version: cast afresh
    again = compute_copy(p, torch.bfloat16)
    assert again is not first and torch.equal(again, p.detach().to(torch.bfloat16))
    assert compute_copy(p, torch.float32) is p  # the master's own dtype: no copy


@torch.no_grad()
def test_only_parameters_keep_copies_and_a_new_storage_is_seen():
    x = torch.randn(4)
    compute_copy(x, torch.bfloat16)
    assert not hasattr(x, ATTR)  # not a parameter: nothing kept
    p = torch.nn.Parameter(torch.randn(4))
    first = compute_copy(p, torch.bfloat16)
    p.data = torch.randn(4)  # swapped storage, version counter not bumped
    again = compute_copy(p, torch.bfloat16)
    assert again is not first and torch.equal(again, p.detach().to(torch.bfloat16))
    assert compute_copy(p, torch.float16).dtype == torch.float16  # another dtype: a new copy
    p.data = torch.randn(9)  # another size: the optimizer must not write 9 values into the 4 kept
    assert kept_copy(p) is None and not hasattr(p, ATTR)


@interpreted
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fused_adagrad_writes_the_kept_copies(dtype):
    """Three steps: the kept copies (poisoned before each step) equal a fresh cast of the updated
    masters bit for bit and are handed out without a cast; a parameter without a gradient in a step
    keeps its copy as it was; the masters follow a run without copies exactly."""
    ours, plain = _params(0), _params(0)
    opt, plain_opt = FusedAdagrad(ours, lr=0.05), FusedAdagrad(plain, lr=0.05)
    with torch.no_grad():  # as inside the layers' autograd Functions
        copies = [compute_copy(p, dtype) for p in ours]
    for step in range(3):
        skip = 1 if step == 1 else None
        for i, c in enumerate(copies):
            if i != skip:
                c.fill_(float("nan"))
        held = copies[1].clone()
        _grads(ours, step, skip)
        _grads(plain, step, skip)
        opt.step()
        plain_opt.step()
        for i, (p, q, c) in enumerate(zip(ours, plain, copies)):
            assert torch.equal(p, q)
            assert compute_copy(p, dtype) is c
            assert torch.equal(c, _as_written(p, dtype)), f"step {step}, parameter {i}"
        if skip is not None:
            assert torch.equal(copies[1], held)


@interpreted
def test_copies_of_the_fewer_dtype_are_dropped_not_left_stale():
    """One launch writes one copy dtype: the parameter whose copy is fp16 among bf16 ones loses it, and
    its next forward casts the updated master."""
    params = _params(1)
    opt = FusedAdagrad(params, lr=0.05)
    with torch.no_grad():
        for i, p in enumerate(params):
            compute_copy(p, torch.float16 if i == 0 else torch.bfloat16)
    _grads(params, 1)
    opt.step()
    assert kept_copy(params[0]) is None
    with torch.no_grad():
        assert torch.equal(compute_copy(params[0], torch.float16), params[0].detach().to(torch.float16))
        for p in params[1:]:
            assert torch.equal(compute_copy(p, torch.bfloat16), _as_written(p, torch.bfloat16))


@interpreted
def test_a_checkpoint_load_between_steps_is_seen():
    """Masters restored by ``load_state_dict`` (torch's in-place copy) after a step: the next forward
    casts the restored values, not the copy the optimizer wrote."""
    params = _params(2)
    module = torch.nn.ParameterList(params)
    saved = {k: v.clone() for k, v in module.state_dict().items()}
    opt = FusedAdagrad(params, lr=0.05)
    with torch.no_grad():
        for p in params:
            compute_copy(p, torch.bfloat16)
    _grads(params, 2)
    opt.step()
    module.load_state_dict(saved)
    with torch.no_grad():
        for p, v in zip(params, saved.values()):
            assert torch.equal(compute_copy(p, torch.bfloat16), v.to(torch.bfloat16))


def _capturing(monkeypatch, on: bool) -> None:
    """``compute_copy`` as inside a CUDA graph's capture or not (the CPU has none: the check is patched)."""
    monkeypatch.setattr(master_copies, "_capturing", lambda t: on)


@torch.no_grad()
def test_a_capture_drops_copies_unless_keeping(monkeypatch):
    p = torch.nn.Parameter(torch.randn(6, 2))
    first = compute_copy(p, torch.bfloat16)
    _capturing(monkeypatch, True)
    cast_in_graph = compute_copy(p, torch.bfloat16)
    assert cast_in_graph is not first and kept_copy(p) is None  # a plain capture casts and keeps nothing


@torch.no_grad()
def test_keeping_in_capture_hands_out_current_copies_and_refresh_restores_them(monkeypatch):
    """Under ``keeping_in_capture`` a current copy is handed out (the same tensor) and recorded, a stale one
    is cast afresh and not recorded; ``refresh`` writes a master's new values into its recorded copy in place
    (after a torch in-place write, or after the copy was dropped) and refuses a master with new storage."""
    current, stale = torch.nn.Parameter(torch.randn(6, 2)), torch.nn.Parameter(torch.randn(3))
    copy = compute_copy(current, torch.bfloat16)
    compute_copy(stale, torch.bfloat16)
    stale.mul_(2)
    _capturing(monkeypatch, True)
    with keeping_in_capture() as kept:
        assert compute_copy(current, torch.bfloat16) is copy
        assert compute_copy(current, torch.bfloat16) is copy
        fresh = compute_copy(stale, torch.bfloat16)
    assert torch.equal(fresh, stale.detach().to(torch.bfloat16)) and kept_copy(stale) is None
    assert [(m, c) for m, c, _ in kept.entries] == [(current, copy)]
    assert compute_copy(current, torch.bfloat16) is not copy  # outside the context: a plain capture, which drops it
    _capturing(monkeypatch, False)
    current.add_(1)
    kept.refresh()
    assert kept_copy(current) is copy and torch.equal(copy, current.detach().to(torch.bfloat16))
    current.mul_(-3)  # a torch in-place write: the copy is stale
    copy.fill_(float("nan"))
    kept.refresh()
    assert kept_copy(current) is copy and torch.equal(copy, current.detach().to(torch.bfloat16))
    copy.fill_(float("nan"))
    kept.refresh()  # current: not written
    assert copy.isnan().all()
    current.data = torch.randn(6, 2)
    with pytest.raises(RuntimeError, match="new storage"):
        kept.refresh()
