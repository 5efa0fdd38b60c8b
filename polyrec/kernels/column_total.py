"""Bias-gradient column sums finished inside the pass that makes their partials.

The dense passes (``relu_bias_backward_kernel``, the cross network's CrossGrad pass in
``split_k_reduce_kernel``) run on a grid of row programs x column blocks; each program stores the fp32
column sums of its rows as one partial row. The bias gradient is the sum of those rows. A separate
``torch.sum`` over them cost 6.6-13.5 us a call on the H200 for 10 calls per MLPerf DLRM-DCNv2 step, 0.10 ms
(its 27-block launch for [256, 3456] partials reads at ~0.3 TB/s; eager trace,
benchmarks/results/cross_output_copies_2026-12-04/). Here the last program of each column block to store its
partial row sums the block's rows, in row order (the same result on every run), and writes the total: no
second launch. Its arrival is counted in an int32 per column block, zeroed before the launch (``counters``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


def counters(column_blocks: int, device: torch.device) -> torch.Tensor:
    """The zeroed arrival counts of one launch's column blocks (int32 [column_blocks])."""
    return torch.zeros(column_blocks, dtype=torch.int32, device=device)


@triton.jit
def total_if_last(partial_ptr, total_ptr, count_ptr, cols, N):
    """Called by every program of a (row programs x column blocks) grid once it has stored its partial row
    ``partial_ptr[program_id(0), cols]`` ([R, N] fp32, row-major): the column block's last program to arrive
    stores the sum of the R rows (in row order) at ``total_ptr[cols]``. A program's partial stores are
    released with its arrival (the barrier first: every thread's store is issued before the count), and the
    last program acquires them with its own; it reads the rows past L1 (``.cg``), where no stale copy can be."""
    tl.debug_barrier()
    rows = tl.num_programs(0)
    arrived = tl.atomic_add(count_ptr + tl.program_id(1), 1, sem="acq_rel")
    if arrived == rows - 1:
        tl.debug_barrier()
        col_ok = cols < N
        total = tl.zeros(cols.shape, dtype=tl.float32)
        for row in range(0, rows):
            total += tl.load(partial_ptr + row * N + cols, mask=col_ok, other=0.0, cache_modifier=".cg")
        tl.store(total_ptr + cols, total, mask=col_ok)
