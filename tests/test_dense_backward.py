"""The fused dense backward epilogue (ReLU mask + bias-gradient column sums) against float64, through
the Triton interpreter; its torch fallback; and its compile fit on sm_90 / gfx942 / gfx950."""

from __future__ import annotations

import pytest
import torch

from compile_util import COMPILE_DEVICES, INTERPRETING, compile_only, unfit_jobs

from polyrec.kernels import dense_backward, fp8
from polyrec.kernels.dense_backward import DenseBackwardConfig, relu_bias_backward, rows_apart, select_config

needs_interpreter = pytest.mark.skipif(not INTERPRETING, reason="runs Triton kernels through TRITON_INTERPRET=1")
#: Small tiles so that the interpreter walks several programs in both dimensions and several loop
#: iterations per program, with ragged edges at odd B and N.
SMALL = DenseBackwardConfig(block_m=8, block_n=16, rows_per_program=24)
#: Bias tolerance, relative to the sum of |grad| per column: fp32 accumulation of inputs exact in fp32.
SUM_TOLERANCE = 1e-5


def _inputs(b: int, n: int, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """grad [b, n] random; y [b, n] with about a third exact zeros, a third negative, a third positive."""
    gen = torch.Generator().manual_seed(seed)
    grad = torch.randn(b, n, generator=gen).to(dtype)
    y = torch.randn(b, n, generator=gen)
    y[torch.rand(b, n, generator=gen) < 0.3] = 0.0
    y[0, 0], y[-1, -1] = 0.0, -0.0  # both signed zeros are masked
    return grad, y.to(dtype)


def _reference(grad, y, relu: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 masked gradient and its column sums."""
    g = grad.double()
    if relu:
        g = torch.where(y.double() > 0, g, torch.zeros_like(g))
    return g, g.sum(0)


def _check(grad, y, relu: bool, need_bias: bool, config: DenseBackwardConfig | None) -> None:
    ref_masked, ref_bias = _reference(grad, y, relu)
    masked, bias = relu_bias_backward(grad, y if relu else None, relu=relu, need_bias=need_bias, config=config)
    assert masked.dtype == grad.dtype and masked.shape == grad.shape
    assert torch.equal(masked.double(), ref_masked)  # a select: exact
    if not relu:
        assert masked is grad
    if not need_bias:
        assert bias is None
        return
    assert bias.dtype == torch.float32 and bias.shape == (grad.shape[1],)
    scale = grad.double().abs().sum(0).clamp_min(1.0)
    assert ((bias.double() - ref_bias).abs() / scale).max() < SUM_TOLERANCE


@needs_interpreter
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize(("relu", "need_bias"), [(True, True), (True, False), (False, True)])
def test_kernel_matches_float64(dtype, relu, need_bias):
    grad, y = _inputs(53, 37, dtype, seed=2 * relu + need_bias + (10 if dtype == torch.bfloat16 else 0))
    _check(grad, y, relu, need_bias, SMALL)


@needs_interpreter
def test_poisoned_output_is_fully_written(monkeypatch):
    """The masked gradient and the partials come from freshly allocated memory: poison them."""
    real_empty = torch.empty

    def poisoned(*args, **kwargs):
        t = real_empty(*args, **kwargs)
        return t.fill_(float("nan")) if t.is_floating_point() else t

    monkeypatch.setattr(dense_backward.torch, "empty", poisoned)
    grad, y = _inputs(41, 29, torch.bfloat16, seed=7)
    _check(grad, y, True, True, SMALL)


@needs_interpreter
def test_selected_config_and_nan_semantics():
    """The selected config (one program per column block here); NaN grad under the mask gives 0 and a
    NaN y passes grad, as aten's threshold_backward does."""
    grad, y = _inputs(70, 130, torch.float32, seed=3)
    grad[5, 5], y[5, 5] = float("nan"), -1.0
    y[6, 6] = float("nan")
    masked, bias = relu_bias_backward(grad, y, relu=True, need_bias=True)
    expected = torch.ops.aten.threshold_backward(grad, y, 0)
    assert torch.equal(masked, expected) and masked[5, 5] == 0 and masked[6, 6] == grad[6, 6]
    assert bias.isfinite().all()
    torch.testing.assert_close(bias, expected.double().sum(0).float(), rtol=1e-5, atol=1e-5)


def test_rows_apart_keeps_a_column_slice_and_copies_other_layouts():
    wide = torch.randn(8, 64)
    part = wide[:, 16:56]  # each row contiguous, rows 64 apart
    assert rows_apart(part) is part
    for other in (wide.t()[:, :8], torch.randn(1, 5).expand(4, 5), wide[:, ::2]):
        kept = rows_apart(other)
        assert kept.is_contiguous() and torch.equal(kept, other)


@needs_interpreter
def test_linear_backward_takes_a_column_slice_of_a_wider_gradient():
    """The bottom MLP's output gradient is a column slice of x0's (``rows_apart``): the same gradients as
    from the slice's contiguous copy, with ReLU (the masked pass reads the rows apart) and without (the GEMMs do)."""
    from polyrec.kernels.gemm_layers import linear

    gen = torch.Generator().manual_seed(12)
    for activation in ("relu", "none"):
        wide = torch.randn(48, 96, generator=gen).bfloat16()
        grads = []
        for grad in (wide[:, 32:64], wide[:, 32:64].contiguous()):
            x = torch.randn(48, 24, generator=torch.Generator().manual_seed(13)).bfloat16().requires_grad_()
            w = torch.randn(32, 24, generator=torch.Generator().manual_seed(14)).requires_grad_()
            b = torch.randn(32, generator=torch.Generator().manual_seed(15)).requires_grad_()
            linear(x, w, b, activation=activation).backward(grad)
            grads.append((x.grad, w.grad, b.grad))
        for ours, ref in zip(*grads):
            assert torch.equal(ours, ref), activation


@needs_interpreter
def test_strided_grad_and_empty_batch():
    grad, y = _inputs(33, 40, torch.bfloat16, seed=11)
    wide = torch.zeros(33, 64, dtype=torch.bfloat16)
    wide[:, :40] = grad
    _check(wide[:, :40], y, True, True, SMALL)  # row stride 64, not N
    masked, bias = relu_bias_backward(grad[:0], y[:0], relu=True, need_bias=True)
    assert masked.shape == (0, 40) and torch.equal(bias, torch.zeros(40))


@pytest.mark.parametrize("eager", [False, True])
@pytest.mark.parametrize(("relu", "need_bias"), [(True, True), (False, True), (True, False)])
def test_fp8_copies_equal_the_cast_of_the_masked_gradient(relu, need_bias, eager, monkeypatch):
    """With ``fp8`` the pass writes the masked gradient's fp8 copies (poisoned first: every element
    written), records its maximum, and returns no masked gradient; the copies and the maximum equal
    ``cast_fp8`` of the masked gradient, the bias gradient the one without copies. ``eager``: the torch
    path (CPU without the interpreter)."""
    if eager:
        monkeypatch.setattr(dense_backward, "interpreting", lambda: False)
    elif not INTERPRETING:
        pytest.skip("runs Triton kernels through TRITON_INTERPRET=1")
    grad, y = _inputs(53, 37, torch.bfloat16, seed=20 + 2 * relu + need_bias)
    grad[3] *= 1000.0  # beyond the delayed scale: these saturate
    y_in = y if relu else None
    masked, bias = relu_bias_backward(grad, y_in, relu=relu, need_bias=need_bias, config=SMALL)
    states = []
    for _ in range(2):
        scaling = fp8.Fp8Scaling([fp8.GRADIENT])
        scaling.load_state_dict({"history": torch.full((1, fp8.HISTORY_STEPS), 0.5)})  # the scale is known before
        scaling.begin(True)
        states.append(scaling)
    copies = fp8.fused_out(states[0], 0, *grad.shape, grad.device)
    copies.q.view(torch.uint8).fill_(0x7F)
    copies.qt.view(torch.uint8).fill_(0x7F)  # NaN in e5m2
    out, fused_bias = relu_bias_backward(grad, y_in, relu=relu, need_bias=need_bias, config=SMALL, fp8=copies)
    q, qt = fp8.cast_fp8(masked, states[1], 0, transposed=True)
    assert out is None
    assert not copies.q.float().isnan().any() and not copies.qt.float().isnan().any()
    assert torch.equal(copies.q.float(), q.float()) and torch.equal(copies.qt.float(), qt.float())
    assert torch.equal(states[0].history, states[1].history) and states[0].history[0, 0] > 0
    assert (fused_bias is None) == (bias is None)
    if bias is not None:
        assert torch.equal(fused_bias, bias)
    with pytest.raises(ValueError, match="fp8 copies must be"):
        relu_bias_backward(grad[:-1], y_in if y_in is None else y_in[:-1], relu=relu, need_bias=need_bias, fp8=copies)


def test_torch_fallback_matches_float64(monkeypatch):
    """CPU tensors without the interpreter: the torch ops, same results."""
    monkeypatch.setattr(dense_backward, "interpreting", lambda: False)
    for relu, need_bias in ((True, True), (True, False), (False, True)):
        grad, y = _inputs(19, 23, torch.bfloat16, seed=5)
        _check(grad, y, relu, need_bias, None)


def test_bad_inputs_name_the_problem():
    grad = torch.randn(4, 8)
    with pytest.raises(ValueError, match="2-D"):
        relu_bias_backward(grad[0], grad[0], relu=True, need_bias=True)
    with pytest.raises(ValueError, match="needs the layer output y"):
        relu_bias_backward(grad, None, relu=True, need_bias=False)
    with pytest.raises(ValueError, match="y must match grad"):
        relu_bias_backward(grad, grad.bfloat16(), relu=True, need_bias=True)
    with pytest.raises(TypeError, match="not supported"):
        relu_bias_backward(grad.double(), None, relu=False, need_bias=True)


def test_select_config_splits_rows_for_parallelism():
    """MLPerf shapes on an H200's 132 SMs: fewest partials that still give 4 programs per SM."""
    wide = select_config(65536, 1024, 132)
    assert (wide.block_m, wide.block_n, wide.rows_per_program) == (32, 128, 256)  # 256 x 8 programs
    narrow = select_config(65536, 128, 132)
    assert narrow.rows_per_program == 64  # 1024 programs; 128 rows would give 512 < 528
    single = select_config(65536, 1, 132)
    assert (single.block_m, single.block_n) == (128, 32)
    tiny = select_config(10, 1024, 132)
    assert tiny.rows_per_program == tiny.block_m


@compile_only
@pytest.mark.parametrize("name", COMPILE_DEVICES)
def test_compile_jobs_fit(name):
    failures = unfit_jobs(dense_backward.compile_jobs, name)
    assert not failures, "\n".join(failures)
