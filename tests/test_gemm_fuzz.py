"""Randomized differential test of ``polyrec.kernels.gemm.matmul`` through the Triton interpreter.

``test_gemm.py`` checks every layout, epilogue and dtype at one odd shape (17 x 33 x 29) and one tile. Here each seed
of SEEDS draws a case (``_draw``): sizes of 1-193 (often 1, a tile's edge or one either side of it), any of the four
layouts, a dtype and an output dtype, an epilogue (bias, ReLU, both, the cross layer's, a residual given or given up,
the cross layer's backward: ``CrossGrad``, its d_x0 overwritten or added to, in fp32 or the inputs' dtype, with or
without a bias gradient), a tile (block sides 16-64, group_m 1-8, split-K 1-5, warps, stages) or the library path
(torch.matmul and the epilogue pass) or the selector's choice, and operands that are strided views of larger buffers.
The output, its buffers poisoned with NaN, is compared against ``reference_matmul``'s float64 product.
"""

from __future__ import annotations

import dataclasses
import os
import random

import pytest
import torch

from polyrec.kernels.gemm import matmul, reference_matmul
from polyrec.kernels.gemm_configs import GemmConfig
from polyrec.kernels.gemm_epilogue import CrossGrad
from test_gemm import _check

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                reason="CPU GEMM tests run the Triton interpreter (TRITON_INTERPRET=1)")

#: Seeds of the cases drawn; each is one test case. ``GEMM_FUZZ_SEEDS=a-b`` draws others (a hunt).
_SPAN = os.environ.get("GEMM_FUZZ_SEEDS", "0-23").partition("-")
SEEDS = list(range(int(_SPAN[0]), int(_SPAN[2] or _SPAN[0]) + 1))
#: Relative error allowed per dtype (of the inputs, or of the output where it is narrower), times sqrt(K): the
#: rounding of the inputs' products summed in fp32 (tf32: 10-bit mantissas), then of the output.
TOLERANCE = {"fp32": 1e-5, "tf32": 5e-3, "fp16": 2e-3, "bf16": 2e-2}
DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
EPILOGUES = ("none", "bias", "relu", "bias_relu", "cross", "residual", "residual_given_up", "cross_grad")
#: What a ``CrossGrad`` epilogue may take: d_x0 added to (else overwritten), plus grad, a bias in the GEMM, a bias
#: gradient, an fp32 d_x0 (else in the inputs' dtype).
CROSS_GRAD_OPTIONS = ("accumulate", "plus_grad", "bias", "bias_grad", "fp32_d_x0")


@dataclasses.dataclass(frozen=True)
class Case:
    """One drawn GEMM: op(a) [m, k] @ op(b) [k, n] under ``config``, with ``epilogue``."""

    m: int
    n: int
    k: int
    trans_a: bool
    trans_b: bool
    dtype: str  # a key of DTYPES
    out_dtype: torch.dtype
    epilogue: str  # one of EPILOGUES
    config: GemmConfig
    path: str  # "config" (the Triton kernel under ``config``), "library" or "selector" (config=None)
    cross_grad: frozenset[str]  # with the "cross_grad" epilogue: those of CROSS_GRAD_OPTIONS it takes
    padded: tuple[int, int]  # extra rows and columns of the buffers the operands are views of


def _size(rng: random.Random, block: int) -> int:
    """A size of 1-80, or 1, or 1-3 tiles of ``block`` and one element less or more."""
    kind = rng.random()
    if kind < 0.15:
        return 1
    if kind < 0.45:
        return rng.randint(1, 3) * block + rng.choice((-1, 0, 1))
    return rng.randint(2, 80)


def _draw(seed: int) -> Case:
    rng = random.Random(seed)
    config = GemmConfig(block_m=rng.choice((16, 32, 64)), block_n=rng.choice((16, 32, 64)),
                        block_k=rng.choice((16, 32)), group_m=rng.choice((1, 2, 3, 8)),
                        split_k=rng.choice((1, 1, 2, 3, 5)), num_warps=rng.choice((1, 2, 4)),
                        num_stages=rng.choice((1, 2, 3)))
    dtype = rng.choice(tuple(DTYPES))
    out_dtype = DTYPES[dtype] if rng.random() < 0.6 else rng.choice(tuple(NAMES))
    epilogue = rng.choice(EPILOGUES)
    if epilogue in ("residual_given_up", "cross_grad"):
        out_dtype = DTYPES[dtype]  # written over the residual; CrossGrad's g = grad * x0 in their dtype
    return Case(m=_size(rng, config.block_m), n=_size(rng, config.block_n), k=_size(rng, config.block_k),
                trans_a=rng.random() < 0.5, trans_b=rng.random() < 0.5, dtype=dtype, out_dtype=out_dtype,
                epilogue=epilogue, config=config, path=rng.choice(("config",) * 4 + ("library", "selector")),
                cross_grad=frozenset(o for o in CROSS_GRAD_OPTIONS if rng.random() < 0.5),
                padded=(rng.choice((0, 3)), rng.choice((0, 5))))


def _operand(rows: int, cols: int, dtype: torch.dtype, padded: tuple[int, int], gen: torch.Generator) -> torch.Tensor:
    """A [rows, cols] operand: a view into a buffer ``padded`` larger (its rows strided) when padded."""
    whole = torch.randn(rows + padded[0], cols + padded[1], generator=gen).to(dtype)
    return whole[padded[0]:, :cols]


def _arguments(case: Case, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, dict]:
    dtype = DTYPES[case.dtype]
    a = _operand(*((case.k, case.m) if case.trans_a else (case.m, case.k)), dtype, case.padded, gen)
    b = _operand(*((case.n, case.k) if case.trans_b else (case.k, case.n)), dtype, case.padded, gen)
    kwargs: dict = {"trans_a": case.trans_a, "trans_b": case.trans_b, "out_dtype": case.out_dtype,
                    "config": case.config if case.path == "config" else None, "library": case.path == "library"}
    if case.epilogue in ("bias", "bias_relu", "cross") or (case.epilogue == "cross_grad" and "bias" in case.cross_grad):
        kwargs["bias"] = torch.randn(case.n, generator=gen).to(dtype)
    if case.epilogue in ("relu", "bias_relu"):
        kwargs["activation"] = "relu"
    if case.epilogue == "cross":
        kwargs["cross"] = tuple(torch.randn(case.m, case.n, generator=gen).to(dtype) for _ in range(2))
    if case.epilogue.startswith("residual"):
        kwargs["residual"] = torch.randn(case.m, case.n, generator=gen).to(case.out_dtype)
        kwargs["overwrite_residual"] = case.epilogue == "residual_given_up"
    if case.epilogue == "cross_grad":
        grad, x0 = (torch.randn(case.m, case.n, generator=gen).to(dtype) for _ in range(2))
        d_x0 = torch.randn(case.m, case.n, generator=gen).to(torch.float32 if "fp32_d_x0" in case.cross_grad else dtype)
        bias_grad = torch.full((case.n,), float("nan")) if "bias_grad" in case.cross_grad else None
        kwargs["cross_grad"] = CrossGrad(grad=grad, x0=x0, d_x0=d_x0, accumulate="accumulate" in case.cross_grad,
                                         plus_grad="plus_grad" in case.cross_grad, bias_grad=bias_grad)
    return a, b, kwargs


def _reference(a: torch.Tensor, b: torch.Tensor, kwargs: dict) -> torch.Tensor:
    """The float64 product and epilogue (for ``CrossGrad``, the product y before it)."""
    y = reference_matmul(a, b, trans_a=kwargs["trans_a"], trans_b=kwargs["trans_b"], bias=kwargs.get("bias"),
                         activation=kwargs.get("activation", "none"), cross=kwargs.get("cross"))
    return y + kwargs["residual"].double() if "residual" in kwargs else y


@pytest.mark.parametrize("seed", SEEDS)
def test_random_gemm_matches_float64(seed, poisoned):
    case = _draw(seed)
    gen = torch.Generator().manual_seed(seed)
    a, b, kwargs = _arguments(case, gen)
    want = _reference(a, b, kwargs)
    cross_grad = kwargs.get("cross_grad")
    if cross_grad is not None:  # the output is g = grad * x0; d_x0 takes grad * (y (+ 1)) and the bias gradient g's sum
        earlier = cross_grad.d_x0.double() if cross_grad.accumulate else 0.0
        if not cross_grad.accumulate:
            cross_grad.d_x0.fill_(float("nan"))  # must be overwritten
        d_x0_want = cross_grad.grad.double() * (want + 1 if cross_grad.plus_grad else want) + earlier
        want = cross_grad.grad.double() * cross_grad.x0.double()
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if case.dtype == "tf32" else "highest")
    try:
        out = matmul(a, b, **kwargs)
    finally:
        torch.set_float32_matmul_precision(previous)
    assert out.shape == (case.m, case.n) and out.dtype == case.out_dtype, case
    if case.epilogue == "residual_given_up":
        assert out.data_ptr() == kwargs["residual"].data_ptr(), case
    tol = max(TOLERANCE[case.dtype], TOLERANCE[NAMES[case.out_dtype]])
    _check(out, want, case.k, tol, f"output of {case}")
    if cross_grad is not None:
        _check(cross_grad.d_x0, d_x0_want, case.k, max(tol, TOLERANCE[NAMES[cross_grad.d_x0.dtype]]), f"d_x0 of {case}")
        if cross_grad.bias_grad is not None:
            _check(cross_grad.bias_grad, want.sum(0), case.m, tol, f"bias gradient of {case}")
