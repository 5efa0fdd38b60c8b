"""Copy contiguous chunks of a 1-D tensor to new places in one launch: ``out[dst_c + i] = x[src_c + i]``.

The input distribution of sharded embeddings moves whole features: a table- or column-wise piece
takes every id of its feature, which lie contiguously in the batch, and what a rank receives is
re-ordered from (source rank, piece) to (piece, source rank) blocks, each contiguous too. Both are
permutations of a few dozen chunks whose bounds live on the device (they depend on the bag lengths).
Done with per-id torch ops (an index per id from a search over the chunk starts, then a gather or
``index_copy_``), that was about 1 ms per step on 14M ids (arange, searchsorted, index and add kernels
in multi_gpu_world2_profile_nvidia-h200_2026-11-30 at e4b13d9); here each id's chunk is found by a
binary search over the chunk starts (a few dozen, cached) and the ids are read and written once. A
linear scan over the chunks instead ran at 28% of the copy rate (0.37 ms for two copies of 14M int64
ids at a3b7163: int64 compares per chunk per id).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from polyrec.hardware.compile import CompileJob
from polyrec.hardware.types import DeviceSpec
from polyrec.kernels.grid import ceil_div
from polyrec.kernels.interpreter import interpreting

#: Elements per program: 16 KB of int64 ids in and out, 4 per thread at 4 warps of 64 lanes (AMD) or
#: 8 per thread at 32 lanes; the chunk loop runs once per program, so larger blocks amortise it.
BLOCK = 2048
NUM_WARPS = 4
#: Largest id an int32 id buffer holds; ``narrow`` clamps int64 ids into [-1, INT32_MAX], so an id
#: out of range stays out of range for any table of fewer rows (and a negative one stays negative).
INT32_MAX = 2**31 - 1
#: Element types the kernel moves (ids and per-sample weights).
_TRITON_TYPES = {torch.int64: "*i64", torch.int32: "*i32", torch.float64: "*fp64", torch.float32: "*fp32",
                 torch.float16: "*fp16", torch.bfloat16: "*bf16"}


@triton.jit
def chunk_copy_kernel(x_ptr, out_ptr, src_start_ptr, dst_start_ptr, chunks, steps, total, BLOCK: tl.constexpr,
                      NARROW: tl.constexpr):
    """out[p] = x[src_start[c] + p - dst_start[c]] for the last chunk c with dst_start[c] <= p
    (dst_start ascending from 0; an empty chunk shares its start with the next and loses to it),
    c found by a binary search of ``steps`` = ceil(log2(chunks)) halvings. ``NARROW``: int64 in,
    clamped to [-1, INT32_MAX] and stored as int32."""
    pos = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)  # [BLOCK]
    mask = pos < total
    lo = tl.zeros([BLOCK], dtype=tl.int32)  # dst_start[lo] <= pos
    hi = lo + chunks  # the chunk is below hi
    for _ in range(steps):
        mid = (lo + hi) // 2
        below = tl.load(dst_start_ptr + mid) <= pos
        lo = tl.where(below, mid, lo)
        hi = tl.where(below, hi, mid)
    src = tl.load(src_start_ptr + lo) + (pos - tl.load(dst_start_ptr + lo))
    v = tl.load(x_ptr + src, mask=mask)
    if NARROW:
        v = tl.minimum(tl.maximum(v, -1), 2147483647).to(tl.int32)
    tl.store(out_ptr + pos, v, mask=mask)


def _validate(x: torch.Tensor, src_start: torch.Tensor, dst_start: torch.Tensor, total: int) -> None:
    if x.dim() != 1 or not x.is_contiguous():
        raise ValueError(f"chunk_copy: x must be 1-D and contiguous, got shape {tuple(x.shape)} stride {x.stride()}")
    if x.dtype not in _TRITON_TYPES:
        raise TypeError(f"chunk_copy: x dtype {x.dtype} is not supported; use one of {sorted(map(str, _TRITON_TYPES))}")
    for name, t in (("src_start", src_start), ("dst_start", dst_start)):
        if t.dim() != 1 or t.dtype != torch.int64 or t.device != x.device or not t.is_contiguous():
            raise ValueError(f"chunk_copy: {name} must be a contiguous 1-D int64 tensor on {x.device}, "
                             f"got {tuple(t.shape)} {t.dtype} stride {t.stride()} on {t.device}")
    if src_start.numel() != dst_start.numel():
        raise ValueError(f"chunk_copy: {src_start.numel()} source starts for {dst_start.numel()} destination starts")
    if total < 0 or (total and not dst_start.numel()):
        raise ValueError(f"chunk_copy: total must be >= 0, with at least one chunk when above 0; got total {total} "
                         f"and {dst_start.numel()} chunks")


def chunk_copy(x: torch.Tensor, src_start: torch.Tensor, dst_start: torch.Tensor, total: int, *,
               narrow: bool = False) -> torch.Tensor:
    """[total] tensor whose chunk c, from ``dst_start[c]`` up to the next chunk's start (or ``total``),
    is ``x`` from ``src_start[c]`` on (x and the starts contiguous: the kernel reads them packed). ``dst_start`` [C] int64 must start at 0 and not decrease (the
    chunks tile the output in order; they need not tile ``x``: a chunk may repeat or skip source ids).
    ``narrow``: ``x`` int64 ids, written as int32 clamped to [-1, INT32_MAX] in the same pass.
    No host synchronisation: the starts stay on the device.
    """
    _validate(x, src_start, dst_start, total)
    if narrow and x.dtype != torch.int64:
        raise ValueError(f"chunk_copy: narrow takes int64 ids, got {x.dtype}")
    out = torch.empty(total, dtype=torch.int32 if narrow else x.dtype, device=x.device)
    if total == 0:
        return out
    if not (x.is_cuda or interpreting()):
        pos = torch.arange(total, device=x.device)
        chunk = torch.searchsorted(dst_start, pos, right=True) - 1
        moved = x[src_start[chunk] + pos - dst_start[chunk]]
        return moved.clamp(-1, INT32_MAX).to(torch.int32) if narrow else moved
    chunks = dst_start.numel()
    chunk_copy_kernel[(ceil_div(total, BLOCK),)](x, out, src_start, dst_start, chunks, (chunks - 1).bit_length(),
                                                    total, BLOCK=BLOCK, NARROW=narrow, num_warps=NUM_WARPS)
    return out


def compile_jobs(spec: DeviceSpec) -> list[CompileJob]:
    """The kernel for every element type it moves, and int64 ids narrowed to int32 (one launch config
    on every device)."""
    moves = [(ptr, ptr, False) for ptr in _TRITON_TYPES.values()] + [("*i64", "*i32", True)]
    jobs = []
    for src, dst, narrow in moves:
        signature = {"x_ptr": src, "out_ptr": dst, "src_start_ptr": "*i64", "dst_start_ptr": "*i64", "chunks": "i32",
                     "steps": "i32", "total": "i64", "BLOCK": "constexpr", "NARROW": "constexpr"}
        jobs.append(CompileJob(label=f"chunk_copy {src[1:]}" + (" -> i32" if narrow else ""), kernel=chunk_copy_kernel,
                               signature=signature, constexprs={"BLOCK": BLOCK, "NARROW": narrow},
                               num_warps=NUM_WARPS, num_stages=1,
                               divisible_by_16=("x_ptr", "out_ptr", "src_start_ptr", "dst_start_ptr")))
    return jobs
