"""Launch arithmetic on the host: grids, and how far a tensor's offsets reach."""

from __future__ import annotations


def ceil_div(a: int, b: int) -> int:
    """``ceil(a / b)`` of non-negative ints. Not ``triton.cdiv``: in Triton 3.6 that is a
    ``constexpr_function``, 1.8 us per call from host code (against 0.02 here) and 66 calls per eager
    MLPerf training step (cProfile of ``e2e_profile --host``, one H200, 2026-12-01)."""
    return -(-a // b)


def element_span(t) -> int:
    """Elements from tensor ``t``'s first to one past its last: its element count where contiguous, more for a
    strided view (a column slice of a wider tensor spans its rows' stride), 0 when empty. What a kernel's
    offsets into ``t`` reach: 32-bit offsets hold up to 2^31 - 1."""
    return sum((size - 1) * stride for size, stride in zip(t.shape, t.stride())) + 1 if t.numel() else 0
