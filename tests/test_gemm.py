"""GEMM numerics through the Triton interpreter against float64: every layout, epilogue and dtype,
odd sizes, split-K, poisoned outputs; autograd of linear and cross_linear against torch."""

from __future__ import annotations

import itertools

import pytest
import torch

from polyrec.kernels.gemm import cross_linear, linear, matmul, reference_matmul
from polyrec.kernels.gemm_configs import GemmConfig

pytestmark = pytest.mark.skipif(
    __import__("os").environ.get("TRITON_INTERPRET", "0") in ("", "0"),
    reason="CPU GEMM tests run the Triton interpreter (TRITON_INTERPRET=1)")

SMALL = GemmConfig(block_m=16, block_n=32, block_k=16, group_m=2, num_warps=4, num_stages=2)
DTYPES = {"bf16": (torch.bfloat16, 2e-2), "fp16": (torch.float16, 2e-3), "fp32": (torch.float32, 1e-5),
          "tf32": (torch.float32, 5e-3)}
EPILOGUES = ("none", "bias", "relu", "bias_relu", "cross")
M, N, K = 17, 33, 29  # odd: every tile edge is partial


@pytest.fixture
def poisoned(monkeypatch):
    """Make every torch.empty of a float dtype start as NaN, so unwritten outputs show."""
    real = torch.empty

    def nan_empty(*args, **kwargs):
        t = real(*args, **kwargs)
        return t.fill_(float("nan")) if t.is_floating_point() else t

    monkeypatch.setattr(torch, "empty", nan_empty)


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


def _check(out: torch.Tensor, ref: torch.Tensor, k: int, tol: float) -> None:
    assert not torch.isnan(out).any(), "output has unwritten (NaN) elements"
    scale = ref.abs().max().item() + 1.0
    err = (out.double() - ref).abs().max().item()
    assert err <= tol * scale * max(1.0, k ** 0.5), f"max error {err:.3g} > {tol} x {scale:.3g}"


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
