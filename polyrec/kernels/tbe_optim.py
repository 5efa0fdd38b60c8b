"""Optimizers fused into the embedding backward: their config, state layout and in-register update.

Each unique row's summed gradient ``g`` (fp32, duplicates already reduced) is applied in registers:

- ``sgd``:             ``w -= lr * g``
- ``rowwise_adagrad``: ``s += mean_d(g_d^2)``; ``w -= lr * g / (sqrt(s) + eps)`` with one fp32 ``s``
  per row. This is FBGEMM's definition (fbgemm_gpu/codegen/genscript/optimizers.py,
  ``rowwise_adagrad``: ``g_avg_square = sum(g^2) / D``, ``momentum1 += g_avg_square``,
  ``multiplier = lr / (sqrt(momentum1) + eps)``), which TorchRec uses for its fused tables.
- ``adagrad``:         ``s += g^2`` per element; ``w -= lr * g / (sqrt(s) + eps)`` (torch.optim.Adagrad
  with lr_decay = 0, applied to the coalesced sparse gradient).
- ``adam``:            lazy Adam as torch.optim.SparseAdam: only rows present in the batch move;
  ``m = b1 m + (1-b1) g``, ``v = b2 v + (1-b2) g^2``,
  ``w -= lr * sqrt(1-b2^t) / (1-b1^t) * m / (sqrt(v) + eps)`` with ``t`` the module's step count.

``weight_decay`` is L2 (FBGEMM's ``WeightDecayMode.L2``): ``g += weight_decay * w`` before the update.
Low-precision weights (fp16/bf16) are updated in fp32 and rounded stochastically (unbiased).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import triton
import triton.language as tl

OPTIMIZERS: tuple[str, ...] = ("sgd", "rowwise_adagrad", "adagrad", "adam")
#: Kernel code of each optimizer (the ``OPTIM`` constexpr).
OPTIM_CODE = {name: code for code, name in enumerate(OPTIMIZERS)}
#: fp32 state values per embedding element (``adagrad``, ``adam``) or per row (``rowwise_adagrad``).
STATE_PER_ELEMENT = {"sgd": 0, "rowwise_adagrad": 0, "adagrad": 1, "adam": 2}
STATE_PER_ROW = {"sgd": 0, "rowwise_adagrad": 1, "adagrad": 0, "adam": 0}


@dataclass(kw_only=True, slots=True)
class EmbeddingOptimizer:
    """The sparse optimizer the backward applies in place."""

    kind: str = "rowwise_adagrad"  # one of OPTIMIZERS
    lr: float = 0.01  # learning rate
    eps: float = 1e-8  # added to the denominator (outside the square root, as torch and FBGEMM)
    beta1: float = 0.9  # adam: first-moment decay
    beta2: float = 0.999  # adam: second-moment decay
    weight_decay: float = 0.0  # L2 penalty added to the gradient
    initial_accumulator_value: float = 0.0  # adagrad / rowwise_adagrad: starting value of the sum of squares

    def __post_init__(self) -> None:
        if self.kind not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer kind '{self.kind}'; valid: {', '.join(OPTIMIZERS)}")
        if self.lr < 0 or self.eps < 0 or self.weight_decay < 0 or self.initial_accumulator_value < 0:
            raise ValueError(f"lr, eps, weight_decay and initial_accumulator_value must be >= 0: {self}")
        if not (0.0 <= self.beta1 < 1.0 and 0.0 <= self.beta2 < 1.0):
            raise ValueError(f"beta1 and beta2 must be in [0, 1): {self}")

    def step_size(self, step: int) -> float:
        """The learning rate the kernel multiplies by at 1-based ``step`` (Adam: bias-corrected)."""
        if self.kind != "adam":
            return self.lr
        return self.lr * math.sqrt(1.0 - self.beta2**step) / (1.0 - self.beta1**step)


@triton.jit
def _mix32(x):
    """A 32-bit integer finaliser (Chris Wellons' "lowbias32", hash-prospector): bijective, well mixed."""
    x = x ^ (x >> 16)
    x = x * 0x7FEB352D
    x = x ^ (x >> 15)
    x = x * 0x846CA68B
    x = x ^ (x >> 16)
    return x


@triton.jit
def random_u32(seed, addr):
    """Counter-based random uint32 per element from a seed and an int64 element address: the address's
    high word is folded in by a multiplicative (Fibonacci) hash, then one finaliser round (the rounding
    only needs bits uncorrelated with the value; one round instead of two: the fp16 update was
    ALU-bound, benchmarks/results/tbe_breakdown_fp16_nvidia-h200_2026-11-29)."""
    lo = (addr & 0xFFFFFFFF).to(tl.uint32)
    hi = (addr >> 32).to(tl.uint32)
    return _mix32(lo ^ (hi * 0x9E3779B9) ^ seed.to(tl.uint32))


@triton.jit
def round_stochastic(x, bits, OUT_DTYPE: tl.constexpr):
    """Round fp32 ``x`` to OUT_DTYPE up or down with probability proportional to the distance.

    Truncate toward zero, then move one ulp away from zero when u * ulp < |x| - |low| with u uniform in
    [0, 1) from 24 random bits: unbiased in expectation, including subnormals (no division).
    """
    low = x.to(OUT_DTYPE, fp_downcast_rounding="rtz")
    low_bits = low.to(tl.int16, bitcast=True)
    high = (low_bits + 1).to(OUT_DTYPE, bitcast=True)
    low32 = low.to(tl.float32)
    gap = tl.abs(high.to(tl.float32)) - tl.abs(low32)
    u = (bits >> 8).to(tl.float32) * (1.0 / 16777216.0)
    return tl.where(u * gap < tl.abs(x) - tl.abs(low32), high, low)


@triton.jit
def load_rows(weights_ptr, state1_ptr, state2_ptr, row, row_ok, addr, mask, OPTIM: tl.constexpr):
    """Issue the loads of rows ``row`` ([R] global ids; ``row_ok`` [R] the rows updated) before their
    gradient is summed: the fp32 weights [R, BLOCK_D] and the optimizer state (rowwise: [R]; per
    element: [R, BLOCK_D]; unused: 0)."""
    w = tl.load(weights_ptr + addr, mask=mask, other=0.0).to(tl.float32)
    s1 = 0.0
    s2 = 0.0
    if OPTIM == 1:
        s1 = tl.load(state1_ptr + row, mask=row_ok, other=0.0)
    elif OPTIM >= 2:
        s1 = tl.load(state1_ptr + addr, mask=mask, other=0.0)
    if OPTIM == 3:
        s2 = tl.load(state2_ptr + addr, mask=mask, other=0.0)
    return w, s1, s2


@triton.jit
def store_update(weights_ptr, state1_ptr, state2_ptr, row, row_ok, addr, mask, g, w, s1, s2,
                 lr, eps, mix1, mix2, weight_decay, dim, seed,
                 OPTIM: tl.constexpr, HAS_WD: tl.constexpr, STOCHASTIC: tl.constexpr):
    """Apply the optimizer to rows loaded by ``load_rows`` and store weights and state.

    addr: [R, BLOCK_D] int64 element offsets into the flat weight (and per-element state) buffers;
    mask: [R, BLOCK_D], within ``row_ok`` [R]; g: [R, BLOCK_D] fp32 summed gradient (zero where masked).
    Row-wise Adagrad divides once per row (FBGEMM's ``multiplier``), not once per element: the
    per-element IEEE division made its update ~1.9 ms slower than SGD's on the MLPerf step
    (benchmarks/results/tbe_breakdown_fp32_{,sgd_}gradbf16_nvidia-h200_2026-11-30).
    Adam takes ``mix1 = 1 - beta1`` and ``mix2 = 1 - beta2``, formed by the launch in double: 1 - beta2
    formed in fp32 from fp32(0.999) is 1.29e-5 off 0.001 (tests/gpu/test_tbe_scale_gpu.py sees it in the
    second moment), while 1 - fp32(0.001) rounds to fp32(0.999).
    """
    if HAS_WD:
        g = tl.where(mask, g + weight_decay * w, 0.0)
    if OPTIM == 0:
        new = w - lr * g
    elif OPTIM == 1:
        s = s1 + tl.sum(g * g, axis=1) / dim.to(tl.float32)
        tl.store(state1_ptr + row, s, mask=row_ok, eviction_policy="evict_first")
        new = w - g * (lr / (tl.sqrt(s) + eps))[:, None]
    elif OPTIM == 2:
        s = s1 + g * g
        tl.store(state1_ptr + addr, s, mask=mask, eviction_policy="evict_first")
        new = w - lr * g / (tl.sqrt(s) + eps)
    else:
        m = (1.0 - mix1) * s1 + mix1 * g
        v = (1.0 - mix2) * s2 + mix2 * g * g
        tl.store(state1_ptr + addr, m, mask=mask, eviction_policy="evict_first")
        tl.store(state2_ptr + addr, v, mask=mask, eviction_policy="evict_first")
        new = w - lr * m / (tl.sqrt(v) + eps)
    out_dtype = weights_ptr.dtype.element_ty
    if STOCHASTIC:
        new = round_stochastic(new, random_u32(seed, addr), out_dtype)
    tl.store(weights_ptr + addr, new.to(out_dtype), mask=mask, eviction_policy="evict_first")


@triton.jit
def apply_update(weights_ptr, state1_ptr, state2_ptr, row, row_ok, addr, mask, g,
                 lr, eps, mix1, mix2, weight_decay, dim, seed,
                 OPTIM: tl.constexpr, HAS_WD: tl.constexpr, STOCHASTIC: tl.constexpr):
    """``load_rows`` then ``store_update``: the update of rows whose gradient is already summed."""
    w, s1, s2 = load_rows(weights_ptr, state1_ptr, state2_ptr, row, row_ok, addr, mask, OPTIM)
    store_update(weights_ptr, state1_ptr, state2_ptr, row, row_ok, addr, mask, g, w, s1, s2, lr, eps, mix1, mix2,
                 weight_decay, dim, seed, OPTIM, HAS_WD, STOCHASTIC)
