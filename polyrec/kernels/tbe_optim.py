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
from typing import Any

import triton
import triton.language as tl

OPTIMIZERS: tuple[str, ...] = ("sgd", "rowwise_adagrad", "adagrad", "adam")
#: Kernel code of each optimizer (the ``OPTIM`` constexpr).
OPTIM_CODE = {name: code for code, name in enumerate(OPTIMIZERS)}
#: fp32 state values per embedding element (``adagrad``, ``adam``) or per row (``rowwise_adagrad``).
STATE_PER_ELEMENT = {"sgd": 0, "rowwise_adagrad": 0, "adagrad": 1, "adam": 2}
STATE_PER_ROW = {"sgd": 0, "rowwise_adagrad": 1, "adagrad": 0, "adam": 0}


def check_hyperparameters(optim: Any) -> None:
    """An embedding optimizer's numbers (``EmbeddingOptimizer`` or the model's config of one) in range:
    lr, eps, weight_decay and initial_accumulator_value finite and >= 0 (NaN passed a ``< 0`` check and
    trained the tables to NaN), beta1 and beta2 in [0, 1), and eps above 0 where the denominator's state starts
    at 0."""
    names = ("lr", "eps", "weight_decay", "initial_accumulator_value")
    if not all(math.isfinite(getattr(optim, n)) and getattr(optim, n) >= 0 for n in names):
        raise ValueError(f"lr, eps, weight_decay and initial_accumulator_value must be finite and >= 0: {optim}")
    if not (0.0 <= optim.beta1 < 1.0 and 0.0 <= optim.beta2 < 1.0):
        raise ValueError(f"beta1 and beta2 must be in [0, 1): {optim}")
    if optim.eps == 0 and _starts_at_zero(optim):
        raise ValueError(f"eps 0 with a state that starts at 0 divides 0 by 0 on a row whose first gradient is 0 "
                         f"(the row turns NaN): set eps > 0 (default 1e-8) or, for Adagrad, "
                         f"initial_accumulator_value > 0: {optim}")


def _starts_at_zero(optim: Any) -> bool:
    """Whether the denominator's state (Adagrad's sum of squares, Adam's second moment) starts at 0."""
    if optim.kind in ("adagrad", "rowwise_adagrad"):
        return optim.initial_accumulator_value == 0
    return optim.kind == "adam"


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
        check_hyperparameters(self)

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
def random_u32(seed, row, col):
    """Counter-based random uint32 per element of rows ``row`` ([R] int32 / int64 global ids) at columns ``col``
    ([BLOCK_D]), from a seed: one finaliser round per row mixes the seed with the row id (its high word folded
    in by a multiplicative, Fibonacci, hash) into the row's word, and each element is that word times an odd
    number of its column, (2 col + 1) x 0x9E3779B9: a bijection of the row's word, so each element's value is
    uniform whenever the row's word is. Elements of one row are not independent of each other; the rounding
    needs each value's bits independent of that value and of the other steps' draws, which they are.

    Cost: a hash per row instead of one per element, with ``round_stochastic``'s carry (bf16) and dither
    (fp16), took the half-precision lane update's time 3.87 -> 3.18 ms (fp16 rows) and 4.31 -> 3.14 ms (bf16)
    on the MLPerf tables (benchmarks/results/rounding_ab_2026-12-02); it was ALU-bound (Nsight Compute, H200:
    ALU pipe 69% busy), and is still with bf16 rows and gradient (68%, issue slots 70%, DRAM 38%;
    benchmarks/results/lane_alu_2026-12-04/). So each element costs one multiply by a column constant (the
    FMA pipe: ptxas cannot turn it into ALU adds, as it can a multiply-add of the element's address), where
    the element's address xor the row's word, then a multiply, put an ALU op per element."""
    r = row.to(tl.int64)
    row_word = _mix32((r & 0xFFFFFFFF).to(tl.uint32) ^ ((r >> 32).to(tl.uint32) * 0x9E3779B9) ^ seed.to(tl.uint32))
    odd = (col.to(tl.uint32) * 2 + 1) * 0x9E3779B9  # [BLOCK_D]
    return row_word[:, None] * odd[None, :]


@triton.jit
def round_stochastic(x, bits, OUT_DTYPE: tl.constexpr):
    """Round fp32 ``x`` to OUT_DTYPE (fp16 or bf16) up or down with probability proportional to the distance;
    NaN and infinities pass through.

    bf16 is fp32's high half: 16 random bits added to x's bit pattern carry into it with the chance (low
    half) / 2^16, exactly, subnormals included (integer work only: Triton 3.6's interpreter converts fp32
    subnormals to bf16 wrongly); bf16's neighbour past its largest finite value is infinity. A NaN is replaced by
    the quiet NaN 0x7FC00000 before the carry (whose low half is zero, so nothing carries): the selected pattern
    then packs straight into the stored pairs, where a NaN check on the rounded half cost an extraction per
    element (ALU work, in a kernel bound by it).
    fp16: dither, then truncate. |x| + u * ulp, with u uniform on the 2^23 midpoints (2k + 1) / 2^24 of
    [0, 1) from 23 random bits and ulp fp16's spacing at |x| (|x|'s power of two, at least 2^-14, times
    2^-10), is rounded toward zero and x's sign put back: the chance of rounding up is the distance in ulps
    to within 2^-23. u * ulp is exact, so the sum rounds once in fp32, which moves that chance by at most
    half an fp32 ulp (2^-14 of an fp16 ulp); values past fp16's largest finite one truncate to it.
    """
    pattern = x.to(tl.uint32, bitcast=True)
    if OUT_DTYPE == tl.bfloat16:
        safe = tl.where(x != x, 0x7FC00000, pattern)  # a NaN's carry could reach the sign
        return ((safe + (bits >> 16)) >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
    binade = tl.maximum((pattern & 0x7F800000).to(tl.float32, bitcast=True), 6.103515625e-05)
    u = ((bits >> 8) | 1).to(tl.float32)  # odd, in (0, 2^24): exact, and never 0, so that u * inf stays inf
    dithered = u * (binade * 5.820766091346741e-11) + (pattern & 0x7FFFFFFF).to(tl.float32, bitcast=True)  # 2^-34
    signed = (dithered.to(tl.uint32, bitcast=True) | (pattern & 0x80000000)).to(tl.float32, bitcast=True)
    return signed.to(OUT_DTYPE, fp_downcast_rounding="rtz")


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
def store_update(weights_ptr, state1_ptr, state2_ptr, row, row_ok, addr, col, mask, g, w, s1, s2,
                 lr, eps, mix1, mix2, weight_decay, dim, seed,
                 OPTIM: tl.constexpr, HAS_WD: tl.constexpr, STOCHASTIC: tl.constexpr):
    """Apply the optimizer to rows loaded by ``load_rows`` and store weights and state.

    addr: [R, BLOCK_D] int64 element offsets into the flat weight (and per-element state) buffers; col:
    [BLOCK_D] each element's column in its row (the stochastic rounding's random bits, ``random_u32``);
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
        new = round_stochastic(new, random_u32(seed, row, col), out_dtype)
    tl.store(weights_ptr + addr, new.to(out_dtype), mask=mask, eviction_policy="evict_first")


@triton.jit
def apply_update(weights_ptr, state1_ptr, state2_ptr, row, row_ok, addr, col, mask, g,
                 lr, eps, mix1, mix2, weight_decay, dim, seed,
                 OPTIM: tl.constexpr, HAS_WD: tl.constexpr, STOCHASTIC: tl.constexpr):
    """``load_rows`` then ``store_update``: the update of rows whose gradient is already summed."""
    w, s1, s2 = load_rows(weights_ptr, state1_ptr, state2_ptr, row, row_ok, addr, mask, OPTIM)
    store_update(weights_ptr, state1_ptr, state2_ptr, row, row_ok, addr, col, mask, g, w, s1, s2, lr, eps, mix1, mix2,
                 weight_decay, dim, seed, OPTIM, HAS_WD, STOCHASTIC)
