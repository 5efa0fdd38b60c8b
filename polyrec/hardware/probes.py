"""Triton probe kernels for calibration: traffic patterns torch's own ops cannot produce.

The L2 probe re-reads a buffer that fits in L2 many times inside one launch, with loads that skip
L1 (``cache_modifier=".cg"``), so the measured rate is L2 bandwidth rather than launch gaps.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def l2_read_kernel(x_ptr, out_ptr, chunk, reps, BLOCK: tl.constexpr):
    # Program p sums its [chunk] slice of x ``reps`` times; one fp32 written per program.
    base = x_ptr + tl.program_id(0) * chunk
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for _ in range(reps):
        for start in range(0, chunk, BLOCK):
            acc += tl.load(base + start + tl.arange(0, BLOCK), cache_modifier=".cg")
    tl.store(out_ptr + tl.program_id(0), tl.sum(acc))


def l2_read(x, programs: int, reps: int, block: int = 1024):
    """Launch the L2 probe over ``x`` [programs * chunk] fp32; returns the per-program sums [programs]."""
    import torch

    chunk = x.numel() // programs
    if chunk % block:
        raise ValueError(f"chunk {chunk} is not a multiple of BLOCK {block}")
    out = torch.empty(programs, device=x.device, dtype=torch.float32)
    l2_read_kernel[(programs,)](x, out, chunk, reps, BLOCK=block, num_warps=4)
    return out


def compile_jobs(spec) -> list:
    """The probe as calibration launches it, for the compile checks."""
    from polyrec.hardware.compile import CompileJob

    return [CompileJob(label="l2 probe", kernel=l2_read_kernel,
                       signature={"x_ptr": "*fp32", "out_ptr": "*fp32", "chunk": "i32", "reps": "i32",
                                  "BLOCK": "constexpr"},
                       constexprs={"BLOCK": 1024}, num_warps=4)]
