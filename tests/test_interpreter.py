"""The interpreter's scan by slices (``polyrec.kernels.interpreter``) gives bitwise the results of
Triton's element-by-element scan, for the TBE's segmented sum (through its numpy form on 32-bit data)
and other combines, on either axis, forward and reversed, in 1-D and 2-D; a launch patches
``triton.language`` once and computes what it did when every nested call patched it again."""

from __future__ import annotations

import os

import pytest
import torch
import triton
import triton.language as tl

from polyrec.kernels import interpreter
from polyrec.kernels.tbe_backward import segment_add

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="the interpreter's scan")


@triton.jit
def _max_with_count(va, ca, vb, cb):
    return tl.maximum(va, vb), ca + cb


@triton.jit
def _scan_kernel(flag_ptr, x_ptr, out_flag_ptr, out_ptr, R: tl.constexpr, C: tl.constexpr, AXIS: tl.constexpr,
                 REVERSE: tl.constexpr, SEGMENTED: tl.constexpr):
    offs = tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]
    flags = tl.load(flag_ptr + offs)
    x = tl.load(x_ptr + offs)
    if SEGMENTED:
        a, b = tl.associative_scan((flags, x), AXIS, segment_add, reverse=REVERSE)
    else:
        b, a = tl.associative_scan((x, flags), AXIS, _max_with_count, reverse=REVERSE)
    tl.store(out_flag_ptr + offs, a)
    tl.store(out_ptr + offs, b)


@triton.jit
def _scan_1d_kernel(flag_ptr, x_ptr, out_flag_ptr, out_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    a, b = tl.associative_scan((tl.load(flag_ptr + i), tl.load(x_ptr + i)), 0, segment_add)
    tl.store(out_flag_ptr + i, a)
    tl.store(out_ptr + i, b)


def _run(kernel, shape, dtype, rng, **flags):
    flag = (torch.rand(shape, generator=rng) < 0.3).to(torch.int32)
    x = (torch.randn(shape, generator=rng) * 1e3).to(dtype)  # large values: rounding shows any reordering
    outs = {}
    for name in ("generic_scan_by_elements", "scan_by_slices"):
        with pytest.MonkeyPatch.context() as m:
            from triton.runtime.interpreter import ScanOps
            m.setattr(ScanOps, "generic_scan", getattr(ScanOps, name) if name != "scan_by_slices"
                      else interpreter.scan_by_slices)
            out_flag, out = torch.full_like(flag, -7), torch.full_like(x, float("nan"))
            kernel[(1,)](flag, x, out_flag, out, *shape, **flags)
            outs[name] = (out_flag, out)
    (fa, xa), (fb, xb) = outs.values()
    assert torch.equal(fa, fb) and torch.equal(xa.view(torch.int16 if dtype != torch.float32 else torch.int32),
                                               xb.view(torch.int16 if dtype != torch.float32 else torch.int32))
    assert not torch.isnan(xb).any()
    return xb


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("segmented", [True, False])
def test_a_2d_scan_by_slices_is_bitwise_the_scan_by_elements(axis, reverse, segmented, rng):
    assert interpreter.install_scan_by_slices()
    _run(_scan_kernel, (8, 16), torch.float32, rng, AXIS=axis, REVERSE=reverse, SEGMENTED=segmented)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_a_1d_segmented_scan_by_slices_is_bitwise_the_scan_by_elements(dtype, rng):
    assert interpreter.install_scan_by_slices()
    _run(_scan_1d_kernel, (32,), dtype, rng)


def test_the_segmented_sum_restarts_at_each_flag(rng):
    """Against a plain loop: the scan being equal to the interpreter's is only worth it if both are right."""
    got = _run(_scan_1d_kernel, (16,), torch.float32, rng)
    gen = torch.Generator().manual_seed(1234)  # the same draws as _run's
    flag = (torch.rand(16, generator=gen) < 0.3).to(torch.int32)
    x = (torch.randn(16, generator=gen) * 1e3).to(torch.float32)
    want, acc = [], 0.0
    for f, v in zip(flag.tolist(), x.tolist()):
        acc = v if f or not want else acc + v
        want.append(acc)
    torch.testing.assert_close(got, torch.tensor(want), rtol=1e-6, atol=1e-3)


def test_the_segmented_sum_on_32_bit_data_takes_its_numpy_form(rng, monkeypatch):
    calls = []
    numpy_form = interpreter.NUMPY_COMBINES[segment_add.fn]
    monkeypatch.setitem(interpreter.NUMPY_COMBINES, segment_add.fn, lambda *a: calls.append(1) or numpy_form(*a))
    _run(_scan_1d_kernel, (16,), torch.float32, rng)
    assert len(calls) == 15  # one per position after the first, in the scan-by-slices run only
    calls.clear()
    _run(_scan_1d_kernel, (16,), torch.bfloat16, rng)
    assert not calls  # half precision: the interpreter's own arithmetic


@triton.jit
def _scaled(x, s):
    return x * s


@triton.jit
def _nested_kernel(x_ptr, out_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    x = _scaled(tl.load(x_ptr + i), 2.0)  # a jit function of this module, then one of Triton's (tl.core)
    tl.store(out_ptr + i, x + tl.sum(x, axis=0) + tl.max(x, axis=0))


def test_a_launch_patches_the_language_once_and_computes_as_before(rng, monkeypatch):
    from triton.runtime import interpreter as triton_interpreter

    assert interpreter.install_patch_once()
    patch_once = triton_interpreter._patch_lang
    each_call, patched = patch_once.each_call, []
    monkeypatch.setattr(patch_once, "each_call", lambda fn: patched.append(fn.__name__) or each_call(fn))
    x = torch.randn(4, 8, generator=rng)
    outs, calls = {}, {}
    for once in (True, False):
        monkeypatch.setattr(triton_interpreter, "_patch_lang", patch_once if once else patch_once.each_call)
        patched.clear()
        out = torch.full((4, 8), float("nan"))
        for row in range(4):
            _nested_kernel[(1,)](x[row], out[row], N=8)
        outs[once], calls[once] = out, list(patched)
    assert torch.equal(outs[True], outs[False]) and not torch.isnan(outs[True]).any()
    torch.testing.assert_close(outs[True], 2 * x + (2 * x).sum(1, keepdim=True) + (2 * x).amax(1, keepdim=True))
    # per launch the kernel's module (triton.language) and tl.sum's (triton.language.core) once each, where
    # every nested call (_scaled, tl.sum, tl.max) patched again
    assert calls[True] == ["_nested_kernel", "sum"] * 4, calls[True]
    assert len(calls[False]) >= 4 * 4 and "_scaled" in calls[False], calls[False]
