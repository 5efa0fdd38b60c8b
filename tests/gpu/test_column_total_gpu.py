"""On the GPU machine: bias gradients summed inside the passes (``polyrec.kernels.column_total``), where the
programs of a column block really run concurrently: the ReLU / bias backward and the CrossGrad pass at
MLPerf's shapes and odd ones against a float64 column sum of what each pass masks, poisoned first, and the
same bits on every one of many repeats (the last program sums the partial rows in row order)."""

from __future__ import annotations

import pytest
import torch

from polyrec.kernels.dense_backward import relu_bias_backward
from polyrec.kernels.gemm import CrossGrad, epilogue_pass

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA or ROCm GPU", allow_module_level=True)

#: Relative error allowed against float64: fp32 partial sums of bf16 values over up to 65536 rows.
TOLERANCE = 1e-5
REPEATS = 20


def _check(total_fn, reference: torch.Tensor) -> None:
    first = total_fn()
    scale = reference.abs().max().clamp_min(1e-30)
    assert float((first.double() - reference).abs().max() / scale) < TOLERANCE
    for _ in range(REPEATS):
        assert torch.equal(total_fn(), first)


@pytest.mark.parametrize("shape", [(65536, 1024), (65536, 256), (4099, 1000), (33, 7)])
def test_relu_bias_backward_totals(shape):
    gen = torch.Generator(device="cuda").manual_seed(0)
    grad, y = (torch.randn(shape, device="cuda", generator=gen).bfloat16() for _ in range(2))
    masked = torch.where(y.double() <= 0, 0.0, grad.double())
    _check(lambda: relu_bias_backward(grad, y, relu=True, need_bias=True)[1], masked.sum(0))


@pytest.mark.parametrize("shape", [(65536, 3456), (5003, 1000)])
def test_cross_grad_pass_totals(shape):
    gen = torch.Generator(device="cuda").manual_seed(1)
    p, grad, x0, d_x0 = (torch.randn(shape, device="cuda", generator=gen).bfloat16() for _ in range(4))
    bias = torch.randn(shape[1], device="cuda", generator=gen).bfloat16()
    g = grad.double() * x0.double()  # exact in the pass's fp32 too (two bf16 values)

    def total() -> torch.Tensor:
        bias_grad = torch.full((shape[1],), float("nan"), device="cuda")
        cg = CrossGrad(grad=grad, x0=x0, d_x0=d_x0.clone(), accumulate=True, bias_grad=bias_grad)
        epilogue_pass(p, bias=bias, cross_grad=cg)
        return bias_grad

    _check(total, g.sum(0))
