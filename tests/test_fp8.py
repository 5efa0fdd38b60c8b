"""fp8 dense GEMMs (polyrec.kernels.fp8, polyrec.kernels.fp8_dense): the cast kernel against torch's
conversion (through the Triton interpreter with TRITON_INTERPRET=1, the torch path without), the
delayed-scaling state, the fp8 MLP Function and the cross network's fp8 GEMMs against float64
fake-quant references, the model / config wiring, a checkpoint resume, and the cast kernel's compile fit."""

from __future__ import annotations

import zlib

import pytest
import torch
import torch.nn.functional as F

from compile_util import COMPILE_DEVICES, INTERPRETING, compile_only, unfit_jobs

from polyrec.kernels import fp8, fp8_dense
from polyrec.kernels.dcn import cross_network
from polyrec.models import DLRM, ModelConfig
from polyrec.models.layers import MLP, DenseOps, LowRankCross

needs_interpreter = pytest.mark.skipif(not INTERPRETING, reason="slow enough to run only where the "
                                       "kernels run through TRITON_INTERPRET=1 (as the other CPU kernel tests)")
KINDS = (fp8.FORWARD, fp8.GRADIENT)


def _spread(m: int, n: int, gen: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    """[m, n] random signs and mantissas over 2^-24 .. 2^16 (.. 2^10 in fp16; scaled, some saturate, many
    land among the fp8 subnormals or flush to zero), with exact zeros and both signs of zero."""
    low, high = (-24, 10) if dtype == torch.float16 else (-24, 16)
    x = torch.randn(m, n, generator=gen) * 2.0 ** torch.randint(low, high + 1, (m, n), generator=gen).float()
    x[torch.rand(m, n, generator=gen) < 0.05] = 0.0
    x[0, 0], x[-1, -1] = 0.0, -0.0
    return x.to(dtype)


def _torch_cast(x: torch.Tensor, scaling: fp8.Fp8Scaling, role: int, relu: bool = False) -> torch.Tensor:
    """torch's conversion of act(x) with the role's scale of this pass."""
    fmt = scaling.format(role)
    x = x.float().clamp_min(0) if relu else x.float()
    return (x * scaling.scales[role]).clamp(-fmt.max_value, fmt.max_value).to(fmt.dtype)


def _same_values(q: torch.Tensor, ref: torch.Tensor) -> None:
    """Equal as numbers (the interpreter path may write +0 for -0), none NaN."""
    assert q.dtype == ref.dtype and q.shape == ref.shape
    a, b = q.float(), ref.float()
    assert not a.isnan().any()
    bad = (a != b).nonzero()
    assert bad.numel() == 0, f"{bad.shape[0]} of {a.numel()} differ, first at {bad[0].tolist()}: " \
                             f"{a[tuple(bad[0])].item()} vs {b[tuple(bad[0])].item()}"


def _saturating_scaling(kind: str, x: torch.Tensor, relu: bool = False) -> fp8.Fp8Scaling:
    """A role of ``kind`` calibrated on x (its first cast), then scaled 4x beyond it: the largest
    quarter of the range saturates (as benchmarks/fp8_e2e.py's check_casts)."""
    scaling = fp8.Fp8Scaling([kind])
    scaling.begin(True)
    scaling.prepare(0, x, relu=relu)
    scaling.scales.mul_(4)
    return scaling


# ---------------------------------------------------------------- cast_fp8


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape,layout,dtype", [
    ((37, 50), "plain", torch.bfloat16),
    ((130, 70), "plain", torch.float32),
    ((130, 70), "column slice", torch.bfloat16),  # a strided view of a wider tensor
    ((37, 50), "transposed view", torch.float16),  # stride_xn != 1
])
def test_cast_matches_torch_conversion(kind, shape, layout, dtype):
    gen = torch.Generator().manual_seed(zlib.crc32(f"{kind} {shape} {layout}".encode()))
    m, n = shape
    if layout == "plain":
        x = _spread(m, n, gen, dtype)
    elif layout == "column slice":
        x = _spread(m, n + 9, gen, dtype)[:, 5:5 + n]
        assert not x.is_contiguous()
    else:
        x = _spread(n, m, gen, dtype).t()
        assert x.stride(1) != 1
    scaling = _saturating_scaling(kind, x)
    fmt = scaling.format(0)
    assert fmt.dtype == (torch.float8_e4m3fn if kind == fp8.FORWARD else torch.float8_e5m2)
    ref = _torch_cast(x, scaling, 0)
    assert (ref.float().abs() == fmt.max_value).any()  # the test saturates some ...
    assert ((ref.float() != 0) & (ref.float().abs() < 2.0 ** fmt.min_exponent)).any()  # ... and has subnormals
    q, qt = fp8.cast_fp8(x, scaling, 0, transposed=True)
    _same_values(q, ref)
    assert qt.shape == (n, m) and qt.is_contiguous()
    assert torch.equal(qt.view(torch.uint8), q.view(torch.uint8).t())  # the same bits, transposed
    assert scaling.history[0, 0] == x.float().abs().max()  # the tensor's own maximum recorded
    plain, none = fp8.cast_fp8(x, scaling, 0)
    assert none is None and torch.equal(plain.view(torch.uint8), q.view(torch.uint8))
    none, alone = fp8.cast_fp8(x, scaling, 0, plain=False, transposed=True)
    assert none is None and torch.equal(alone.view(torch.uint8), qt.view(torch.uint8))


@pytest.mark.parametrize("kind", KINDS)
def test_cast_rounds_every_fp8_value_and_tie_as_torch_does(kind):
    """Scale 1 and fp32 inputs at every finite fp8 value, every midpoint between neighbours (ties to
    even, including those that carry into the exponent, 127.5 -> 128 in e4m3, and the subnormal ones)
    and just beside each midpoint."""
    scaling = fp8.Fp8Scaling([kind])
    scaling.begin(True)
    fmt = scaling.format(0)
    grid = torch.arange(256, dtype=torch.uint8).view(fmt.dtype).float()
    grid = grid[grid.isfinite() & (grid >= 0)].unique()  # sorted, one zero
    mids = (grid[1:] + grid[:-1]) / 2
    values = torch.cat([grid, mids, torch.nextafter(mids, grid[1:]), torch.nextafter(mids, grid[:-1])])
    values = torch.cat([torch.tensor([127.5, 124.0]), values, -values])
    x = values[: values.numel() // 16 * 16].reshape(-1, 16)
    scaling.prepare(0, x, relu=False)
    scaling.scales.fill_(1.0)
    q, qt = fp8.cast_fp8(x, scaling, 0, transposed=True)
    ref = x.clamp(-fmt.max_value, fmt.max_value).to(fmt.dtype)
    _same_values(q, ref)
    _same_values(qt, ref.t().contiguous())
    if kind == fp8.FORWARD:  # rounding up into the next binade (Triton 3.6's interpreter conversion gave 64)
        assert q.float()[0, :2].tolist() == [128.0, 128.0]


@pytest.mark.parametrize("kind", KINDS)
def test_cast_with_relu_copies_relu_of_x_and_records_its_maximum(kind):
    gen = torch.Generator().manual_seed(17)
    x = _spread(37, 50, gen, torch.bfloat16)
    x[3, 4] = -1e6  # the largest magnitude is negative: ReLU drops it from the maximum
    scaling = _saturating_scaling(kind, x, relu=True)
    q, qt = fp8.cast_fp8(x, scaling, 0, transposed=True, relu=True)
    ref = _torch_cast(torch.relu(x), scaling, 0)
    _same_values(q, ref)
    _same_values(qt, ref.t().contiguous())
    assert (q.float() >= 0).all()
    assert scaling.history[0, 0] == torch.relu(x).float().max()


def test_cast_of_an_all_zero_tensor_gives_zeros():
    """A role's first tensor all zero (or all negative before a ReLU) is its own maximum: zero. Its copy
    must still be zeros (and the scale finite), not 0 * inf = NaN."""
    scaling = fp8.Fp8Scaling(list(KINDS))
    scaling.begin(True)
    q, qt = fp8.cast_fp8(torch.zeros(32, 16, dtype=torch.bfloat16), scaling, 0, transposed=True)
    assert (q.float() == 0).all() and (qt.float() == 0).all()
    assert torch.isfinite(scaling.scales[0]) and torch.isfinite(scaling.inverse[0, 0])
    q, _ = fp8.cast_fp8(-torch.ones(32, 16, dtype=torch.bfloat16), scaling, 1, relu=True)
    assert (q.float() == 0).all()


def test_cast_of_an_empty_tensor_gives_empty_copies():
    """[0, N] (the kernel path returns before its launch for it): empty copies, nothing recorded, on a
    fresh role as on one with a history."""
    scaling = fp8.Fp8Scaling([fp8.FORWARD, fp8.FORWARD])
    scaling.begin(True)
    fp8.cast_fp8(torch.randn(16, 16), scaling, 0)
    scaling.begin(True)
    for role in (0, 1):  # role 0 has a history, role 1 none
        q, qt = fp8.cast_fp8(torch.empty(0, 16, dtype=torch.bfloat16), scaling, role, transposed=True)
        assert q.shape == (0, 16) and qt.shape == (16, 0) and q.dtype == torch.float8_e4m3fn
    assert (scaling.history[:, 0] == 0).all()


def test_cast_argument_errors():
    scaling = fp8.Fp8Scaling(list(KINDS))
    x = torch.randn(32, 16, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="begin"):
        fp8.cast_fp8(x, scaling, 0)
    scaling.begin(True)
    with pytest.raises(ValueError, match="no copy"):
        fp8.cast_fp8(x, scaling, 0, plain=False, transposed=False)
    for dtype in (torch.float64, torch.int32):
        with pytest.raises(TypeError, match="not supported"):
            fp8.cast_fp8(x.to(dtype), scaling, 0)
    with pytest.raises(ValueError, match="2-D"):
        fp8.cast_fp8(x[0], scaling, 0)
    with pytest.raises(IndexError):
        fp8.cast_fp8(x, scaling, 2)
    assert (scaling.history == 0).all()  # nothing was recorded by the refused calls


# ---------------------------------------------------------------- Fp8Scaling


def _pass(scaling: fp8.Fp8Scaling, tensors: list[torch.Tensor], training: bool = True) -> None:
    """One pass: begin, then each role's cast of its tensor."""
    scaling.begin(training)
    for role, t in enumerate(tensors):
        fp8.cast_fp8(t, scaling, role)


def _maxima(scaling: fp8.Fp8Scaling) -> torch.Tensor:
    return torch.tensor([scaling.format(r).max_value for r in range(len(scaling.kinds))])


def test_first_pass_scales_by_own_maximum_then_delayed():
    gen = torch.Generator().manual_seed(2)
    scaling = fp8.Fp8Scaling([fp8.FORWARD, fp8.GRADIENT, fp8.FORWARD])
    first = [torch.randn(32, 16, generator=gen).bfloat16() * s for s in (3.0, 1e-4, 70.0)]
    _pass(scaling, first)
    amax = torch.stack([t.float().abs().max() for t in first])
    assert torch.equal(scaling.scales, _maxima(scaling) / amax)  # fp32 division, bit for bit
    assert torch.equal(scaling.inverse[:, 0], amax / _maxima(scaling))
    assert torch.equal(scaling.history[:, 0], amax)
    # the second pass: scales from the history before any cast, whatever the new tensors hold
    second = [t * f for t, f in zip(first, (0.5, 8.0, 1.0))]
    _pass(scaling, second)
    assert torch.equal(scaling.scales, _maxima(scaling) / amax)
    assert torch.equal(scaling.inverse[:, 0], scaling.scales.reciprocal())
    amax2 = torch.stack([t.float().abs().max() for t in second])
    assert torch.equal(scaling.history[:, :2], torch.stack([amax2, amax], 1))
    assert (scaling.history[:, 2:] == 0).all()
    _pass(scaling, first)
    assert torch.equal(scaling.scales, _maxima(scaling) / torch.maximum(amax, amax2))
    # the role that grew past its history saturated in the second pass: its copy at the format's maximum
    scaling.begin(True)
    q, _ = fp8.cast_fp8(second[1], scaling, 1)
    assert q.float().abs().max() == fp8.E5M2.max_value


def test_history_ages_one_slot_per_training_pass_and_forgets_after_history_steps():
    steps = fp8.HISTORY_STEPS
    scaling = fp8.Fp8Scaling([fp8.FORWARD])
    assert scaling.history.shape == (1, steps)
    base = torch.randn(16, 16, generator=torch.Generator().manual_seed(4)).abs() + 0.5
    base /= base.max()
    amaxes = [2.0 ** (10 - k) for k in range(steps + 3)]  # decreasing: each pass's scale is its oldest slot's
    for k, a in enumerate(amaxes):
        _pass(scaling, [base * a])
        if k > 0:
            window = amaxes[max(0, k - steps):k]  # the passes before this one still in the history
            assert scaling.scales[0] == torch.tensor(448.0) / max(window), k
        expected = torch.zeros(steps)
        newest = torch.tensor(amaxes[:k + 1][::-1])[:steps]
        expected[:newest.numel()] = newest
        assert torch.equal(scaling.history[0], expected), k


def test_evaluation_pass_leaves_the_history_alone():
    gen = torch.Generator().manual_seed(6)
    scaling = fp8.Fp8Scaling(list(KINDS))
    # an evaluation pass first: each role scaled by its own maximum, nothing recorded for training
    tensors = [torch.randn(32, 16, generator=gen) for _ in KINDS]
    _pass(scaling, tensors, training=False)
    assert (scaling.history == 0).all()
    assert torch.equal(scaling.scratch, torch.stack([t.abs().max() for t in tensors]))
    bigger = [t * 8 for t in tensors]
    _pass(scaling, bigger)  # so the first training pass still calibrates on its own tensors
    own = torch.stack([t.abs().max() for t in bigger])
    assert torch.equal(scaling.scales, _maxima(scaling) / own)
    history, scales = scaling.history.clone(), scaling.scales.clone()
    _pass(scaling, [t * 1000 for t in tensors], training=False)
    assert torch.equal(scaling.history, history)
    assert torch.equal(scaling.scales, scales)  # the history's scales, not re-calibrated
    _pass(scaling, tensors)
    assert torch.equal(scaling.scales, scales)
    assert torch.equal(scaling.history[:, 1], history[:, 0])  # one slot aged by the training pass only


def test_state_dict_round_trip_continues_the_same_scales():
    gen = torch.Generator().manual_seed(8)
    kinds = [fp8.FORWARD, fp8.GRADIENT, fp8.FORWARD]
    scaling = fp8.Fp8Scaling(kinds)
    for _ in range(3):  # role 2 is never cast: no history
        _pass(scaling, [torch.randn(32, 16, generator=gen) * 5, torch.randn(16, 32, generator=gen) * 1e-3])
    state = scaling.state_dict()
    assert set(state) == {"history"}  # scales, inverse, scratch and maxima are derived
    loaded = fp8.Fp8Scaling(kinds)
    loaded.load_state_dict(state)
    assert torch.equal(loaded.history, scaling.history)
    scaling.begin(True)
    loaded.begin(True)
    assert torch.equal(loaded.scales[:2], scaling.scales[:2])
    assert torch.equal(loaded.inverse[:2, 0], scaling.inverse[:2, 0])
    # roles with a history keep its scale: a much larger tensor saturates instead of re-calibrating
    huge = torch.randn(32, 16, generator=gen) * 1e4
    q, _ = fp8.cast_fp8(huge, loaded, 0)
    assert torch.equal(loaded.scales[:2], scaling.scales[:2])
    assert q.float().abs().max() == fp8.E4M3.max_value
    # the role without a history calibrates on its first tensor, as on a fresh state
    third = torch.randn(16, 16, generator=gen) * 3
    fp8.cast_fp8(third, loaded, 2)
    assert loaded.scales[2] == torch.tensor(448.0) / third.abs().max()


def test_dequantize_scales_are_16_byte_aligned_zero_dim_views():
    scaling = fp8.Fp8Scaling(fp8_dense.cross_kinds(3))
    gen = torch.Generator().manual_seed(9)
    _pass(scaling, [torch.randn(16, 16, generator=gen) * (r + 1) for r in range(18)])
    for role in range(18):
        d = scaling.dequant(role)
        assert d.dim() == 0 and d.dtype == torch.float32
        assert d.data_ptr() % 16 == 0, role
        assert d.item() == scaling.inverse[role, 0].item()
        assert d.data_ptr() == scaling.inverse[role, 0].data_ptr()  # a view: later scales show through


def test_bad_role_kinds_are_refused():
    with pytest.raises(ValueError, match="role kinds"):
        fp8.Fp8Scaling(["bad"])
    with pytest.raises(ValueError, match="role kinds"):
        fp8.Fp8Scaling([fp8.FORWARD, "e4m3"])


def test_aligned_and_formats():
    assert fp8.aligned(16, 32, 4096) and not fp8.aligned(16, 24) and not fp8.aligned(0) and not fp8.aligned(-16)
    assert fp8.formats(torch.device("cpu")) == {fp8.FORWARD: fp8.E4M3, fp8.GRADIENT: fp8.E5M2}
    for fmt in (fp8.E4M3, fp8.E5M2, fp8.E4M3_FNUZ, fp8.E5M2_FNUZ):
        assert torch.finfo(fmt.dtype).max == fmt.max_value
        assert torch.finfo(fmt.dtype).smallest_normal == 2.0 ** fmt.min_exponent
        values = torch.arange(256, dtype=torch.uint8).view(fmt.dtype).float()
        assert ((values >= 1) & (values < 2)).sum() == 2 ** fmt.mantissa_bits  # values per binade


# ---------------------------------------------------------------- fp8 MLP


def _fake_quant(scaling: fp8.Fp8Scaling):
    """q(t, role): t quantized with the scales the pass used, dequantized, in float64."""
    scales, inverse = scaling.scales.double(), scaling.inverse[:, 0].double()

    def q(t: torch.Tensor, role: int) -> torch.Tensor:
        fmt = scaling.format(role)
        return (t.double() * scales[role]).clamp(-fmt.max_value, fmt.max_value).to(fmt.dtype).double() * inverse[role]

    return q


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def _bf16_close(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> None:
    """out (bf16) is the float64 product a @ b (+ bias) rounded to bf16: every element within one bf16 step
    of it (give or take fp32 accumulation error, 2^-16 of the sum of |terms|, for values that cancel),
    and all but a few equal to its correct rounding (a GEMM that accumulates in fp32 may round a value
    within its accumulation error of a bf16 midpoint the other way)."""
    exact = a @ b if bias is None else a @ b + bias
    assert out.dtype == torch.bfloat16 and out.shape == exact.shape
    slack = exact.abs() * 2.0 ** -7 + (a.abs() @ b.abs()) * 2.0 ** -16
    assert ((out.double() - exact).abs() <= slack).all()
    differ = int((out != exact.bfloat16()).sum())
    assert differ <= max(2, out.numel() // 200), f"{differ} of {out.numel()} rounded the other way"


@pytest.fixture
def gemm_outputs(monkeypatch):
    """Every fp8_dense GEMM's output, in call order (scaled_mm watched, not changed)."""
    outputs = []
    real = fp8_dense.scaled_mm

    def watched(*args, **kwargs):
        out = real(*args, **kwargs)
        outputs.append(out.detach().clone())
        return out

    monkeypatch.setattr(fp8_dense, "scaled_mm", watched)
    return outputs


def _mlp_reference(x, weights, biases, relus, scaling, grad):
    """float64 fake-quant MLP end to end: GEMM outputs (and dx) rounded to bf16 with the bf16 bias; ReLU
    masks by the pre-activation; weight gradients from the quantized operands, bias gradients from the
    masked gradient. -> y, dx, [dw], [db]."""
    q = _fake_quant(scaling)
    h, pre, xq, wq = x.detach().double(), [], [], []
    for i, (w, b) in enumerate(zip(weights, biases)):
        a = h.clamp_min(0) if i > 0 and relus[i - 1] else h
        xq.append(q(a, 3 * i))
        wq.append(q(w.detach(), 3 * i + 1))
        h = (xq[i] @ wq[i].t() + b.detach().bfloat16().double()).bfloat16().double()
        pre.append(h)
    y = h.clamp_min(0) if relus[-1] else h
    g, dw, db = grad.double(), [None] * len(weights), [None] * len(weights)
    for i in reversed(range(len(weights))):
        if relus[i]:
            g = g * (pre[i] > 0)
        db[i] = g.sum(0)
        gq = q(g, 3 * i + 2)
        dw[i] = gq.t() @ xq[i]
        g = (gq @ wq[i]).bfloat16().double()
    return y, g, dw, db


def _mlp_problem(dims, gen, batch=64):
    weights = [(torch.randn(o, i, generator=gen) * (2 / (i + o)) ** 0.5).requires_grad_() for i, o in zip(dims, dims[1:])]
    biases = [(torch.randn(o, generator=gen) * 0.3).requires_grad_() for o in dims[1:]]
    x = torch.randn(batch, dims[0], generator=gen).bfloat16().requires_grad_()
    return x, weights, biases


def _check_mlp(x, weights, biases, relus, scaling, gen, outputs):
    """One training pass of fp8_dense.mlp, checked two ways: each GEMM against the fake-quant product of
    the operands it was given (the implementation's own bf16 inputs, so tight: rel 1e-5, bf16 outputs
    correctly rounded), and the whole pass against the float64 reference run end to end (where a bf16
    rounding the other way upstream moves later values by up to ~1e-3)."""
    for p in (x, *weights, *biases):
        p.grad = None
    outputs.clear()
    y = fp8_dense.mlp(x, weights, biases, relus, scaling)
    forward = list(outputs)  # the layers' pre-activations [B, N_i]
    outputs.clear()
    grad = torch.randn(y.shape, generator=gen).bfloat16()
    y.backward(grad)
    layers, batch = len(weights), x.shape[0]
    backward = {(o.dtype, tuple(o.shape)): o for o in outputs}  # dw_i [N_i, K_i] fp32, dx_i [B, K_i] bf16
    assert len(backward) == len(outputs) == sum(w.requires_grad for w in weights) + layers - 1 + x.requires_grad
    assert y.dtype == torch.bfloat16 and y.shape == (batch, weights[-1].shape[0]) and len(forward) == layers
    q = _fake_quant(scaling)
    a, xq, wq = x.detach(), [], []
    for i, (w, b) in enumerate(zip(weights, biases)):
        xq.append(q(a.clamp_min(0) if i > 0 and relus[i - 1] else a, 3 * i))
        wq.append(q(w.detach(), 3 * i + 1))
        _bf16_close(forward[i], xq[i], wq[i].t(), b.detach().bfloat16().double())
        a = forward[i]
    assert torch.equal(y, a.clamp_min(0) if relus[-1] else a)
    g_in = grad
    for i in reversed(range(layers)):
        w, b = weights[i], biases[i]
        g = g_in.double() * (forward[i] > 0) if relus[i] else g_in.double()
        assert b.grad.dtype == b.dtype and _rel(b.grad, g.sum(0)) < 1e-5, i
        gq = q(g, 3 * i + 2)
        if w.requires_grad:
            assert w.grad.dtype == w.dtype and torch.equal(w.grad, backward[torch.float32, tuple(w.shape)])
            assert _rel(w.grad, gq.t() @ xq[i]) < 1e-5, i
        else:
            assert w.grad is None
        if i > 0 or x.requires_grad:
            g_in = backward[torch.bfloat16, (batch, w.shape[1])]
            _bf16_close(g_in, gq, wq[i])
    if x.requires_grad:
        assert torch.equal(x.grad, g_in)
    else:
        assert x.grad is None
    ref_y, ref_dx, ref_dw, ref_db = _mlp_reference(x, weights, biases, relus, scaling, grad)
    assert _rel(y, ref_y) < 5e-3
    if x.requires_grad:
        assert _rel(x.grad, ref_dx) < 1e-2
    for i, (w, b) in enumerate(zip(weights, biases)):
        assert w.grad is None or _rel(w.grad, ref_dw[i]) < 5e-3, i
        assert _rel(b.grad, ref_db[i]) < 5e-3, i


@pytest.mark.parametrize("dims,relus", [
    ((32, 48, 16), (False, False)),
    ((32, 48, 16), (True, False)),
    ((32, 48, 16), (True, True)),
    ((16, 64, 32, 16), (True, True, False)),
])
def test_mlp_matches_fake_quant_reference(dims, relus, gemm_outputs):
    """The first pass (each role calibrated on its own tensor), then a second with larger inputs and the
    updated weights (delayed scales: the inputs' role saturates)."""
    gen = torch.Generator().manual_seed(len(dims) * 10 + sum(relus))
    x, weights, biases = _mlp_problem(dims, gen)
    scaling = fp8.Fp8Scaling(fp8_dense.mlp_kinds(len(weights)))
    _check_mlp(x, weights, biases, relus, scaling, gen, gemm_outputs)
    first = scaling.history[:, 0].clone()
    assert (first > 0).all()
    with torch.no_grad():
        for p in (*weights, *biases):
            p.sub_(0.1 * p.grad)
    x2 = (x.detach() * 3).requires_grad_()
    _check_mlp(x2, weights, biases, relus, scaling, gen, gemm_outputs)
    assert torch.equal(scaling.history[:, 1], first)
    assert torch.equal(scaling.scales, _maxima(scaling) / first)
    assert x2.detach().float().abs().max() * scaling.scales[0] > 448  # the input's copy saturated


def test_mlp_steps_with_fused_copies_equal_standalone_casts():
    """Once the output gradients' roles have a history the ReLU / bias backward writes their fp8 copies:
    the same step as casting the masked gradients apart, bit for bit."""
    gen = torch.Generator().manual_seed(15)
    dims, relus = (16, 64, 32, 16), (True, True, False)
    x, weights, biases = _mlp_problem(dims, gen)
    grad = torch.randn(x.shape[0], dims[-1], generator=gen).bfloat16()
    fused, standalone = _fused_and_standalone_steps(
        lambda state: fp8_dense.mlp(x, weights, biases, relus, state), [x, *weights, *biases], grad,
        fp8.Fp8Scaling(fp8_dense.mlp_kinds(len(weights))))
    for a, c in zip(fused, standalone):
        assert torch.equal(a, c)


def _fused_and_standalone_steps(forward, leaves: list[torch.Tensor], grad: torch.Tensor,
                                scaling: fp8.Fp8Scaling) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """A first training step (every role gets a history), then the second step twice from the same state:
    with the producers writing the fp8 copies, and with every copy cast apart (``fused_out`` patched to None);
    each step's output and the leaves' gradients. Both leave the same history."""
    import copy
    from unittest import mock

    def step(state: fp8.Fp8Scaling) -> list[torch.Tensor]:
        for t in leaves:
            t.grad = None
        out = forward(state)
        out.backward(grad)
        return [out.detach(), *(t.grad.clone() for t in leaves)]

    step(scaling)
    standalone_state = copy.deepcopy(scaling)
    fused = step(scaling)
    with mock.patch.object(fp8_dense, "fused_out", lambda *args, **kwargs: None):
        standalone = step(standalone_state)
    assert torch.equal(scaling.history, standalone_state.history)
    return fused, standalone


def test_mlp_without_input_gradient(gemm_outputs):
    """x needs no gradient: the first layer's dx GEMM is skipped, its weight and bias still train; with
    the first weight frozen too, the first layer trains through its bias alone."""
    gen = torch.Generator().manual_seed(12)
    dims, relus = (32, 48, 16), (True, False)
    x, weights, biases = _mlp_problem(dims, gen)
    x = x.detach()
    scaling = fp8.Fp8Scaling(fp8_dense.mlp_kinds(2))
    _check_mlp(x, weights, biases, relus, scaling, gen, gemm_outputs)
    weights[0].requires_grad_(False)
    _check_mlp(x, weights, biases, relus, scaling, gen, gemm_outputs)
    assert scaling.history[2, 0] == 0  # layer 0's output gradient was never cast


def test_mlp_evaluation_leaves_the_history_alone():
    gen = torch.Generator().manual_seed(13)
    x, weights, biases = _mlp_problem((32, 48, 16), gen)
    scaling = fp8.Fp8Scaling(fp8_dense.mlp_kinds(2))
    fp8_dense.mlp(x, weights, biases, (True, False), scaling).float().sum().backward()
    history = scaling.history.clone()
    with torch.no_grad():
        y = fp8_dense.mlp(x * 100, weights, biases, (True, False), scaling)
    assert torch.isfinite(y).all()
    assert torch.equal(scaling.history, history)


def test_mlp_argument_errors():
    gen = torch.Generator().manual_seed(14)
    x, weights, biases = _mlp_problem((32, 48, 16), gen)
    with pytest.raises(ValueError, match="roles"):
        fp8_dense.mlp(x, weights, biases, (True, False), fp8.Fp8Scaling(fp8_dense.mlp_kinds(1)))
    scaling = fp8.Fp8Scaling(fp8_dense.mlp_kinds(2))
    with pytest.raises(ValueError, match="as many"):
        fp8_dense.mlp(x, weights, biases[:1], (True, False), scaling)
    x_odd, w_odd, b_odd = _mlp_problem((32, 40, 16), gen)  # 40 is not a multiple of 16
    with pytest.raises(ValueError, match="multiple of 16"):
        fp8_dense.mlp(x_odd, w_odd, b_odd, (True, False), scaling)
    with pytest.raises(ValueError, match="does not take"):  # layer 1 takes 32, not 48
        fp8_dense.mlp(x, [weights[0], torch.randn(16, 32)], biases, (True, False), scaling)
    assert (scaling.history == 0).all()


def test_mlp_fits_counts_the_leading_aligned_layers():
    assert fp8_dense.mlp_fits((16, 512, 256, 1)) == 2
    assert fp8_dense.mlp_fits((16, 512, 256, 128)) == 3
    assert fp8_dense.mlp_fits((13, 512, 256)) == 0
    assert fp8_dense.mlp_fits((32, 48, 40, 16)) == 1  # stops at the first misaligned layer
    assert fp8_dense.mlp_fits((32,)) == 0
    assert fp8_dense.mlp_kinds(2) == [fp8.FORWARD, fp8.FORWARD, fp8.GRADIENT] * 2
    assert fp8_dense.cross_kinds(1) == [fp8.FORWARD] * 4 + [fp8.GRADIENT] * 2


# ---------------------------------------------------------------- cross network


@pytest.mark.parametrize("layer", [0, 1])
def test_cross_gemms_match_fake_quant(layer):
    """Each of Fp8CrossGemms' GEMMs against float64 products of the fake-quantized operands; layer 1 of a
    two-layer network reads roles 6..11."""
    _check_cross_gemms(layer, 20 + layer)


def _check_cross_gemms(layer: int, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    b, d, r, layers = 64, 48, 16, 2
    vs = [torch.randn(r, d, generator=gen) * 0.2 for _ in range(layers)]
    us = [torch.randn(d, r, generator=gen) * 0.2 for _ in range(layers)]
    bs = [torch.randn(d, generator=gen) for _ in range(layers)]
    x = torch.randn(b, d, generator=gen).bfloat16()
    g = (torch.randn(b, d, generator=gen) * 1e-3).bfloat16()
    scaling = fp8.Fp8Scaling(fp8_dense.cross_kinds(layers))
    scaling.begin(True)
    gemms = fp8_dense.Fp8CrossGemms(scaling, [*vs, *us, *bs], needs=(True,) * 3 * layers, dtype=x.dtype)
    low = gemms.down(layer, x)  # [B, r]
    p = gemms.up(layer, low)  # [B, D]
    dlow = gemms.dlow(layer, g)  # [B, r]
    d_u = gemms.d_u(layer, torch.float32)  # [D, r]
    d_v = gemms.d_v(layer, dlow, torch.float32)  # [r, D]
    q, role = _fake_quant(scaling), 6 * layer
    xq, vq, lq, uq = q(x, role), q(vs[layer], role + 2), q(low, role + 1), q(us[layer], role + 3)
    gq, dq = q(g, role + 4), q(dlow, role + 5)
    assert low.dtype == p.dtype == dlow.dtype == torch.bfloat16 and d_u.dtype == d_v.dtype == torch.float32
    _bf16_close(low, xq, vq.t())
    _bf16_close(p, lq, uq.t())
    _bf16_close(dlow, gq, uq)
    assert _rel(d_u, gq.t() @ lq) < 1e-5
    assert _rel(d_v, dq.t() @ xq) < 1e-5
    assert not gemms.kept  # the backward's copies were all read and dropped
    assert (scaling.history[role:role + 6, 0] > 0).all()
    other = 6 * (1 - layer)
    assert (scaling.history[other:other + 6] == 0).all()  # the other layer's roles untouched


def _cross_problem(b: int, d: int, r: int, layers: int, gen: torch.Generator):
    x0 = torch.randn(b, d, generator=gen).bfloat16().requires_grad_()
    vs = [(torch.randn(r, d, generator=gen) * (2 / (r + d)) ** 0.5).requires_grad_() for _ in range(layers)]
    us = [(torch.randn(d, r, generator=gen) * (2 / (r + d)) ** 0.5).requires_grad_() for _ in range(layers)]
    bs = [(torch.randn(d, generator=gen) * d ** -0.5).requires_grad_() for _ in range(layers)]
    return x0, vs, us, bs


def test_cross_network_in_fp8_is_close_to_bf16():
    gen = torch.Generator().manual_seed(30)
    b, d, r, layers = 64, 48, 16, 2
    x0, vs, us, bs = _cross_problem(b, d, r, layers, gen)
    leaves = [x0, *vs, *us, *bs]
    grad = torch.randn(b, d, generator=gen).bfloat16()
    scaling = fp8.Fp8Scaling(fp8_dense.cross_kinds(layers))
    grads = []
    outs = []
    for fp8_state in (scaling, None):
        for t in leaves:
            t.grad = None
        out = cross_network(x0, vs, us, bs, fp8=fp8_state)
        out.backward(grad)
        outs.append(out.detach())
        grads.append([t.grad.clone() for t in leaves])
    assert outs[0].dtype == torch.bfloat16 and torch.isfinite(outs[0]).all()
    assert _rel(outs[0], outs[1].double()) < 0.1
    for i, (ours, bf16) in enumerate(zip(*grads)):
        assert ours.dtype == leaves[i].dtype
        assert torch.isfinite(ours).all() and (ours != 0).any(), i
        assert _rel(ours, bf16.double()) < 0.25, i
    assert (scaling.history[:, 0] > 0).all()  # every role cast once, in the forward or the backward


def test_cross_network_fp8_argument_errors():
    gen = torch.Generator().manual_seed(31)
    x0, vs, us, bs = _cross_problem(64, 48, 16, 2, gen)
    with pytest.raises(ValueError, match="multiples of 16"):
        cross_network(x0[:60], vs, us, bs, fp8=fp8.Fp8Scaling(fp8_dense.cross_kinds(2)))
    with pytest.raises(ValueError, match="roles"):
        cross_network(x0, vs, us, bs, fp8=fp8.Fp8Scaling(fp8_dense.cross_kinds(1)))
    odd = [torch.randn(12, 48) for _ in range(2)], [torch.randn(48, 12) for _ in range(2)]  # rank 12
    with pytest.raises(ValueError, match="multiples of 16"):
        cross_network(x0, *odd, bs, fp8=fp8.Fp8Scaling(fp8_dense.cross_kinds(2)))


def test_cross_grad_pass_writing_only_copies_matches_the_full_pass():
    """``epilogue_pass(fp8_only=True)``: the CrossGrad pass writes g's fp8 copies, d_x0 and the bias gradient
    as the full pass does, leaves the product alone, and returns no g."""
    from polyrec.kernels.gemm_epilogue import CrossGrad, epilogue_pass

    gen = torch.Generator().manual_seed(32)
    m, n = 70, 48  # rows not a multiple of the pass's block
    p, grad, x0 = (torch.randn(m, n, generator=gen).bfloat16() for _ in range(3))
    bias, d_x0 = torch.randn(n, generator=gen).bfloat16(), torch.randn(m, n, generator=gen).bfloat16()
    scaling = fp8.Fp8Scaling([fp8.GRADIENT])
    scaling.begin(True)
    scaling.prepare(0, grad * x0, relu=False)  # the role has a history: the pass may write its copies
    results = []
    for only in (False, True):
        cg = CrossGrad(grad=grad, x0=x0, d_x0=d_x0.clone(), accumulate=True, bias_grad=torch.full((n,), float("nan")))
        copies = fp8.fused_out(scaling, 0, m, n, p.device)
        copies.q.fill_(float("nan"))
        copies.qt.fill_(float("nan"))  # poisoned: every element must be written
        product = p.clone()
        g = epilogue_pass(product, bias=bias, cross_grad=cg, fp8=copies, fp8_only=only)
        assert (g is None) == only
        assert torch.equal(product, p)
        results.append((copies.q, copies.qt, cg.d_x0, cg.bias_grad))
    for full, only in zip(*results):
        assert not full.float().isnan().any()
        assert torch.equal(full.float(), only.float())
    with pytest.raises(ValueError, match="fp8_only"):
        epilogue_pass(p, bias=bias, fp8_only=True)


def test_cross_network_steps_with_fused_copies_equal_standalone_casts():
    """Once every role has a history the passes write x_l's and g_l's copies (g_l only as copies): the same
    step as casting each tensor apart, bit for bit but for the pass's fp32 bias-gradient sums."""
    gen = torch.Generator().manual_seed(33)
    x0, vs, us, bs = _cross_problem(64, 48, 16, 2, gen)
    grad = torch.randn(64, 48, generator=gen).bfloat16()
    fused, standalone = _fused_and_standalone_steps(lambda state: cross_network(x0, vs, us, bs, fp8=state),
                                                    [x0, *vs, *us, *bs], grad, fp8.Fp8Scaling(fp8_dense.cross_kinds(2)))
    bias_grads = len(fused) - len(bs)
    for a, c in zip(fused[:bias_grads], standalone[:bias_grads]):
        assert torch.equal(a, c)
    for a, c in zip(fused[bias_grads:], standalone[bias_grads:]):
        torch.testing.assert_close(a, c, rtol=1e-5, atol=1e-7)


def test_cross_network_copies_only_writes_the_output_copies_alone():
    """``copies_only``: the last pass writes the output's fp8 copies (poisoned first: every element) equal to
    those written beside the output, the output returned is NaN, and the backward gives the same gradients
    bit for bit; without copies to write, ``copies_only`` changes nothing."""
    import copy

    gen = torch.Generator().manual_seed(34)
    b, d, layers = 64, 48, 2
    x0, vs, us, bs = _cross_problem(b, d, 16, layers, gen)
    grad = torch.randn(b, d, generator=gen).bfloat16()
    top = fp8.Fp8Scaling([fp8.FORWARD])
    top.begin(True)
    top.prepare(0, torch.randn(b, d, generator=gen), relu=False)  # the role has a history: copies can be written
    state = fp8.Fp8Scaling(fp8_dense.cross_kinds(layers))
    results = []
    for only, scaling in ((False, state), (True, copy.deepcopy(state))):
        for t in (x0, *vs, *us, *bs):
            t.grad = None
        copies = fp8.fused_out(top, 0, b, d, x0.device)
        copies.q.fill_(float("nan"))
        copies.qt.fill_(float("nan"))
        out = cross_network(x0, vs, us, bs, fp8=scaling, output_copies=copies, copies_only=only)
        out.backward(grad)
        results.append((out.detach(), copies.q.float(), copies.qt.float(),
                        [t.grad.clone() for t in (x0, *vs, *us, *bs)]))
    (full, q, qt, grads), (unread, q_only, qt_only, grads_only) = results
    assert torch.isfinite(full).all() and unread.shape == full.shape and unread.isnan().all()
    assert not q.isnan().any() and not qt.isnan().any()
    assert torch.equal(q, q_only) and torch.equal(qt, qt_only)
    assert all(torch.equal(a, c) for a, c in zip(grads, grads_only))
    out = cross_network(x0, vs, us, bs, fp8=copy.deepcopy(state), copies_only=True)
    assert torch.equal(out.detach(), full)


# ---------------------------------------------------------------- models and config


def test_layers_enable_fp8_pick_their_fp8_layers():
    gen = torch.Generator().manual_seed(40)
    mlp = MLP(16, (512, 256, 1), last_relu=False, gen=gen)
    mlp.enable_fp8()
    assert len(mlp.fp8.kinds) == 2 * fp8_dense.MLP_ROLES
    padded = MLP(13, (64, 32, 16), last_relu=True, gen=gen)  # 13 dense features, padded to 16
    padded.enable_fp8()
    assert len(padded.fp8.kinds) == 3 * fp8_dense.MLP_ROLES
    none = MLP(16, (24, 16), last_relu=True, gen=gen)
    none.enable_fp8()
    assert none.fp8 is None
    cross = LowRankCross(48, 3, 16, gen=gen)
    cross.enable_fp8()
    assert list(cross.fp8.kinds) == fp8_dense.cross_kinds(3)
    assert "fp8.history" in cross.state_dict() and "fp8.history" in mlp.state_dict()


def _tiny(interaction: str) -> ModelConfig:
    """DLRM-DCNv2 with aligned sizes (D = 4 x 16 = 64, rank 16), or the dot interaction, whose top MLP
    input 16 + 4 x 3 / 2 = 22 is aligned only once padded."""
    return ModelConfig(name=f"tiny-{interaction}", num_dense=3, table_rows=(11, 5, 17), embedding_dim=16,
                       multi_hot=(2, 1, 3), bottom_mlp=(32, 16), top_mlp=(32, 16, 1), interaction=interaction,
                       dcn_layers=2 if interaction == "dcnv2" else 0, dcn_rank=16 if interaction == "dcnv2" else 0)


def _dense_step(model: DLRM, gen: torch.Generator, batch: int = 32):
    dense = torch.rand(batch, 3, generator=gen)
    emb = torch.randn(batch, 3, 16, generator=gen).requires_grad_()
    labels = torch.randint(0, 2, (batch,), generator=gen).float()
    logits = model.dense_forward(dense, emb, torch.bfloat16)
    F.binary_cross_entropy_with_logits(logits, labels).backward()
    return logits.detach(), emb.grad


def test_dlrm_dcnv2_fp8_trains_close_to_bf16():
    """The fp8 model (bottom MLP, cross network and the top MLP's two aligned layers in fp8) against the
    same model in bf16: logits and gradients close, every fp8 role recorded."""
    config = _tiny("dcnv2")
    ours = DLRM(config, dense_backend="polyrec", dense_fp8=True, seed=7)
    ref = DLRM(config, dense_backend="polyrec", seed=7)
    assert [len(p.fp8.kinds) for p in ours.dense_parts()] == [6, 12, 6]
    (logits, emb_grad), (ref_logits, ref_emb_grad) = (_dense_step(m, torch.Generator().manual_seed(41))
                                                      for m in (ours, ref))
    assert torch.isfinite(logits).all() and _rel(logits, ref_logits) < 0.2
    assert _rel(emb_grad, ref_emb_grad) < 0.5
    for a, b in zip(ours.dense_parameters(), ref.dense_parameters()):
        assert torch.isfinite(a.grad).all() and (a.grad != 0).any() and _rel(a.grad, b.grad) < 0.5
    for part in ours.dense_parts():
        assert (part.fp8.history[:, 0] > 0).all(), part
    # a batch that is not a multiple of 16 runs in bf16: the fp8 state is left as it was
    histories = [p.fp8.history.clone() for p in ours.dense_parts()]
    _dense_step(ours, torch.Generator().manual_seed(42), batch=24)
    assert all(torch.equal(p.fp8.history, h) for p, h in zip(ours.dense_parts(), histories))


def _count_casts(counts: dict):
    """``fp8_dense.cast_fp8`` counting its calls per (scaling, role) into ``counts``."""
    original = fp8_dense.cast_fp8

    def counting(x, scaling, role, **kwargs):
        counts[id(scaling), role] = counts.get((id(scaling), role), 0) + 1
        return original(x, scaling, role, **kwargs)
    return counting


def test_dcnv2_top_mlp_input_copies_from_the_cross_network_equal_a_cast():
    """Once the top MLP's input role has a history, the cross network's last pass writes that input's fp8
    copies (the top MLP's pass begun ahead of it), and only those, and no cast reads the input: the same step, bit for bit
    (logits, every gradient but the passes' fp32 bias sums, each history), as casting it apart; an
    evaluation pass then leaves every history alone."""
    from unittest import mock

    from polyrec.kernels import dcn

    fused, standalone = (DLRM(_tiny("dcnv2"), dense_backend="polyrec", dense_fp8=True, seed=9) for _ in range(2))
    results, counts, unread = [], ({}, {}), []
    for model, patch, count in ((fused, {}, counts[0]), (standalone, {"fused_out": lambda *a, **k: None}, counts[1])):
        _dense_step(model, torch.Generator().manual_seed(50))  # every role gets a history
        placeholder = mock.patch.object(dcn, "_unread_output", side_effect=dcn._unread_output)
        with mock.patch.multiple(fp8_dense, cast_fp8=_count_casts(count), **patch), placeholder as made:
            model.zero_grad(set_to_none=True)
            logits, emb_grad = _dense_step(model, torch.Generator().manual_seed(51))
        unread.append(made.call_count)
        results.append((logits, emb_grad, [p.grad for p in model.dense_parameters()],
                        [part.fp8.history.clone() for part in model.dense_parts()]))
    top = (id(fused.top.fp8), 0), (id(standalone.top.fp8), 0)
    assert counts[0].get(top[0], 0) == 0 and counts[1][top[1]] == 1
    assert unread == [1, 0]  # with the copies written, the cross output itself is not (``copies_only``)
    (logits, emb_grad, grads, histories), (ref_logits, ref_emb_grad, ref_grads, ref_histories) = results
    assert torch.equal(logits, ref_logits) and torch.equal(emb_grad, ref_emb_grad)
    assert all(torch.equal(a, b) for a, b in zip(histories, ref_histories))
    biases = {id(b) for part in fused.dense_parts() for b in getattr(part, "biases", getattr(part, "b", []))}
    for p, a, b in zip(fused.dense_parameters(), grads, ref_grads):
        if id(p) in biases:  # fp32 column sums in the passes' own order
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
        else:
            assert torch.equal(a, b)
    with torch.no_grad():
        fused.dense_forward(torch.rand(32, 3), torch.randn(32, 3, 16), torch.bfloat16)
    assert all(torch.equal(part.fp8.history, h) for part, h in zip(fused.dense_parts(), histories))


def test_begun_input_and_output_copies_refuse_what_does_not_fit():
    gen = torch.Generator().manual_seed(52)
    top = MLP(64, (32, 16, 1), last_relu=False, gen=gen)
    top.enable_fp8()
    ops = DenseOps("polyrec")
    x = torch.randn(32, 64).bfloat16().requires_grad_()
    top(x, ops)  # a history for every role
    begun = top.begin_fp8_input(32, x.device, ops, input_requires_grad=True)
    assert begun is not None and begun.copies.q.shape == (32, 64)
    with pytest.raises(ValueError, match="copies are"):
        top(torch.randn(48, 64).bfloat16(), ops, begun)
    assert top.begin_fp8_input(24, x.device, ops, input_requires_grad=True) is None  # 24 rows run in bf16
    with pytest.raises(ValueError, match="begun for an input"):
        top(torch.randn(24, 64).bfloat16(), ops, begun)
    cross = LowRankCross(64, 2, 16, gen=gen)
    with pytest.raises(ValueError, match="output copies"):
        cross(x, DenseOps("torch"), output_copies=begun.copies)
    vs, us, bs = list(cross.v), list(cross.u), list(cross.b)
    with pytest.raises(ValueError, match="output copies"):
        cross_network(torch.randn(16, 64).bfloat16(), vs, us, bs, output_copies=begun.copies)


def test_dlrm_dot_fp8_trains():
    """The dot interaction's top MLP input (22 columns) needs a gradient, so it is not padded: its first
    layer must not be counted as an fp8 layer (enable_fp8 counts the input padded)."""
    model = DLRM(_tiny("dot"), dense_backend="polyrec", dense_fp8=True, seed=7)
    logits, emb_grad = _dense_step(model, torch.Generator().manual_seed(43))
    assert torch.isfinite(logits).all() and torch.isfinite(emb_grad).all()


def test_fp8_needs_the_polyrec_dense_backend():
    with pytest.raises(ValueError, match="polyrec dense backend"):
        DLRM(_tiny("dcnv2"), dense_backend="torch", dense_fp8=True)
    from polyrec.runtime import TrainConfig
    from polyrec.runtime.config import resolve

    with pytest.raises(ValueError, match="--precision fp8"):
        resolve(TrainConfig(precision="fp8", device="cpu", dense_backend="torch"))
    with pytest.raises(ValueError, match="precision must be one of"):
        resolve(TrainConfig(precision="fp9", device="cpu"))
    resolved = resolve(TrainConfig(precision="fp8", device="cpu", dense_backend="polyrec", embedding_backend="torch"))
    assert resolved.dense_fp8 and resolved.compute_dtype == torch.bfloat16


@needs_interpreter
def test_fp8_resume_continues_the_same_losses_bitwise(tmp_path):
    """As tests/test_checkpoint.py's resume test, with fp8 dense GEMMs: the scaling histories travel in
    the checkpoint, so the resumed steps scale (and lose) exactly as the straight run's."""
    from polyrec.runtime import TrainConfig, Trainer

    def config(where, steps, **kw):
        return TrainConfig(preset="dcnv2-small", data="synthetic", steps=steps, batch_size=16, row_cap=500,
                           log_every=1, checkpoint_dir=tmp_path / where, device="cpu", cpu_threads=1,
                           precision="fp8", dense_backend="polyrec", embedding_backend="torch", eval_batches=1, **kw)

    straight = Trainer(config("a", 3), progress=False).train()
    first = Trainer(config("b", 2), progress=False).train()
    state = torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=True)
    histories = {f"{part}.{key}": v for part, sd in state["dense"].items() for key, v in sd.items() if "fp8" in key}
    assert len(histories) == 3 and all((h[:, :2] > 0).all() and (h[:, 2:] == 0).all() for h in histories.values())
    resumed = Trainer(config("b", 3, resume=True), progress=False).train()
    assert len(straight.losses) == 3 and len(resumed.losses) == 1
    assert first.losses == straight.losses[:2]
    assert resumed.losses == straight.losses[2:]  # bitwise: the third step scales by the two steps' history
    assert all(torch.isfinite(torch.tensor(straight.losses)))


@needs_interpreter
@pytest.mark.parametrize("before,after", [("fp8", "fp32"), ("fp32", "fp8")])
def test_a_run_resumes_into_or_out_of_fp8(tmp_path, before, after):
    """The NaN stop advises resuming an fp8 run in fp32: the fp8 histories one precision lacks are dropped or
    started afresh (was: a traceback, 'Missing key(s) in state_dict: "fp8.history"', and exit 1)."""
    from polyrec.runtime import TrainConfig, Trainer

    def config(steps, precision, **kw):
        return TrainConfig(preset="dcnv2-small", data="synthetic", steps=steps, batch_size=16, row_cap=500,
                           log_every=1, checkpoint_dir=tmp_path, device="cpu", cpu_threads=1, precision=precision,
                           dense_backend="polyrec", embedding_backend="torch", eval_batches=1, **kw)

    Trainer(config(2, before), progress=False).train()
    resumed = Trainer(config(3, after, resume=True), progress=False)
    scalings = [m for m in resumed.model.modules() if isinstance(m, fp8.Fp8Scaling)]
    assert bool(scalings) == (after == "fp8") and all((m.history == 0).all() for m in scalings)  # afresh
    assert resumed.step == 2 and torch.isfinite(torch.tensor(resumed.train().losses)).all()


def test_a_dense_state_that_does_not_fit_names_the_checkpoint_and_the_entries():
    from polyrec.runtime.trainer_state import load_dense

    layer = torch.nn.Linear(4, 2)
    with pytest.raises(ValueError, match=r"ck\.pt: top: the checkpoint's dense state does not fit this run's "
                                         r"layers \(missing or extra: bias, extra\.weight\)"):
        load_dense(layer, {"weight": torch.zeros(2, 4), "extra.weight": torch.zeros(1)}, "ck.pt: top")
    load_dense(layer, {"weight": torch.ones(2, 4), "bias": torch.ones(2), "fp8.history": torch.zeros(3, 16)}, "ck.pt")
    assert bool((layer.weight == 1).all())


# ---------------------------------------------------------------- compile fit


@compile_only
@pytest.mark.parametrize("name", COMPILE_DEVICES)
def test_compile_jobs_fit(name):
    failures = unfit_jobs(fp8.compile_jobs, name)
    assert not failures, "\n".join(failures)


def test_compile_jobs_cover_each_format_and_copy_choice():
    from polyrec.hardware.catalog import catalog, get_device

    for name, types in (("H200", {"fp8e4nv", "fp8e5"}), ("MI300X", {"fp8e4b8", "fp8e5b16"}),
                        ("MI350X", {"fp8e4nv", "fp8e5"})):
        if name not in catalog():
            continue
        jobs = [j for j in fp8.compile_jobs(get_device(name)) if j.kernel is fp8.fp8_cast_kernel]
        assert len(jobs) == 6 and len({j.label for j in jobs}) == 6  # 2 formats x 3 copy / ReLU choices
        assert {j.signature["q_ptr"][1:] for j in jobs} == types, name
        assert all(not j.constexprs["ROUND_IN_FP32"] for j in jobs)
