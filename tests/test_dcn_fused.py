"""The DCN-v2 cross network with the fused backward (polyrec.kernels.dcn) against a float64 eager
reference built from torch.nn ops: output and every gradient (x0, each V, U, b), odd sizes, poisoned
buffers, the Triton interpreter and the library path, and the model's fused vs unfused paths."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

from polyrec.kernels.dcn import compile_jobs, cross_network
from polyrec.kernels.gemm_configs import GemmConfig
from polyrec.kernels.gemm_select import GemmChoice

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET", "0") in ("", "0"),
                                reason="CPU kernel tests run the Triton interpreter (TRITON_INTERPRET=1)")

B, D, R = 37, 24, 8  # odd batch, D and rank not multiples of the 32-wide interpreter tiles
#: Relative tolerance (of the largest reference value) per compute dtype: fp32 is IEEE here
#: ("highest"); bf16 rounds every stored [B, D] tensor to 8 bits of mantissa.
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 5e-2}


@pytest.fixture(autouse=True)
def _ieee_fp32():
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    yield
    torch.set_float32_matmul_precision(previous)


def _problem(layers: int, gen: torch.Generator) -> list[torch.Tensor]:
    """float64 x0 [B, D], V_l [R, D], U_l [D, R], b_l [D] at the DLRM init scales."""
    x0 = torch.randn(B, D, generator=gen, dtype=torch.float64)
    vs = [torch.randn(R, D, generator=gen, dtype=torch.float64) * (2 / (R + D)) ** 0.5 for _ in range(layers)]
    us = [torch.randn(D, R, generator=gen, dtype=torch.float64) * (2 / (R + D)) ** 0.5 for _ in range(layers)]
    bs = [torch.randn(D, generator=gen, dtype=torch.float64) * D ** -0.5 for _ in range(layers)]
    return [x0, *vs, *us, *bs]


def _reference(leaves: list[torch.Tensor], layers: int) -> torch.Tensor:
    """x_{l+1} = x0 * U_l(V_l x_l) + x_l from nn.functional.linear, in float64."""
    x0 = x = leaves[0]
    for l in range(layers):
        low = F.linear(x, leaves[1 + l])  # [B, R]
        x = x0 * F.linear(low, leaves[1 + layers + l], leaves[1 + 2 * layers + l]) + x
    return x


def _run_and_compare(layers: int, dtype: torch.dtype, gen: torch.Generator, frozen: tuple[int, ...] = (),
                     owns_output_grad: bool = False, masters: torch.dtype | None = None) -> bool:
    """Compare with the float64 reference; returns whether the output gradient handed to the network's
    backward was written over. ``masters``: the weights' dtype when not x0's (fp32 masters of a bf16
    network: the reference takes their ``dtype`` copies, and their gradients must be in ``masters``)."""
    tensors = _problem(layers, gen)
    if masters is not None:  # the values the network computes with: the masters' copies in dtype
        tensors = [tensors[0]] + [t.to(masters).to(dtype).double() for t in tensors[1:]]
    grad = torch.randn(B, D, generator=gen, dtype=torch.float64)
    ref = [t.clone().requires_grad_(i not in frozen) for i, t in enumerate(tensors)]
    ours = [t.to(dtype if i == 0 or masters is None else masters).requires_grad_(i not in frozen)
            for i, t in enumerate(tensors)]
    out_ref = _reference(ref, layers)
    out_ref.backward(grad)
    out = cross_network(ours[0], ours[1:1 + layers], ours[1 + layers:1 + 2 * layers], ours[1 + 2 * layers:],
                        owns_output_grad=owns_output_grad)
    given = grad.to(dtype)
    out.backward(given)
    tol = TOLERANCE[dtype]
    assert out.dtype == dtype
    torch.testing.assert_close(out.double(), out_ref.detach(), rtol=0, atol=tol * out_ref.abs().max().item())
    names = ["x0"] + [f"{p}{l}" for p in "VUb" for l in range(layers)]
    for name, got, want in zip(names, ours, ref):
        if want.grad is None:
            assert got.grad is None, f"{name} needs no gradient but got one"
            continue
        assert got.grad is not None and got.grad.dtype == got.dtype, name
        assert not torch.isnan(got.grad).any(), f"{name}'s gradient has unwritten (NaN) elements"
        torch.testing.assert_close(got.grad.double(), want.grad, rtol=0, atol=tol * want.grad.abs().max().item(),
                                   msg=lambda m, name=name: f"gradient of {name}: {m}")
    return not torch.equal(given, grad.to(dtype))


@pytest.mark.parametrize("layers,dtype", [(3, torch.float32), (1, torch.float32), (3, torch.bfloat16)])
def test_fused_cross_network_matches_float64(layers, dtype, poisoned, rng):
    _run_and_compare(layers, dtype, rng)


def test_fp32_masters_of_a_bf16_network_get_fp32_gradients(poisoned, rng):
    """bf16 x0 with fp32 V, U, b (the model's masters, copied to bf16 inside): every weight gradient
    comes back in fp32 (the weight-gradient GEMMs write it) and matches the reference."""
    _run_and_compare(3, torch.bfloat16, rng, masters=torch.float32)


def test_frozen_inputs_get_no_gradient(poisoned, rng):
    """x0 without a gradient (layer 0's dgrad is skipped), one frozen V and one frozen b."""
    _run_and_compare(2, torch.float32, rng, frozen=(0, 1, 6))


def test_fused_cross_network_on_the_library_path(monkeypatch, poisoned, rng, force_gemm):
    """Every GEMM handed to torch (as the selector may on a GPU): torch.matmul, then the one Triton
    epilogue pass."""
    import polyrec.kernels.gemm_epilogue as gemm_epilogue

    choice = GemmChoice(backend="library", config=GemmConfig(block_m=32, block_n=32, block_k=32),
                        triton_seconds=1.0, library_seconds=0.0)
    force_gemm(choice)
    monkeypatch.setattr(gemm_epilogue, "_eager_epilogue", lambda *args: pytest.fail("eager epilogue ran"))
    _run_and_compare(3, torch.float32, rng)


@pytest.mark.parametrize("library", [False, True])
def test_only_an_owned_output_gradient_is_written_over(poisoned, rng, library, force_gemm):
    """``owns_output_grad``: the top layer's residual GEMM adds into the incoming gradient's storage
    (the library in place, or the Triton GEMM writing over it) and every gradient still matches the
    reference; without it the gradient autograd hands in is left as it was."""
    if library:
        choice = GemmChoice(backend="library", config=GemmConfig(block_m=32, block_n=32, block_k=32),
                            triton_seconds=1.0, library_seconds=0.0)
        force_gemm(choice)
    assert _run_and_compare(3, torch.float32, rng, owns_output_grad=True)
    assert not _run_and_compare(3, torch.float32, rng, owns_output_grad=False)


def test_model_fused_and_unfused_paths_agree(rng):
    """LowRankCross with the polyrec backend: the fused Function and the per-layer composition give the
    same output and fp32 master gradients."""
    from polyrec.models.layers import DenseOps, LowRankCross

    ops = DenseOps("polyrec")
    grads = []
    for fused in (True, False):
        cross = LowRankCross(D, 3, R, gen=torch.Generator().manual_seed(3))
        cross.fused = fused
        x0 = torch.randn(B, D, generator=torch.Generator().manual_seed(4)).requires_grad_()
        seen = []
        out = cross(x0, ops, on_input_grad=lambda g, seen=seen: seen.append(g.clone()))
        out.backward(torch.randn(B, D, generator=torch.Generator().manual_seed(5)))
        assert len(seen) == 1 and torch.equal(seen[0], x0.grad), "the hook saw x0's final gradient, once"
        grads.append([out.detach(), x0.grad] + [p.grad for p in cross.parameters()])
    for got, want in zip(*grads):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_input_gradient_hook_runs_before_the_last_weight_gradients(monkeypatch, rng):
    """The fused backward hands x0's gradient out with layer 0's two weight-gradient GEMMs still to run
    (what the sharded embeddings' gradient all-to-all overlaps), and its value is the final one."""
    import polyrec.kernels.dcn as dcn

    calls, at_hook = [], []
    real = dcn.matmul
    monkeypatch.setattr(dcn, "matmul", lambda *args, **kwargs: calls.append(1) or real(*args, **kwargs))
    tensors = [t.float().requires_grad_() for t in _problem(3, rng)]
    seen = []

    def hook(g):
        at_hook.append(len(calls))
        seen.append(g.clone())

    out = cross_network(tensors[0], tensors[1:4], tensors[4:7], tensors[7:], on_input_grad=hook)
    forward_calls = len(calls)
    out.backward(torch.randn(B, D, generator=rng))
    assert len(calls) - at_hook[0] == 2 and at_hook[0] > forward_calls
    assert torch.equal(seen[0], tensors[0].grad)


def test_bad_shapes_name_the_layer():
    x0 = torch.randn(B, D)
    vs, us, bs = [torch.randn(R, D)] * 2, [torch.randn(D, R), torch.randn(D, R + 1)], [torch.randn(D)] * 2
    with pytest.raises(ValueError, match="layer 1 needs"):
        cross_network(x0, vs, us, bs)
    with pytest.raises(ValueError, match="as many V, U and b"):
        cross_network(x0, vs, us[:1], bs)


def test_compile_jobs_cover_every_pass_and_epilogue():
    """The compile jobs (compiled for real by tests/test_gemm_compile.py) cover the epilogue passes
    the cross network runs (cross forward, CrossGrad backward, residual), the residual GEMM, and the two
    passes that write fp8 copies (e4m3 forward beside x_l, e5m2 CrossGrad writing only g's copies)."""
    from polyrec.hardware.catalog import get_device

    labels = [job.label for job in compile_jobs(get_device("H200"))]
    passes = [label for label in labels if "library epilogue pass" in label and "fp8" not in label]
    assert len(passes) == 3 and {p.split()[-1] for p in passes} == {"bf16", "cross_grad", "residual"}, labels
    fp8_passes = [label for label in labels if "library epilogue pass" in label and "fp8" in label]
    assert fp8_passes == ["gemm library epilogue pass bf16 fp8 fp8e4nv",
                          "gemm library epilogue pass bf16 cross_grad fp8 fp8e5 copies only"]
    assert any(label.startswith("gemm bf16") and label.endswith("residual") for label in labels), labels
