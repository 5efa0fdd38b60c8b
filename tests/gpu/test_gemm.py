"""GEMM on the GPU: selected and explicit configs, and the library path (torch.matmul + the fused
epilogue pass), against float64, every layout and epilogue."""

from __future__ import annotations

import pytest
import torch

from polyrec.kernels.gemm import matmul, reference_matmul
from polyrec.kernels.gemm_configs import GemmConfig
from polyrec.kernels.gemm_layers import cross_linear, linear

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA or ROCm GPU", allow_module_level=True)

CONFIGS = [None, GemmConfig(block_m=128, block_n=128, block_k=64, num_warps=4, num_stages=3),
           GemmConfig(block_m=64, block_n=64, block_k=64, num_warps=4, num_stages=3, split_k=4)]


def _operands(layout: str, epilogue: str, m: int, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """bf16 a, b in ``layout`` ("NN", "NT", "TN") and matmul's epilogue arguments."""
    a = torch.randn((k, m) if layout[0] == "T" else (m, k), device="cuda", dtype=torch.bfloat16)
    b = torch.randn((n, k) if layout[1] == "T" else (k, n), device="cuda", dtype=torch.bfloat16)
    args: dict = {"trans_a": layout[0] == "T", "trans_b": layout[1] == "T"}
    if epilogue != "none":
        args["bias"] = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    if epilogue == "bias_relu":
        args["activation"] = "relu"
    if epilogue == "cross":
        args["cross"] = tuple(torch.randn(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    return a, b, args


def _assert_matches(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, args: dict) -> None:
    ref = reference_matmul(a, b, **args)
    assert not torch.isnan(out).any()
    assert ((out.double() - ref).abs().max() / ref.abs().max()).item() < 2e-2


@pytest.mark.parametrize("layout", ["NN", "NT", "TN"])
@pytest.mark.parametrize("epilogue", ["none", "bias_relu", "cross"])
@pytest.mark.parametrize("config", CONFIGS + ["library"], ids=["selected", "128x128", "splitk4", "library"])
def test_matmul_matches_float64(layout, epilogue, config):
    a, b, args = _operands(layout, epilogue, 1000, 771, 1536)
    out = matmul(a, b, library=True, **args) if config == "library" else matmul(a, b, config=config, **args)
    _assert_matches(out, a, b, args)


def test_layers_backward_on_gpu():
    x = torch.randn(4096, 512, device="cuda", requires_grad=True)
    w = torch.randn(256, 512, device="cuda", requires_grad=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = linear(x, w, activation="relu")
    y.float().sum().backward()
    assert x.grad is not None and w.grad is not None and torch.isfinite(w.grad).all()
    x0, xr = torch.randn(2, 2048, 3456, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(2048, 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    u = torch.randn(3456, 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    bias = torch.zeros(3456, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    cross_linear(x0, v, xr, u, bias).float().sum().backward()
    assert torch.isfinite(u.grad).all() and torch.isfinite(v.grad).all()


@pytest.mark.skipif(not torch.cuda.is_available() or torch.version.hip is not None
                    or torch.cuda.get_device_capability() != (9, 0), reason="the TMA kernel is sm_90 only")
@pytest.mark.parametrize("layout", ["NN", "NT"])
@pytest.mark.parametrize("epilogue", ["none", "bias_relu", "cross"])
@pytest.mark.parametrize("subtile", [False, True])
def test_tma_configs_match_float64(layout, epilogue, subtile):
    """matmul routed to the persistent TMA kernel (odd M, several tiles per program) against float64."""
    config = GemmConfig(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=3, persistent_tma=True,
                        epilogue_subtile=subtile)
    a, b, args = _operands(layout, epilogue, 1000, 768, 1536)  # N and K keep 16-byte rows (TMA); M is odd
    _assert_matches(matmul(a, b, config=config, **args), a, b, args)


TMA_CONFIG = GemmConfig(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=3, persistent_tma=True)


@pytest.mark.parametrize("config", [CONFIGS[1], CONFIGS[2], TMA_CONFIG], ids=["128x128", "splitk4", "tma"])
def test_the_relu_epilogue_keeps_nan_as_torch_relu(config):
    """tl.maximum(acc, 0) turns NaN into 0 on a GPU by default (its propagate_nan NONE): a NaN weight's
    products vanished at the next ReLU and the loss stayed finite. The interpreter keeps NaN either way."""
    if config.persistent_tma and (torch.version.hip is not None or torch.cuda.get_device_capability() != (9, 0)):
        pytest.skip("the TMA kernel is sm_90 only")
    a, b, args = _operands("NN", "bias_relu", 256, 256, 256)
    a[3, 5] = float("nan")  # row 3 of the product is NaN
    out = matmul(a, b, config=config, **args)
    assert torch.isnan(out[3]).all() and not torch.isnan(out[:3]).any()


def test_relu_bias_backward_matches_torch():
    from polyrec.kernels.dense_backward import relu_bias_backward

    grad = torch.randn(65536, 1024, device="cuda", dtype=torch.bfloat16)
    y = torch.relu(torch.randn(65536, 1024, device="cuda", dtype=torch.bfloat16))
    masked, db = relu_bias_backward(grad, y, relu=True, need_bias=True)
    want = torch.ops.aten.threshold_backward(grad, y, 0)
    assert torch.equal(masked, want)
    torch.testing.assert_close(db, want.double().sum(0).float(), rtol=1e-4, atol=1e-2)


@pytest.mark.parametrize("config", [None, "library"], ids=["selected", "library"])
def test_weight_gradient_gemm_writes_fp32_unrounded(config):
    """The wgrad GEMM of a bf16 layer with an fp32 master ([out, B] x [B, in], B = 65536): fp32 out
    straight from the library (``torch.mm(out_dtype=)``) or the Triton kernel, as close to float64 as
    fp32 accumulation gets, over 20x closer than a rounded bf16 product (cuBLAS: 40-600x on the MLPerf
    shapes, benchmarks/results/wgrad_fp32_probe_nvidia-h200_2026-12-01)."""
    g = torch.randn(65536, 256, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(65536, 512, device="cuda", dtype=torch.bfloat16)
    out = matmul(g, x, trans_a=True, out_dtype=torch.float32, library=config == "library")
    ref = g.double().T @ x.double()
    assert out.dtype == torch.float32
    err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
    rounded = ((ref.bfloat16().double() - ref).abs().max() / ref.abs().max()).item()
    assert err < rounded / 20, (err, rounded)


@pytest.mark.parametrize("layout", ["NN", "NT"])
@pytest.mark.parametrize("capture", ["none", "graph", "graph_with_copy"])
def test_residual_dgrad_in_place_matches_float64(layout, capture):
    """The cross network's ``dlow @ V + G`` at dcnv2-small's size (batch 2048, D 432, rank 32), G given up to
    the call, at the config the selector takes while a graph is captured (Triton): eager, captured in a CUDA
    graph, and captured with B's copy made inside the graph and its memory taken by the next allocation there
    (as the backward's ``V.t().contiguous()`` is). Written when the forty-fifth session's transposed V (layout
    NT) made a graphed dcnv2-small fp8 run train apart from the eager one; it passed on the H200, and the
    cause was the capture's warm-up (``polyrec.runtime.graphs.capture``): kept as the GEMM's own check."""
    m, n, k = 2048, 432, 32
    dlow = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    grad = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    ref = dlow.double() @ v.double() + grad.double()
    config = GemmConfig(block_m=64, block_n=32, block_k=32, group_m=8, num_warps=4, num_stages=5)

    def call(residual: torch.Tensor) -> torch.Tensor:
        b = v.t().contiguous() if layout == "NT" else v
        out = matmul(dlow, b, trans_b=layout == "NT", residual=residual, overwrite_residual=True, config=config)
        if capture == "graph_with_copy":
            del b
            torch.full((n, k), float("nan"), device="cuda", dtype=torch.bfloat16)  # may take b's block
        return out

    given = grad.clone()
    if capture == "none":
        out = call(given)
    else:
        call(grad.clone())  # compiled before the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = call(given)
        given.copy_(grad)
        graph.replay()
    torch.cuda.synchronize()
    assert out.data_ptr() == given.data_ptr()
    assert ((out.double() - ref).abs().max() / ref.abs().max()).item() < 2e-2
