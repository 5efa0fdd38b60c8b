"""GEMM numerics through the Triton interpreter against float64: every layout, epilogue and dtype,
odd sizes, split-K, poisoned outputs; the cross network's backward epilogues (CrossGrad, residual) on
the Triton and library paths; autograd of linear and cross_linear against torch."""

from __future__ import annotations

import itertools

import pytest
import torch

from polyrec.kernels.gemm import matmul, reference_matmul
from polyrec.kernels.gemm_configs import GemmConfig
from polyrec.kernels.gemm_epilogue import CrossGrad
from polyrec.kernels.gemm_layers import cross_linear, linear
from polyrec.kernels.gemm_select import GemmChoice

pytestmark = pytest.mark.skipif(
    __import__("os").environ.get("TRITON_INTERPRET", "0") in ("", "0"),
    reason="CPU GEMM tests run the Triton interpreter (TRITON_INTERPRET=1)")

SMALL = GemmConfig(block_m=16, block_n=32, block_k=16, group_m=2, num_warps=4, num_stages=2)
DTYPES = {"bf16": (torch.bfloat16, 2e-2), "fp16": (torch.float16, 2e-3), "fp32": (torch.float32, 1e-5),
          "tf32": (torch.float32, 5e-3)}
EPILOGUES = ("none", "bias", "relu", "bias_relu", "cross")
M, N, K = 17, 33, 29  # odd: every tile edge is partial


@pytest.fixture
def precision(request):
    previous = torch.get_float32_matmul_precision()
    yield lambda name: torch.set_float32_matmul_precision("high" if name == "tf32" else "highest")
    torch.set_float32_matmul_precision(previous)


def _operands(layout: str, dtype: torch.dtype, m=M, n=N, k=K):
    a = torch.randn((k, m) if layout[0] == "T" else (m, k), dtype=dtype)
    b = torch.randn((n, k) if layout[1] == "T" else (k, n), dtype=dtype)
    return a, b


def _epilogue_args(epilogue: str, dtype: torch.dtype, m=M, n=N) -> dict:
    args: dict = {}
    if epilogue in ("bias", "bias_relu", "cross"):
        args["bias"] = torch.randn(n, dtype=dtype)
    if epilogue in ("relu", "bias_relu"):
        args["activation"] = "relu"
    if epilogue == "cross":
        args["cross"] = (torch.randn(m, n, dtype=dtype), torch.randn(m, n, dtype=dtype))
    return args


def _check(out: torch.Tensor, ref: torch.Tensor, k: int, tol: float, what: str = "output") -> None:
    """No NaN (unwritten) element of ``out``, and each within ``tol`` of ``ref``'s largest value (plus 1) times
    sqrt(``k``), the terms summed; ``what`` names it in the messages."""
    assert not torch.isnan(out).any(), f"{what} has unwritten (NaN) elements"
    scale = ref.abs().max().item() + 1.0
    err = (out.double() - ref).abs().max().item()
    assert err <= tol * scale * max(1.0, k ** 0.5), f"{what}: max error {err:.3g} > {tol} x {scale:.3g}"


@pytest.mark.parametrize("layout,epilogue,dtype_name",
                         list(itertools.product(("NN", "NT", "TN"), EPILOGUES, DTYPES)))
def test_matmul_matches_float64(layout, epilogue, dtype_name, poisoned, precision):
    precision(dtype_name)
    dtype, tol = DTYPES[dtype_name]
    a, b = _operands(layout, dtype)
    args = _epilogue_args(epilogue, dtype)
    out = matmul(a, b, trans_a=layout[0] == "T", trans_b=layout[1] == "T", config=SMALL, **args)
    assert out.shape == (M, N) and out.dtype == dtype
    _check(out, reference_matmul(a, b, trans_a=layout[0] == "T", trans_b=layout[1] == "T", **args), K, tol)


@pytest.mark.parametrize("split_k,epilogue", [(2, "none"), (3, "bias_relu"), (4, "cross")])
def test_split_k_matches_float64(split_k, epilogue, poisoned):
    k = 97  # splits of unequal length, the last one partial
    a, b = _operands("NT", torch.float32, k=k)
    args = _epilogue_args(epilogue, torch.float32)
    config = GemmConfig(block_m=16, block_n=32, block_k=16, split_k=split_k, num_warps=4, num_stages=2)
    out = matmul(a, b, trans_b=True, config=config, **args)
    _check(out, reference_matmul(a, b, trans_b=True, **args), k, 1e-5)


def test_out_dtype_and_selector_path(poisoned):
    a, b = _operands("NN", torch.bfloat16)
    out = matmul(a, b, out_dtype=torch.float32)  # config=None: the selector (interpreter config)
    assert out.dtype == torch.float32
    _check(out, reference_matmul(a, b), K, 2e-2)


def test_bad_inputs_name_the_problem():
    a, b = _operands("NN", torch.float32)
    with pytest.raises(ValueError, match="inner sizes differ"):
        matmul(a, b, trans_b=True)
    with pytest.raises(ValueError, match="bias must be"):
        matmul(a, b, bias=torch.zeros(N + 1))
    with pytest.raises(ValueError, match="activation"):
        matmul(a, b, activation="gelu")
    with pytest.raises(TypeError, match="not supported"):
        matmul(a.double(), b.double())


@pytest.mark.parametrize("activation,with_bias", [("none", True), ("relu", True), ("relu", False)])
def test_linear_gradients_match_torch(activation, with_bias, precision):
    precision("fp32")
    x = torch.randn(19, 23, dtype=torch.float64)
    w = torch.randn(21, 23, dtype=torch.float64)
    bias = torch.randn(21, dtype=torch.float64) if with_bias else None
    grad = torch.randn(19, 21, dtype=torch.float64)
    ours = [t.float().requires_grad_() for t in (x, w) + ((bias,) if with_bias else ())]
    ref = [t.clone().requires_grad_() for t in (x, w) + ((bias,) if with_bias else ())]
    y = linear(ours[0], ours[1], ours[2] if with_bias else None, activation=activation)
    y_ref = torch.nn.functional.linear(ref[0], ref[1], ref[2] if with_bias else None)
    y_ref = torch.relu(y_ref) if activation == "relu" else y_ref
    y.backward(grad.float())
    y_ref.backward(grad)
    torch.testing.assert_close(y.double(), y_ref, atol=1e-4, rtol=1e-4)
    for got, want in zip(ours, ref):
        torch.testing.assert_close(got.grad.double(), want.grad, atol=1e-4, rtol=1e-4)


def test_cross_linear_gradients_match_torch(precision):
    precision("fp32")
    b, d, r = 19, 33, 17
    tensors = [torch.randn(*s, dtype=torch.float64) for s in ((b, d), (b, r), (b, d), (d, r), (d,))]
    ours = [t.float().requires_grad_() for t in tensors]
    ref = [t.clone().requires_grad_() for t in tensors]
    out = cross_linear(*ours)
    x0, v, xr, w, bias = ref
    out_ref = x0 * (v @ w.T + bias) + xr
    grad = torch.randn(b, d, dtype=torch.float64)
    out.backward(grad.float())
    out_ref.backward(grad)
    torch.testing.assert_close(out.double(), out_ref, atol=1e-4, rtol=1e-4)
    for got, want in zip(ours, ref):
        torch.testing.assert_close(got.grad.double(), want.grad, atol=1e-4, rtol=1e-4)


def test_linear_under_autocast_casts_like_f_linear():
    x = torch.randn(8, 16)
    w = torch.randn(32, 16, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = linear(x, w, activation="relu")
    assert y.dtype == torch.bfloat16
    y.float().sum().backward()
    assert w.grad is not None and w.grad.dtype == torch.float32


def _bf16_values(*shape, gen):
    """fp32 / float64 tensors of bf16-representable values (products of them are exact in fp32 sums' terms)."""
    return torch.randn(*shape, generator=gen).bfloat16().double()


def test_fp32_masters_beside_bf16_inputs_get_unrounded_fp32_gradients(rng):
    """A bf16 x with fp32 master weight and bias: the forward runs on their bf16 copies, and the masters'
    gradients come back in fp32, the weight's written by its GEMM in fp32: it matches the float64
    gradient of the bf16 copies to fp32 accuracy, 100x closer than the bf16 rounding a cast of a bf16
    product leaves (poisoned: nothing unwritten)."""
    x64, g64 = _bf16_values(64, 24, gen=rng), _bf16_values(64, 40, gen=rng)
    w = torch.randn(40, 24, generator=rng, requires_grad=True)  # fp32 master, not bf16-representable
    bias = torch.randn(40, generator=rng, requires_grad=True)
    y = linear(x64.bfloat16(), w, bias, activation="none")
    assert y.dtype == torch.bfloat16
    y.backward(g64.bfloat16())
    assert w.grad.dtype == bias.grad.dtype == torch.float32
    want_w, want_b = g64.T @ x64, g64.sum(0)
    err = ((w.grad.double() - want_w).abs().max() / want_w.abs().max()).item()
    rounded = ((want_w.bfloat16().double() - want_w).abs().max() / want_w.abs().max()).item()
    assert err < 1e-6 < rounded / 100, (err, rounded)
    torch.testing.assert_close(bias.grad.double(), want_b, rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(y.double(), torch.nn.functional.linear(x64, w.detach().bfloat16().double(),
                                                                      bias.detach().bfloat16().double()),
                               rtol=1e-2, atol=1e-2)


def _cross_grad_case(dtype: torch.dtype, acc_dtype: torch.dtype, m=M, n=N):
    """Operands of the CrossGrad epilogue: grad, x0 and a d_x0 accumulator holding earlier terms."""
    grad, x0 = torch.randn(m, n, dtype=dtype), torch.randn(m, n, dtype=dtype)
    return grad, x0, torch.randn(m, n, dtype=acc_dtype)


def _cross_grad_outputs(d_x0: torch.Tensor, accumulate: bool, n=N) -> tuple[torch.Tensor, torch.Tensor]:
    """(d_x0's earlier terms in float64, a NaN-poisoned bias-gradient buffer [n]); d_x0 itself poisoned
    where the epilogue must overwrite it (``accumulate`` False)."""
    earlier = d_x0.double()
    if not accumulate:
        d_x0.fill_(float("nan"))  # must be overwritten
    return earlier, torch.full((n,), float("nan"))


@pytest.mark.parametrize("layout,dtype_name,accumulate,plus_grad,acc_dtype,split_k", [
    ("NT", "bf16", True, False, torch.bfloat16, 1), ("NT", "bf16", False, True, torch.float32, 1),
    ("NN", "fp32", True, True, torch.float32, 1), ("NT", "fp32", False, False, torch.float32, 3),
    ("NT", "bf16", True, True, torch.bfloat16, 2)])
def test_cross_grad_epilogue_matches_float64(layout, dtype_name, accumulate, plus_grad, acc_dtype, split_k,
                                             poisoned, precision):
    precision(dtype_name)
    dtype, tol = DTYPES[dtype_name]
    m, k = (45, 97) if split_k > 1 else (M, K)  # split-K: two row blocks of the reduction kernel too
    a, b = _operands(layout, dtype, m=m, k=k)
    bias = torch.randn(N, dtype=dtype)
    grad, x0, d_x0 = _cross_grad_case(dtype, acc_dtype, m=m)
    earlier, bias_grad = _cross_grad_outputs(d_x0, accumulate)
    config = GemmConfig(block_m=16, block_n=32, block_k=16, split_k=split_k, num_warps=4, num_stages=2)
    g = matmul(a, b, trans_b=layout[1] == "T", bias=bias, config=config,
               cross_grad=CrossGrad(grad=grad, x0=x0, d_x0=d_x0, accumulate=accumulate, plus_grad=plus_grad,
                                    bias_grad=bias_grad))
    y = reference_matmul(a, b, trans_b=layout[1] == "T", bias=bias)
    g_ref = grad.double() * x0.double()
    d_x0_ref = grad.double() * (y + 1 if plus_grad else y) + (earlier if accumulate else 0)
    assert g.dtype == dtype and d_x0.dtype == acc_dtype
    _check(g, g_ref, 1, tol)
    if acc_dtype == torch.bfloat16:  # y is exact to fp32; the bf16 rounding of d_x0 dominates
        _check(d_x0, d_x0_ref, 1, 1e-2)
    else:
        _check(d_x0, d_x0_ref, k, 1e-5)
    _check(bias_grad, g_ref.sum(0), m, tol)


@pytest.mark.parametrize("layout,dtype_name,split_k", [("NN", "bf16", 1), ("NT", "fp32", 1), ("NN", "fp32", 4)])
def test_residual_epilogue_matches_float64(layout, dtype_name, split_k, poisoned, precision):
    precision(dtype_name)
    dtype, tol = DTYPES[dtype_name]
    k = 97 if split_k > 1 else K
    a, b = _operands(layout, dtype, k=k)
    residual = torch.randn(M, N, dtype=dtype)
    config = GemmConfig(block_m=16, block_n=32, block_k=16, split_k=split_k, num_warps=4, num_stages=2)
    out = matmul(a, b, trans_b=layout[1] == "T", residual=residual, config=config)
    want = reference_matmul(a, b, trans_b=layout[1] == "T") + residual.double()
    _check(out, want, k, tol)
    given_up = matmul(a, b, trans_b=layout[1] == "T", residual=residual, config=config, overwrite_residual=True)
    assert given_up.data_ptr() == residual.data_ptr()  # written over the residual, read tile by tile first
    _check(given_up, want, k, tol)


@pytest.mark.parametrize("dtype_name", ["fp32", "bf16"])
def test_library_path_adds_a_given_up_residual_in_place(dtype_name, monkeypatch, precision, force_gemm):
    """overwrite_residual on the library path: the GEMM adds the residual itself (no epilogue pass)
    and returns the residual's own storage; without it the residual is left untouched."""
    import polyrec.kernels.gemm as gemm

    choice = GemmChoice(backend="library", config=SMALL, triton_seconds=1.0, library_seconds=0.0)
    force_gemm(choice)
    precision(dtype_name)
    dtype, tol = DTYPES[dtype_name]
    a, b = _operands("NN", dtype)
    residual = torch.randn(M, N, dtype=dtype)
    want = reference_matmul(a, b) + residual.double()
    kept = residual.clone()
    out = matmul(a, b, residual=residual, config=None)
    assert out.data_ptr() != residual.data_ptr() and torch.equal(residual, kept)
    monkeypatch.setattr(gemm, "apply_epilogue", lambda *args: pytest.fail("epilogue pass ran"))
    out = matmul(a, b, residual=residual, overwrite_residual=True)
    assert out.data_ptr() == residual.data_ptr()
    _check(out, want, K, tol)


@pytest.mark.parametrize("activation,dtype_name", [("none", "fp32"), ("relu", "fp32"), ("relu", "bf16")])
def test_library_applies_a_bias_and_relu_in_its_own_gemm(activation, dtype_name, monkeypatch, precision, force_gemm):
    """A bias, with or without ReLU, in the inputs' dtype: the library's GEMM applies it (torch.addmm /
    torch._addmm_activation: cuBLASLt's epilogue on a GPU), no pass runs, and the values are the
    float64 reference's."""
    import polyrec.kernels.gemm as gemm

    choice = GemmChoice(backend="library", config=SMALL, triton_seconds=1.0, library_seconds=0.0)
    force_gemm(choice)
    monkeypatch.setattr(gemm, "apply_epilogue", lambda *args: pytest.fail("epilogue pass ran"))
    precision(dtype_name)
    dtype, tol = DTYPES[dtype_name]
    a, b = _operands("NT", dtype)
    bias = torch.randn(N, dtype=dtype)
    out = matmul(a, b, trans_b=True, bias=bias, activation=activation)
    _check(out, reference_matmul(a, b, trans_b=True, bias=bias, activation=activation), K, tol)


LIBRARY_EPILOGUES = EPILOGUES + ("residual", "cross_grad")


@pytest.mark.parametrize("epilogue,dtype_name,out_dtype", [(e, "fp32", None) for e in LIBRARY_EPILOGUES] + [
    ("cross", "bf16", None), ("bias_relu", "bf16", torch.float32), ("cross_grad", "bf16", None),
    ("residual", "fp16", torch.float32)])
def test_library_path_fused_pass_matches_float64(epilogue, dtype_name, out_dtype, monkeypatch, poisoned, precision,
                                                force_gemm):
    """The selector hands the GEMM to torch: torch.matmul, then the one Triton epilogue pass (never
    the eager torch ops) applies every epilogue; 45 rows = two row blocks of the pass."""
    import polyrec.kernels.gemm_epilogue as gemm_epilogue

    choice = GemmChoice(backend="library", config=SMALL, triton_seconds=1.0, library_seconds=0.0)
    force_gemm(choice)
    monkeypatch.setattr(gemm_epilogue, "_eager_epilogue", lambda *args: pytest.fail("eager epilogue ran"))
    precision(dtype_name)
    dtype, tol = DTYPES[dtype_name]
    m = 45
    a, b = _operands("NT", dtype, m=m)
    args = _epilogue_args(epilogue, dtype, m=m)
    ref = reference_matmul(a, b, trans_b=True, **args)
    if epilogue == "residual":
        args["residual"] = torch.randn(m, N, dtype=dtype)
        ref = ref + args["residual"].double()
    if epilogue != "cross_grad":
        out = matmul(a, b, trans_b=True, out_dtype=out_dtype, **args)
        assert out.dtype == (out_dtype or dtype)
        _check(out, ref, K, tol)
        return
    bias = torch.randn(N, dtype=dtype)
    grad, x0, d_x0 = _cross_grad_case(dtype, dtype, m=m)
    earlier, bias_grad = _cross_grad_outputs(d_x0, accumulate=True)
    g = matmul(a, b, trans_b=True, bias=bias,
               cross_grad=CrossGrad(grad=grad, x0=x0, d_x0=d_x0, plus_grad=True, bias_grad=bias_grad))
    _check_cross_grad(g, d_x0, bias_grad, grad, x0, reference_matmul(a, b, trans_b=True, bias=bias) + 1, earlier, tol)


def _check_cross_grad(g, d_x0, bias_grad, grad, x0, y, earlier, tol):
    """The library path's CrossGrad results against float64: g = grad * x0, d_x0 = earlier + grad * y
    (y: the layer's output, plus one where x0 is also the residual), the bias gradient = g's column sums."""
    g_ref = grad.double() * x0.double()
    _check(g, g_ref, 1, tol)
    _check(d_x0, earlier + grad.double() * y, K, tol)
    _check(bias_grad, g_ref.sum(0), g.shape[0], tol)


@pytest.mark.parametrize("accumulate", [True, False])
def test_cross_grad_pass_walking_row_blocks_matches_float64(accumulate, monkeypatch, poisoned, precision,
                                                           force_gemm):
    """The CrossGrad pass with two row blocks per program (``pass_row_blocks``): 150 rows = three
    programs, the last one's second block wholly past the end; its column sums once per program."""
    import polyrec.kernels.gemm_configs as configs

    monkeypatch.setattr(configs, "PASS_ROW_BLOCKS", 2)
    monkeypatch.setattr(configs, "PASS_MIN_ROW_PROGRAMS", 1)
    assert configs.pass_row_blocks(150) == 2
    force_gemm(GemmChoice(backend="library", config=SMALL, triton_seconds=1.0, library_seconds=0.0))
    precision("fp32")
    dtype, tol = DTYPES["fp32"]
    m = 150
    a, b = _operands("NT", dtype, m=m)
    bias = torch.randn(N, dtype=dtype)
    grad, x0, d_x0 = _cross_grad_case(dtype, dtype, m=m)
    earlier, bias_grad = _cross_grad_outputs(d_x0, accumulate)
    g = matmul(a, b, trans_b=True, bias=bias,
               cross_grad=CrossGrad(grad=grad, x0=x0, d_x0=d_x0, accumulate=accumulate, bias_grad=bias_grad))
    _check_cross_grad(g, d_x0, bias_grad, grad, x0, reference_matmul(a, b, trans_b=True, bias=bias),
                      earlier if accumulate else 0, tol)


def test_library_path_overwrites_d_x0_without_reading_it(poisoned, force_gemm):
    choice = GemmChoice(backend="library", config=SMALL, triton_seconds=1.0, library_seconds=0.0)
    force_gemm(choice)
    a, b = _operands("NN", torch.float32)
    grad, x0, d_x0 = _cross_grad_case(torch.float32, torch.float32)
    d_x0.fill_(float("nan"))
    g = matmul(a, b, cross_grad=CrossGrad(grad=grad, x0=x0, d_x0=d_x0, accumulate=False))
    _check(g, grad.double() * x0.double(), 1, 1e-5)
    _check(d_x0, grad.double() * reference_matmul(a, b), K, 1e-5)


def test_fused_epilogues_reject_bad_inputs():
    a, b = _operands("NN", torch.float32)
    grad, x0, d_x0 = _cross_grad_case(torch.float32, torch.float32)
    with pytest.raises(ValueError, match="residual must be"):
        matmul(a, b, residual=torch.zeros(M, N + 1))
    with pytest.raises(ValueError, match="d_x0 must be"):
        matmul(a, b, cross_grad=CrossGrad(grad=grad, x0=x0, d_x0=d_x0[:, 1:]))
    with pytest.raises(ValueError, match="bias_grad must be fp32"):
        matmul(a, b, cross_grad=CrossGrad(grad=grad, x0=x0, d_x0=d_x0, bias_grad=torch.zeros(N, dtype=torch.float64)))
    with pytest.raises(ValueError, match="exclusive"):
        matmul(a, b, residual=grad, cross=(x0, grad))
    with pytest.raises(ValueError, match="no activation"):
        matmul(a, b, residual=grad, activation="relu")


def test_library_flag_runs_the_library_path_whatever_the_selector_says(monkeypatch):
    """``matmul(library=True)``: torch.matmul + the fused epilogue pass, even where the selector picks
    Triton; with a Triton config it is an error."""
    import polyrec.kernels.gemm as gemm_module
    from polyrec.kernels.gemm_select import INTERPRETER_CONFIG

    calls = []
    real = gemm_module._library
    monkeypatch.setattr(gemm_module, "_library", lambda *args, **kw: calls.append(1) or real(*args, **kw))
    gen = torch.Generator().manual_seed(7)
    a, b = torch.randn(37, 24, generator=gen), torch.randn(24, 19, generator=gen)
    bias = torch.randn(19, generator=gen)
    out = gemm_module.matmul(a, b, bias=bias, activation="relu", library=True)
    assert calls == [1]
    torch.testing.assert_close(out.double(), gemm_module.reference_matmul(a, b, bias=bias, activation="relu"),
                               rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="no Triton config"):
        gemm_module.matmul(a, b, library=True, config=INTERPRETER_CONFIG)


@pytest.mark.parametrize("in_place", [False, True])
def test_epilogue_pass_on_a_given_product(in_place, poisoned):
    """``epilogue_pass`` over an existing product: bias + cross and bias + ReLU against float64, into
    a fresh output (poisoned) or in place."""
    from polyrec.kernels.gemm_epilogue import epilogue_pass

    gen = torch.Generator().manual_seed(11)
    y, x0, x = (torch.randn(M, N, generator=gen) for _ in range(3))
    bias = torch.randn(N, generator=gen)
    want_cross = x0.double() * (y.double() + bias.double()) + x.double()
    want_relu = torch.relu(y.double() + bias.double())
    got_cross = epilogue_pass(y.clone(), bias=bias, cross=(x0, x)) if not in_place else None
    if in_place:
        yy = y.clone()
        got_cross = epilogue_pass(yy, bias=bias, cross=(x0, x), out=yy)
        assert got_cross.data_ptr() == yy.data_ptr()
    got_relu = epilogue_pass(y, bias=bias, activation="relu")
    torch.testing.assert_close(got_cross.double(), want_cross, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_relu.double(), want_relu, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="cross x0 must be"):
        epilogue_pass(y, cross=(x0[:-1], x))


def test_the_library_writes_fp32_only_where_torchs_kernel_takes_it(monkeypatch):
    """``torch.mm(out_dtype=fp32)`` for half-precision operands on a GPU, except the two settings
    aten's kernel refuses (ROCm's CK backend; fp16 with fp16 accumulation): the product and a cast
    pass run there. A stand-in operand says where it lives (no GPU here)."""
    from types import SimpleNamespace

    from polyrec.kernels.gemm import _library_writes_fp32

    gpu_bf16, gpu_fp16 = SimpleNamespace(is_cuda=True, dtype=torch.bfloat16), SimpleNamespace(is_cuda=True,
                                                                                              dtype=torch.float16)
    monkeypatch.setattr(torch.backends.cuda, "preferred_blas_library", lambda: torch._C._BlasBackend.Cublaslt)
    assert _library_writes_fp32(gpu_bf16, torch.float32) and _library_writes_fp32(gpu_fp16, torch.float32)
    assert not _library_writes_fp32(gpu_bf16, torch.bfloat16)
    assert not _library_writes_fp32(SimpleNamespace(is_cuda=False, dtype=torch.bfloat16), torch.float32)
    assert not _library_writes_fp32(SimpleNamespace(is_cuda=True, dtype=torch.float32), torch.float32)
    monkeypatch.setattr(torch.backends.cuda, "matmul", SimpleNamespace(allow_fp16_accumulation=True))
    assert _library_writes_fp32(gpu_bf16, torch.float32) and not _library_writes_fp32(gpu_fp16, torch.float32)
    monkeypatch.setattr(torch.backends.cuda, "preferred_blas_library", lambda: torch._C._BlasBackend.Ck)
    assert not _library_writes_fp32(gpu_bf16, torch.float32)


def test_matmul_checks_and_selects_once_per_call_signature(force_gemm, monkeypatch):
    """matmul's dispatch memo: a repeated call skips the checks and the selector; whatever they read
    (a stride's 16-byte alignment, the bias's size, a fused tensor's shape, the bias gradient's dtype)
    makes a new signature, checked and selected afresh, so bad input still gets its error."""
    import polyrec.kernels.gemm as gemm_module
    from polyrec.kernels import gemm_select

    real, aligned = gemm_module.select_gemm, []
    force_gemm(select=lambda *args, **kw: aligned.append(kw["a_aligned"]) or real(*args, **kw))
    buf, b = torch.randn(32 * 32 + 1), torch.randn(32, 16)
    a, shifted = buf[:-1].view(32, 32), buf[1:].view(32, 32)  # the second starts 4 bytes past a 16-byte line
    matmul(a, b)
    matmul(a, b)
    assert aligned == [True] and len(gemm_select.DISPATCH) == 1
    _check(matmul(shifted, b), reference_matmul(shifted, b), 32, 1e-5)
    assert aligned == [True, False]
    matmul(a, b, bias=torch.randn(16))
    with pytest.raises(ValueError, match="bias must be"):
        matmul(a, b, bias=torch.randn(17))
    grad, x0, d_x0 = _cross_grad_case(torch.float32, torch.float32, m=32, n=16)
    matmul(a, b, cross=(x0, grad))
    with pytest.raises(ValueError, match="cross x must be"):
        matmul(a, b, cross=(x0, grad[:, 1:]))
    matmul(a, b, cross_grad=CrossGrad(grad=grad, x0=x0, d_x0=d_x0, bias_grad=torch.zeros(16)))
    with pytest.raises(ValueError, match="bias_grad must be fp32"):
        matmul(a, b, cross_grad=CrossGrad(grad=grad, x0=x0, d_x0=d_x0, bias_grad=torch.zeros(16, dtype=torch.float64)))
    assert len(aligned) == 5  # one selection per good signature
    monkeypatch.setattr(gemm_module, "DISPATCH_ENTRIES", 2)
    matmul(a, b, activation="relu")
    assert len(gemm_select.DISPATCH) <= 2
    gemm_select.clear_cache()
    assert not gemm_select.DISPATCH


def test_selecting_as_captured_holds_for_every_thread_until_its_block_ends(monkeypatch):
    """A warm-up's GEMMs select as its capture's will (by GPU time alone), its backward's too: the autograd
    engine runs those on its own thread. CPU tensors are never captured."""
    import threading
    from types import SimpleNamespace

    from polyrec.kernels.gemm import _selects_as_captured, selecting_as_captured

    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    on_gpu, on_cpu = SimpleNamespace(is_cuda=True), SimpleNamespace(is_cuda=False)
    assert not _selects_as_captured(on_gpu)
    seen = []
    with pytest.raises(KeyError), selecting_as_captured():
        worker = threading.Thread(target=lambda: seen.append(_selects_as_captured(on_gpu)))
        worker.start()
        worker.join()
        with selecting_as_captured():
            seen.append(_selects_as_captured(on_gpu))
        seen.append(_selects_as_captured(on_gpu))
        seen.append(_selects_as_captured(on_cpu))
        raise KeyError("a failed warm-up pass")
    assert seen == [True, True, True, False]
    assert not _selects_as_captured(on_gpu)  # the block ended by an exception
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert _selects_as_captured(on_gpu) and not _selects_as_captured(on_cpu)


def test_a_strided_operand_past_32_bit_offsets_runs_on_the_library(force_gemm):
    """A [4, 16] slice of rows 2^30 apart holds 64 elements but spans 3.2e9: the Triton kernels' 32-bit offsets
    wrapped (a crash in the interpreter). The selector's Triton answer goes to the library, which takes any
    strides; a Triton config given for it is refused (meta tensors: no memory)."""
    from polyrec.kernels.gemm import _dispatch

    def backend(a, b):
        return _dispatch(a, b, False, False, None, "none", None, None, None, torch.float16, False)[-1].backend

    wide = torch.empty(4, 2**30, dtype=torch.float16, device="meta")[:, :16]
    narrow = torch.empty(4, 2**20, dtype=torch.float16, device="meta")[:, :16]
    b = torch.empty(16, 16, dtype=torch.float16, device="meta")
    force_gemm(GemmChoice(backend="triton", config=SMALL, triton_seconds=1.0, library_seconds=2.0))
    assert backend(wide, b) == "library" and backend(narrow, b) == "triton"
    assert matmul(wide, b).shape == (4, 16)
    with pytest.raises(ValueError, match=r"matmul: a spans 3221225488 elements \(shape \(4, 16\), strides "
                                         r"\(1073741824, 1\)\), more than the Triton kernels' 32-bit offsets reach"):
        matmul(wide, b, config=SMALL)


@pytest.mark.parametrize("out_dtype", [torch.int32, torch.bool, torch.float64])
def test_an_output_dtype_the_kernels_do_not_write_is_refused(out_dtype):
    """Was: accepted, the product truncated or cast in silence."""
    with pytest.raises(TypeError, match=f"matmul: out_dtype {out_dtype} is not supported"):
        matmul(torch.randn(4, 8), torch.randn(8, 4), out_dtype=out_dtype)
