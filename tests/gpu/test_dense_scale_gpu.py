"""The dense half at MLPerf scale on the GPU vs float64: the fused DCN-v2 cross network and a stack of
``linear`` layers (the top MLP's shapes), forward and every gradient, with the configs the GEMM selector
takes at batches 65536 and 16384, and odd shapes.

The reference is the same math in float64 on the same bf16-rounded inputs and weights (the layers compute
with bf16 copies of their fp32 masters). The yardstick is torch's own bf16 composition of that math,
measured in the same test against the same reference: polyrec's error, by the Frobenius norm and by the
largest element (an unwritten or misplaced tile moves the norm of 2e8 values little), may be at most
twice torch's. Weight gradients are fp32 in polyrec (unrounded) and bf16 in the composition, so there
polyrec is usually closer. Run on the device machine:
PYTHONPATH=. python3 -m pytest -q -s tests/gpu/test_dense_scale_gpu.py
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from polyrec.kernels.dcn import cross_network
from polyrec.kernels.gemm_layers import linear

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA or ROCm GPU", allow_module_level=True)

#: (batch, dim, rank, layers): MLPerf DLRM-DCNv2's cross network at the e2e benchmark's two batches, and
#: odd shapes (a dim whose bf16 rows are not 16-byte multiples, a batch of no power of two).
CROSS_SHAPES = [(65536, 3456, 512, 3), (16384, 3456, 512, 3), (5003, 1000, 96, 2), (4099, 999, 64, 2)]
#: (batch, widths): MLPerf DLRM-DCNv2's top MLP (3456 -> 1024 -> 1024 -> 512 -> 256 -> 1), ReLU but last.
MLP_SHAPES = [(65536, (3456, 1024, 1024, 512, 256, 1)), (3001, (1000, 999, 64, 1))]


def errors(got: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """(Frobenius norm, largest element) of got - ref, each relative to ref's."""
    diff = got.double() - ref
    return float(diff.norm() / ref.norm()), float(diff.abs().max() / ref.abs().max())


def compare(name: str, ours: torch.Tensor, torch_bf16: torch.Tensor, ref: torch.Tensor) -> str:
    """Assert polyrec's errors at most twice torch bf16's; the line that says both."""
    mine, theirs = errors(ours, ref), errors(torch_bf16, ref)
    assert torch.isfinite(ours).all(), name
    for metric, a, b in zip(("norm", "max"), mine, theirs):
        assert a <= 2 * b, f"{name}: {metric} error {a:.3g} vs torch bf16 {b:.3g}"
    return f"{name} {mine[0]:.2e}/{mine[1]:.2e} (torch {theirs[0]:.2e}/{theirs[1]:.2e})"


def masters(shapes: list[tuple[int, ...]], gen: torch.Generator) -> list[torch.Tensor]:
    """fp32 weights scaled so each layer keeps unit variance (1/sqrt(fan-in)); 1-D: biases of 0.1."""
    out = []
    for shape in shapes:
        scale = 0.1 if len(shape) == 1 else 1 / math.sqrt(shape[-1])
        out.append((torch.randn(shape, device="cuda", generator=gen) * scale).requires_grad_())
    return out


def copies(weights: list[torch.Tensor], dtype: torch.dtype) -> list[torch.Tensor]:
    """Leaf copies in ``dtype`` of the bf16-rounded weights (what the layers compute with)."""
    return [w.detach().bfloat16().to(dtype).requires_grad_() for w in weights]


def cross(x0: torch.Tensor, vs, us, bs) -> torch.Tensor:
    x = x0
    for v, u, b in zip(vs, us, bs):
        x = x0 * ((x @ v.T) @ u.T + b) + x
    return x


def check_against_float64(what: str, run, x_in: torch.Tensor, weights: list[torch.Tensor], grad: torch.Tensor,
                          names: list[str]) -> None:
    """``run(x, weights, ours)`` (ours: polyrec's layers, else torch's) from the bf16 input and fp32
    masters, backward from ``grad``; its output, input gradient and weight gradients (``names``, in
    order) compared with torch's bf16 composition and the float64 reference."""
    out = run(x_in, weights, True)
    out.backward(grad)
    results = [[out.detach(), x_in.grad] + [w.grad for w in weights]]
    for dtype in (torch.bfloat16, torch.float64):
        w = copies(weights, dtype)
        x = x_in.detach().to(dtype).requires_grad_()
        y = run(x, w, False)
        y.backward(grad.to(dtype))
        results.append([y.detach(), x.grad] + [p.grad for p in w])
    print(f"\n{what}: " + "; ".join(compare(*args) for args in zip(["out", "d_x"] + names, *results)))


@pytest.mark.parametrize("shape", CROSS_SHAPES, ids=[str(s) for s in CROSS_SHAPES])
def test_cross_network_matches_float64_as_closely_as_torch_bf16(shape):
    batch, dim, rank, layers = shape
    gen = torch.Generator(device="cuda").manual_seed(batch + dim)
    weights = masters([(rank, dim)] * layers + [(dim, rank)] * layers + [(dim,)] * layers, gen)
    x0 = torch.randn(batch, dim, device="cuda", generator=gen).bfloat16().requires_grad_()
    grad = torch.randn(batch, dim, device="cuda", generator=gen).bfloat16()

    def run(x, w, ours: bool) -> torch.Tensor:
        parts = w[:layers], w[layers:2 * layers], w[2 * layers:]
        return cross_network(x, *parts) if ours else cross(x, *parts)

    check_against_float64(f"cross {shape}", run, x0, weights, grad,
                          [f"d_{k}{l}" for k in "vub" for l in range(layers)])


@pytest.mark.parametrize("shape", MLP_SHAPES, ids=[str(s) for s in MLP_SHAPES])
def test_linear_stack_matches_float64_as_closely_as_torch_bf16(shape):
    batch, widths = shape
    gen = torch.Generator(device="cuda").manual_seed(batch + widths[0])
    pairs = list(zip(widths, widths[1:]))
    weights = masters([(o, i) for i, o in pairs] + [(o,) for _, o in pairs], gen)
    x_in = torch.randn(batch, widths[0], device="cuda", generator=gen).bfloat16().requires_grad_()
    grad = torch.randn(batch, widths[-1], device="cuda", generator=gen).bfloat16()

    def run(x, w, ours: bool) -> torch.Tensor:
        for i in range(len(pairs)):
            relu = i < len(pairs) - 1
            if ours:
                x = linear(x, w[i], w[len(pairs) + i], "relu" if relu else "none")
            else:
                x = F.linear(x, w[i], w[len(pairs) + i])
                x = F.relu(x) if relu else x
        return x

    check_against_float64(f"linear {shape}", run, x_in, weights, grad,
                          [f"d_w{i}" for i in range(len(pairs))] + [f"d_b{i}" for i in range(len(pairs))])
