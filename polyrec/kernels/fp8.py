"""fp8 copies of the dense layers' operands, with delayed per-tensor scaling, and the fp8 GEMM call.

A GEMM in fp8 (``scaled_mm``: ``torch._scaled_mm``, cuBLASLt on NVIDIA, hipBLASLt on AMD) takes both
operands as fp8 with one fp32 scale each: ``a ≈ a_q * a_scale``. On sm_90 both operands must be
contiguous along the reduction axis (``a`` row-major [M, K], ``b`` column-major [K, N]), so a tensor
reduced over the batch (a weight gradient's operands) needs a transposed fp8 copy too. ``cast_fp8``
writes the plain copy, the transposed one, or both, from one read of the bf16 / fp32 tensor.

Scaling (``Fp8Scaling``, as NVIDIA's Transformer Engine does it): each tensor role (a layer's input,
weight, output gradient) has a history of its recent absolute maxima; its cast multiplies by
``fp8_max / max(history)`` and records the tensor's own maximum, by atomic max, into the history's
newest slot. The scale is known before the tensor exists, so a cast is one pass; a value past the
recorded range saturates at ``fp8_max``. A role seen for the first time (a fresh model, or a role with
no history) is scaled by its own maximum (one extra read). The history is a buffer of the module that
owns the layers, so checkpoints carry it and a resumed run scales exactly as the uninterrupted one.

Formats: forward tensors e4m3, gradients e5m2 (range over precision), the OCP formats on NVIDIA and
gfx950, the fnuz ones on gfx942 (AMD CDNA3 ISA guide, "FP8 and BF8"; ``polyrec migrate`` rule PM201).

Where Triton cannot run (CPU without ``TRITON_INTERPRET``), torch ops make the same copies. Triton
3.6's interpreter converts fp32 to fp8 wrongly (it rounds ties up and loses the carry of a rounding
into the exponent: 127.5 -> 64 in e4m3), so under the interpreter the kernel rounds in fp32 first
(``ROUND_IN_FP32``) and converts the exact result; compiled kernels convert with the hardware's
round-to-nearest-even instruction.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch
import triton
import triton.language as tl
from torch import nn

from polyrec.hardware.compile import CompileJob
from polyrec.hardware.types import DeviceSpec
from polyrec.kernels.byte_transpose import transpose
from polyrec.kernels.grid import ceil_div
from polyrec.kernels.interpreter import interpreting

#: Steps of absolute maxima a role's scale is taken over (Transformer Engine's ``amax_history_len``
#: defaults to 1024; 16 follows a training run's shrinking gradients within a few hundred steps while
#: one outlier step still sets the scale for 16 steps).
HISTORY_STEPS = 16
#: Tile of the cast kernel: 64 rows x 128 columns (a transposed store writes 64 bytes of fp8 per output row,
#: the plain store 128, the load 256 bytes of bf16 per row), on 4 warps (128 lanes: 64 elements each per
#: tile). Fastest of 7 tiles for plain + transposed copies of bf16 [65536, 3456 / 1024 / 512] (0.264 / 0.086 /
#: 0.045 ms against 0.285 / 0.089 / 0.049 at the first choice, 128 x 64) and the fp8 step's 28 casts 1.09 ms
#: against 1.15 (H200, benchmarks/results/fp8_copies_2026-12-03/cast_tile*).
BLOCK_M, BLOCK_N = 64, 128
NUM_WARPS = 4
#: Tiles one program walks at most before its one atomic max (the atomics on one address serialise in
#: L2: ~4 per SM per launch instead of one per tile).
MAX_ITERATIONS = 8
#: Programs per SM / CU the row split aims for (as ``polyrec.kernels.dense_backward.PROGRAMS_PER_CU``:
#: a streaming pass needs ~22 KB in flight per H200 SM; one program has one 16 KB tile in flight).
PROGRAMS_PER_CU = 4


@dataclass(frozen=True, kw_only=True, slots=True)
class Fp8Format:
    """One fp8 format: its torch dtype, largest finite value, mantissa bits and smallest normal exponent."""

    dtype: torch.dtype
    max_value: float  # largest finite value (OCP fp8 spec v1.0, table 1; fnuz: AMD CDNA3 ISA guide)
    mantissa_bits: int
    min_exponent: int  # exponent of the smallest normal number


E4M3 = Fp8Format(dtype=torch.float8_e4m3fn, max_value=448.0, mantissa_bits=3, min_exponent=-6)
E5M2 = Fp8Format(dtype=torch.float8_e5m2, max_value=57344.0, mantissa_bits=2, min_exponent=-14)
E4M3_FNUZ = Fp8Format(dtype=torch.float8_e4m3fnuz, max_value=240.0, mantissa_bits=3, min_exponent=-7)
E5M2_FNUZ = Fp8Format(dtype=torch.float8_e5m2fnuz, max_value=57344.0, mantissa_bits=2, min_exponent=-15)
#: Triton's names of the formats (pointer types of compile jobs).
TRITON_FP8_TYPES = {E4M3: "fp8e4nv", E5M2: "fp8e5", E4M3_FNUZ: "fp8e4b8", E5M2_FNUZ: "fp8e5b16"}
#: fp32 values per dequantize scale's slot: cuBLASLt refuses scale pointers that are not 16-byte aligned
#: (CUBLAS_STATUS_NOT_SUPPORTED from ``torch._scaled_mm`` on the H200 with torch 2.11 / CUDA 13.0 for the
#: 2nd and 4th elements of a packed fp32 vector, found by hand in the 39th session).
SCALE_SLOT = 4
#: Role kinds and the format family member each takes: forward operands e4m3, gradients e5m2.
FORWARD, GRADIENT = "forward", "gradient"


def formats(device: torch.device) -> dict[str, Fp8Format]:
    """{FORWARD: e4m3, GRADIENT: e5m2} in the device's encoding: fnuz on gfx942 (MI300X / MI325X), OCP
    elsewhere (NVIDIA sm_89+, gfx950, and the CPU)."""
    if device.type == "cuda" and torch.version.hip is not None \
            and torch.cuda.get_device_properties(device).gcnArchName.startswith("gfx942"):
        return {FORWARD: E4M3_FNUZ, GRADIENT: E5M2_FNUZ}
    return {FORWARD: E4M3, GRADIENT: E5M2}


def spec_formats(spec: DeviceSpec) -> tuple[Fp8Format, Fp8Format]:
    """(e4m3, e5m2) in the encoding of a catalog device (``formats`` for a compile target)."""
    if spec.vendor == "amd" and spec.arch.startswith("gfx942"):
        return E4M3_FNUZ, E5M2_FNUZ
    return E4M3, E5M2


class Fp8Scaling(nn.Module):
    """Delayed scaling state for ``kinds`` (one role kind per tensor role: FORWARD or GRADIENT).

    ``history`` [roles, HISTORY_STEPS] fp32 (a persistent buffer): newest slot first. ``begin(training)``
    at the start of each forward sets this pass's scales from the history; a training pass also ages
    the history by one slot, and its casts record their maxima in the newest slot. An evaluation pass
    records into a scratch slot, so evaluation leaves the state as it was.
    """

    def __init__(self, kinds: list[str]) -> None:
        super().__init__()
        bad = [k for k in kinds if k not in (FORWARD, GRADIENT)]
        if bad:
            raise ValueError(f"Fp8Scaling: role kinds must be {FORWARD!r} or {GRADIENT!r}, got {bad}")
        self.kinds = tuple(kinds)
        self.register_buffer("history", torch.zeros(len(kinds), HISTORY_STEPS))  # [roles, steps]
        self.register_buffer("scales", torch.ones(len(kinds)), persistent=False)  # [roles] quantize multipliers
        # [roles, SCALE_SLOT] dequantize scales, each in column 0 of a 16-byte row (``dequant``)
        self.register_buffer("inverse", torch.ones(len(kinds), SCALE_SLOT), persistent=False)
        self.register_buffer("scratch", torch.zeros(len(kinds)), persistent=False)  # [roles] eval maxima
        self.register_buffer("maxima", torch.zeros(len(kinds)), persistent=False)  # [roles] fp8 maxima
        self._recorded: list[torch.Tensor] | None = None  # per role, the [1] slot this pass's cast records into
        self._training = False  # this pass records into the history
        self._views_of: tuple | None = None  # the buffers the views below were taken of (``_take_views``)
        self._seen: list[bool] | None = [False] * len(kinds)  # roles with a history; None: read it (after a load)
        self.register_load_state_dict_post_hook(_history_loaded)

    def begin(self, training: bool) -> None:
        """Set this pass's scales from the history (before any cast of the pass)."""
        self._take_views()
        if self._seen is None:  # after a checkpoint load: one device read
            self._seen = (self.history.amax(1) > 0).tolist()
        if self.history.is_cuda or interpreting():  # one launch instead of ~10 small torch ops per pass
            roles = len(self.kinds)
            fp8_begin_kernel[(1,)](self.history, self.scales, self.inverse, self.maxima, self.scratch, roles,
                                   TRAINING=training, BLOCK_R=triton.next_power_of_2(roles), STEPS=HISTORY_STEPS,
                                   SLOT=SCALE_SLOT, num_warps=1)
        else:
            self._begin_eager(training)
        self._recorded = self._history_slots if training else self._scratch_slots
        self._training = training

    def _begin_eager(self, training: bool) -> None:
        """``fp8_begin_kernel`` as torch ops (CPU without the interpreter)."""
        amax = self.history.amax(1)  # [roles]
        self.scales.copy_(torch.where(amax > 0, self.maxima / amax.clamp_min(torch.finfo(torch.float32).tiny),
                                      torch.ones_like(amax)))
        self.inverse[:, 0] = self.scales.reciprocal()
        if training:
            self.history.copy_(torch.roll(self.history, 1, dims=1))
            self.history[:, 0] = 0
        else:
            self.scratch.zero_()

    def _take_views(self) -> None:
        """Per-role views of the buffers, the formats and maxima of their device: made once per set of
        buffers (a move to another device replaces them), since a view costs host time on every cast."""
        buffers = (self.history, self.scales, self.inverse, self.scratch)
        key = tuple(t.data_ptr() for t in buffers) + (self.history.device,)
        if key == self._views_of:
            return
        fmt = formats(self.history.device)
        self._formats = [fmt[k] for k in self.kinds]
        self.maxima.copy_(torch.tensor([f.max_value for f in self._formats]))
        roles = range(len(self.kinds))
        self._history_slots = [self.history[r, 0:1] for r in roles]
        self._scratch_slots = [self.scratch[r:r + 1] for r in roles]
        self._scale_views = [self.scales[r:r + 1] for r in roles]
        self._dequant_views = [self.inverse[r, 0] for r in roles]
        self._views_of = key

    def prepare(self, role: int, x: torch.Tensor, relu: bool) -> None:
        """Before ``role``'s cast of ``x``: a role without a history is scaled by ``x``'s own maximum
        (one more read of x); a training pass's cast gives it one."""
        if not self._seen[role] and x.numel():
            amax = (x.clamp_min(0) if relu else x).abs().amax().float()
            scale = torch.where(amax > 0, self.maxima[role] / amax.clamp_min(torch.finfo(torch.float32).tiny), 1.0)
            self.scales[role] = scale  # 1 for an all-zero tensor (its copies are zeros at any scale)
            self.inverse[role, 0] = scale.reciprocal()
        if self._training:
            self._seen[role] = True

    def seen(self, role: int) -> bool:
        """Whether ``role`` has a history (its scale is known before its tensor exists)."""
        return bool(self._seen[role])

    def dequant(self, role: int) -> torch.Tensor:
        """``role``'s dequantize scale for ``scaled_mm``: a 0-dim fp32 tensor at a 16-byte aligned address."""
        return self._dequant_views[role]

    def scale(self, role: int) -> torch.Tensor:
        """[1] ``role``'s quantize multiplier."""
        return self._scale_views[role]

    def recorded(self, role: int) -> torch.Tensor:
        """[1] the slot ``role``'s cast records its maximum into in this pass."""
        if self._recorded is None:
            raise RuntimeError("Fp8Scaling: begin() must run before the pass's casts")
        return self._recorded[role]

    def format(self, role: int) -> Fp8Format:
        self._take_views()
        return self._formats[role]


@triton.jit
def fp8_begin_kernel(history_ptr, scales_ptr, inverse_ptr, maxima_ptr, scratch_ptr, R,
                     TRAINING: tl.constexpr, BLOCK_R: tl.constexpr, STEPS: tl.constexpr, SLOT: tl.constexpr):
    """``Fp8Scaling.begin`` in one program: scales = maxima / max(history row) (1 where the row is all
    zero), inverse[:, 0] = 1 / scales (IEEE divisions); a training pass shifts each history row one slot
    older and zeroes the newest (every load is consumed before the barrier, every store after it), an
    evaluation pass zeroes the scratch maxima."""
    roles = tl.arange(0, BLOCK_R)
    steps = tl.arange(0, STEPS)
    ok = roles < R
    ptrs = history_ptr + roles[:, None] * STEPS + steps[None, :]  # [BR, STEPS]
    history = tl.load(ptrs, mask=ok[:, None], other=0.0)
    amax = tl.max(history, axis=1)  # [BR]
    maxima = tl.load(maxima_ptr + roles, mask=ok, other=1.0)
    seen = amax > 0
    scale = tl.where(seen, tl.math.div_rn(maxima, tl.where(seen, amax, 1.0)), 1.0)
    tl.store(scales_ptr + roles, scale, mask=ok)
    tl.store(inverse_ptr + roles * SLOT, tl.math.div_rn(tl.full((BLOCK_R,), 1.0, tl.float32), scale), mask=ok)
    if TRAINING:
        tl.debug_barrier()
        tl.store(ptrs + 1, history, mask=ok[:, None] & (steps < STEPS - 1)[None, :])
        tl.store(ptrs, tl.zeros_like(history), mask=ok[:, None] & (steps == 0)[None, :])
    else:
        tl.store(scratch_ptr + roles, tl.zeros((BLOCK_R,), tl.float32), mask=ok)


def _history_loaded(module: Fp8Scaling, incompatible) -> None:
    """A loaded history may or may not cover every role: ``begin`` reads which once."""
    module._seen = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Fp8Out:
    """fp8 copies a producing kernel writes of its own output (``polyrec.kernels.gemm_epilogue.epilogue_pass``'s
    ``fp8``), as ``cast_fp8`` would of the stored tensor: both copies, the role's scale and maximum slot."""

    q: torch.Tensor  # [M, N] fp8
    qt: torch.Tensor  # [N, M] fp8
    scale: torch.Tensor  # [1] fp32 quantize multiplier
    recorded: torch.Tensor  # [1] fp32 slot the maximum goes to
    fmt: Fp8Format


def fused_out(scaling: Fp8Scaling, role: int, m: int, n: int, device: torch.device) -> Fp8Out | None:
    """Where a producer of an [m, n] tensor writes ``role``'s fp8 copies; None while the role has no
    history (its scale comes from the tensor itself then: cast it with ``cast_fp8`` once it exists)."""
    if not scaling.seen(role):
        return None
    fmt = scaling.format(role)
    return Fp8Out(q=torch.empty(m, n, dtype=fmt.dtype, device=device),
                  qt=torch.empty(n, m, dtype=fmt.dtype, device=device), scale=scaling.scale(role),
                  recorded=scaling.recorded(role), fmt=fmt)


def eager_fused_out(y: torch.Tensor, out: Fp8Out) -> None:
    """``Fp8Out``'s copies of y [M, N] by torch ops (CPU without the interpreter)."""
    q, qt = _eager_cast(y, out.scale, out.fmt, False, out.recorded, True, True)
    out.q.copy_(q)
    out.qt.copy_(qt)


@dataclass(frozen=True, kw_only=True, slots=True)
class CastConfig:
    """Launch configuration of ``fp8_cast_kernel``."""

    rows_per_program: int  # rows one program walks (a multiple of BLOCK_M) before its atomic max
    block_m: int = BLOCK_M
    block_n: int = BLOCK_N
    num_warps: int = NUM_WARPS


@lru_cache(maxsize=1024)
def select_config(m: int, n: int, compute_units: int) -> CastConfig:
    """Most tiles per program (up to MAX_ITERATIONS: fewest atomics, and no more than the rows need) that
    still give PROGRAMS_PER_CU programs per SM / CU; a rule from first principles, nothing timed."""
    iterations = min(MAX_ITERATIONS, triton.next_power_of_2(ceil_div(m, BLOCK_M)))
    while iterations > 1 and ceil_div(m, BLOCK_M * iterations) * ceil_div(n, BLOCK_N) < PROGRAMS_PER_CU * compute_units:
        iterations //= 2
    return CastConfig(rows_per_program=BLOCK_M * iterations, block_m=BLOCK_M, block_n=BLOCK_N, num_warps=NUM_WARPS)


@triton.jit
def _round_in_fp32(y, MANTISSA_BITS: tl.constexpr, MIN_EXPONENT: tl.constexpr):
    """y (fp32, within the format's range) rounded to the fp8 grid, ties to even: normal numbers keep
    MANTISSA_BITS bits, numbers below 2^MIN_EXPONENT round to multiples of 2^(MIN_EXPONENT - MANTISSA_BITS)."""
    drop: tl.constexpr = 23 - MANTISSA_BITS
    bits = y.to(tl.int32, bitcast=True)
    rounded = (bits + ((1 << (drop - 1)) - 1) + ((bits >> drop) & 1)) & ~((1 << drop) - 1)
    normal = rounded.to(tl.float32, bitcast=True)
    magic: tl.constexpr = 2.0 ** (MIN_EXPONENT - MANTISSA_BITS + 23)  # its ulp is the subnormal step
    tiny = (tl.abs(y) + magic) - magic
    tiny = tl.where(y < 0, -tiny, tiny)
    return tl.where(tl.abs(y) < 2.0 ** MIN_EXPONENT, tiny, normal)


@triton.jit
def quantize_store(x, rows, cols, mask, q_ptr, qt_ptr, M, N, scale, PLAIN: tl.constexpr, TRANSPOSED: tl.constexpr,
                   MAX_VALUE: tl.constexpr, ROUND_IN_FP32: tl.constexpr, MANTISSA_BITS: tl.constexpr,
                   MIN_EXPONENT: tl.constexpr):
    """Store fp8(clamp(x * scale)) of the fp32 tile x [BM, BN] at rows x cols: into q [M, N] (PLAIN) and
    qt [N, M] (TRANSPOSED), both contiguous; rows int64."""
    y = tl.clamp(x * scale, -MAX_VALUE, MAX_VALUE, propagate_nan=tl.PropagateNan.ALL)  # NaN stays NaN
    if ROUND_IN_FP32:
        y = _round_in_fp32(y, MANTISSA_BITS, MIN_EXPONENT)
    y = y.to(q_ptr.dtype.element_ty)
    if PLAIN:
        tl.store(q_ptr + rows[:, None] * N + cols[None, :], y, mask=mask)
    if TRANSPOSED:
        tl.store(qt_ptr + cols[None, :].to(tl.int64) * M + rows[:, None], y, mask=mask)


@triton.jit
def fp8_cast_kernel(
    x_ptr, q_ptr, qt_ptr, scale_ptr, amax_ptr,
    M, N, ROWS_PER_PROGRAM,
    stride_xm, stride_xn,
    PLAIN: tl.constexpr, TRANSPOSED: tl.constexpr, RELU: tl.constexpr, MAX_VALUE: tl.constexpr,
    ROUND_IN_FP32: tl.constexpr, MANTISSA_BITS: tl.constexpr, MIN_EXPONENT: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """One program: rows [pid_m * ROWS_PER_PROGRAM, + ROWS_PER_PROGRAM) x BLOCK_N columns of x [M, N].
    q [M, N] (PLAIN) and qt [N, M] (TRANSPOSED) get fp8(clamp(act(x) * scale)); amax gets max |act(x)|
    by one atomic max per program (act: ReLU with RELU, else identity). A NaN stays NaN in the copies, so
    it reaches the loss as in torch; amax's maximum (``tl.maximum``'s default) leaves it out on a GPU."""
    pid_m = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)  # [BN]
    col_ok = cols < N
    scale = tl.load(scale_ptr)
    amax = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for start in range(pid_m * ROWS_PER_PROGRAM, (pid_m + 1) * ROWS_PER_PROGRAM, BLOCK_M):
        rows = (start + tl.arange(0, BLOCK_M)).to(tl.int64)  # [BM], 64-bit offsets
        mask = (rows < M)[:, None] & col_ok[None, :]
        x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn, mask=mask, other=0.0)
        x = x.to(tl.float32)
        if RELU:
            x = tl.maximum(x, 0.0, propagate_nan=tl.PropagateNan.ALL)  # as torch.relu: NaN stays NaN
        amax = tl.maximum(amax, tl.abs(x))
        quantize_store(x, rows, cols, mask, q_ptr, qt_ptr, M, N, scale, PLAIN, TRANSPOSED, MAX_VALUE, ROUND_IN_FP32,
                       MANTISSA_BITS, MIN_EXPONENT)
    tl.atomic_max(amax_ptr, tl.max(tl.max(amax, axis=1), axis=0))


@lru_cache(maxsize=None)
def _compute_units(device: torch.device) -> int:
    """SMs / CUs of a CUDA or ROCm device; 1 for the interpreter on the CPU."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1


def _eager_cast(x: torch.Tensor, scale: torch.Tensor, fmt: Fp8Format, relu: bool, recorded: torch.Tensor,
                plain: bool, transposed: bool) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``cast_fp8`` as torch ops (CPU without the interpreter)."""
    x = x.float()
    if relu:
        x = x.clamp_min(0)
    recorded.copy_(torch.maximum(recorded, x.abs().amax()))
    q = (x * scale).clamp(-fmt.max_value, fmt.max_value).to(fmt.dtype)
    return (q if plain else None), (q.t().contiguous() if transposed else None)


def cast_fp8(x: torch.Tensor, scaling: Fp8Scaling, role: int, *, plain: bool = True, transposed: bool = False,
             relu: bool = False, config: CastConfig | None = None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(q [M, N], qt [N, M]) fp8 copies of ``act(x)`` (x [M, N] bf16 / fp16 / fp32) in ``role``'s format and
    scale, either left None when not asked for; ``x``'s maximum recorded for the role. ``relu``: the
    copies are of relu(x). Dequantize with ``scaling.dequant(role)``.

    An fp32 x's transposed copy is torch's transpose of the plain one: compiled for sm_90 by Triton 3.6, the
    kernel's transposed store from an fp32 load left elements unwritten (7 of 65536 for a [128, 512] tile
    grid, 847 of 262144 for [1024, 256]; bf16 loads were exact: ``tests/gpu/test_fp8_gpu.py``, H200, 39th
    session). fp32 inputs are the master weights, small beside the activations (``byte_transpose.transpose``)."""
    if x.dim() != 2:
        raise ValueError(f"cast_fp8: x must be 2-D [M, N], got {tuple(x.shape)}")
    if x.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise TypeError(f"cast_fp8: x dtype {x.dtype} is not supported; use bfloat16, float16 or float32")
    if not 0 <= role < len(scaling.kinds):
        raise IndexError(f"cast_fp8: role {role} out of range for {len(scaling.kinds)} roles")
    if not (plain or transposed):
        raise ValueError("cast_fp8: asks for no copy (plain and transposed both False)")
    fmt = scaling.format(role)
    recorded = scaling.recorded(role)
    scaling.prepare(role, x, relu)
    scale = scaling.scale(role)
    m, n = x.shape
    if m == 0 or n == 0:
        return (torch.empty(m, n, dtype=fmt.dtype, device=x.device) if plain else None,
                torch.empty(n, m, dtype=fmt.dtype, device=x.device) if transposed else None)
    if not (x.is_cuda or interpreting()):
        return _eager_cast(x, scale, fmt, relu, recorded, plain, transposed)
    if transposed and x.dtype == torch.float32 and not interpreting():  # a master weight: small
        q, _ = cast_fp8(x, scaling, role, relu=relu, config=config)
        return (q if plain else None), transpose(q)
    q = torch.empty(m, n, dtype=fmt.dtype, device=x.device) if plain else None
    qt = torch.empty(n, m, dtype=fmt.dtype, device=x.device) if transposed else None
    config = config or select_config(m, n, _compute_units(x.device))
    grid = (ceil_div(m, config.rows_per_program), ceil_div(n, config.block_n))
    fp8_cast_kernel[grid](
        x, q if plain else qt, qt if transposed else q, scale, recorded, m, n, config.rows_per_program,
        x.stride(0), x.stride(1),
        PLAIN=plain, TRANSPOSED=transposed, RELU=relu, MAX_VALUE=fmt.max_value, ROUND_IN_FP32=interpreting(),
        MANTISSA_BITS=fmt.mantissa_bits, MIN_EXPONENT=fmt.min_exponent, BLOCK_M=config.block_m,
        BLOCK_N=config.block_n, num_warps=config.num_warps,
    )
    return q, qt


def scaled_mm(a: torch.Tensor, b: torch.Tensor, a_scale: torch.Tensor, b_scale: torch.Tensor, *,
              out_dtype: torch.dtype, bias: torch.Tensor | None = None,
              fast_accumulation: bool = False) -> torch.Tensor:
    """``(a * a_scale) @ (b * b_scale) + bias`` -> [M, N] in ``out_dtype``: a [M, K] fp8 row-major, b [K, N]
    fp8 column-major (the ``.t()`` of a contiguous [N, K]), scales fp32 with one element; bias [N] in
    ``out_dtype`` (bf16 / fp16 outputs only). ``fast_accumulation``: cuBLAS's fp8 fast accumulation
    (Transformer Engine uses it in the forward only)."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"scaled_mm: a [M, K] and b [K, N] needed, got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.stride(1) != 1 or b.stride(0) != 1:
        raise ValueError(f"scaled_mm: a must be row-major and b column-major, got strides {a.stride()} and "
                         f"{b.stride()}")
    a_scale, b_scale = (t if t.dim() == 0 else t.reshape(()) for t in (a_scale, b_scale))
    return torch._scaled_mm(a, b, a_scale, b_scale, bias=bias, out_dtype=out_dtype, use_fast_accum=fast_accumulation)


def aligned(*sizes: int) -> bool:
    """Whether every size suits an fp8 GEMM (cuBLASLt's fp8 kernels need multiples of 16)."""
    return all(s % 16 == 0 and s > 0 for s in sizes)


def compile_jobs(spec: DeviceSpec) -> list[CompileJob]:
    """The cast kernel as the dense layers launch it: bf16 in, each format of ``spec``'s vendor, plain +
    transposed and transposed only, with and without ReLU."""
    fmts = spec_formats(spec)
    jobs = []
    for fmt in fmts:
        for plain, transposed, relu in ((True, True, False), (True, True, True), (False, True, False)):
            constexprs = {"stride_xn": 1, "PLAIN": plain, "TRANSPOSED": transposed, "RELU": relu,
                          "MAX_VALUE": fmt.max_value, "ROUND_IN_FP32": False, "MANTISSA_BITS": fmt.mantissa_bits,
                          "MIN_EXPONENT": fmt.min_exponent, "BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N}
            out = "*" + TRITON_FP8_TYPES[fmt]
            signature = {"x_ptr": "*bf16", "q_ptr": out, "qt_ptr": out, "scale_ptr": "*fp32", "amax_ptr": "*fp32",
                         "M": "i32", "N": "i32", "ROWS_PER_PROGRAM": "i32", "stride_xm": "i32"}
            signature |= {name: "constexpr" for name in constexprs}
            signature = {name: signature[name] for name in fp8_cast_kernel.arg_names}
            divisible = ("x_ptr", "q_ptr", "qt_ptr", "M", "N", "ROWS_PER_PROGRAM", "stride_xm")
            flags = ("plain+" if plain else "") + "transposed" + (" relu" if relu else "")
            jobs.append(CompileJob(label=f"fp8_cast {TRITON_FP8_TYPES[fmt]} {flags}", kernel=fp8_cast_kernel,
                                   signature=signature, constexprs=constexprs, num_warps=NUM_WARPS, num_stages=1,
                                   divisible_by_16=divisible))
    for training in (True, False):
        constexprs = {"TRAINING": training, "BLOCK_R": 32, "STEPS": HISTORY_STEPS, "SLOT": SCALE_SLOT}
        pointers = ("history_ptr", "scales_ptr", "inverse_ptr", "maxima_ptr", "scratch_ptr")
        signature = {name: "*fp32" for name in pointers}
        signature |= {"R": "i32"} | {name: "constexpr" for name in constexprs}
        jobs.append(CompileJob(label=f"fp8_begin {'training' if training else 'eval'}", kernel=fp8_begin_kernel,
                               signature=signature, constexprs=constexprs, num_warps=1, num_stages=1))
    return jobs
