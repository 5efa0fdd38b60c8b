"""Merge levels of the fused TBE backward (``tbe_backward``): the runs of equal keys that cross program ends.

A run that crosses program ends left pieces in ``partial``: slot 2p holds
the piece at the head of program p (a run that began earlier), slot 2p+1 the piece at its tail (a
run that goes on; only the row, no value, when the head piece already covers the whole program),
and ``part_key`` their row ids (-1: no piece). In slot order these pieces are again sorted by key,
so the same segmented sum over LEVEL_TILE slots (in-lane, as the lane update) finishes every run
that lies inside a program's slots and parks the pieces of the rest for the next level. A program
takes CHUNKS tiles of LEVEL_TILE slots (the config's ``merge_chunks``): with 1, one tile per
program and about log_{LEVEL_TILE/2}(programs) launches (11 on the MLPerf step); with more, the
tiles in turn, carrying open runs as the chunked lane update does, and about
log_{LEVEL_TILE * CHUNKS / 2}(programs) launches (5 at 8). No program walks a long run alone (a row
with 400k duplicates, Zipf-skewed inputs, was one program's serial walk over 50k tiles in the
earlier one-pass merge).
"""

from __future__ import annotations

import triton
import triton.language as tl

from polyrec.kernels.tbe_backward import park_partials, park_program_ends, segment_add, sum_tile_runs, tile_rows
from polyrec.kernels.tbe_optim import load_rows, store_update


@triton.jit
def _key_bounds(key, ok):
    """Smallest and largest of the keys at the positions ``ok``."""
    return tl.min(tl.where(ok, key, 0x7FFFFFFFFFFFFFFF), axis=0), tl.max(tl.where(ok, key, -1), axis=0)


@triton.jit
def _slot_row(code):
    """Row id of partial-slot codes (``park_partials``): -(row + 2) -> row; -1 (no piece) stays."""
    return tl.where(code <= -2, -code - 2, code)


@triton.jit(do_not_specialize=["seed"])
def merge_level_kernel(
    weights_ptr, state1_ptr, state2_ptr, part_ptr, part_key_ptr, out_ptr, out_key_ptr,
    row_base_ptr, elem_base_ptr, dim_ptr, n_slots, num_tables,
    lr, eps, mix1, mix2, weight_decay, seed,
    OPTIM: tl.constexpr, HAS_WD: tl.constexpr, STOCHASTIC: tl.constexpr, BLOCK_D: tl.constexpr, VEC: tl.constexpr,
    T_PAD: tl.constexpr, TILE: tl.constexpr, CHUNKS: tl.constexpr, ONE_DIM: tl.constexpr,
):
    """One merge level over CHUNKS * TILE partial slots: sum the pieces of each run in slot order, update
    the rows of runs that end inside these slots, park the pieces of runs that go on. CHUNKS = 1: one
    tile (``_merge_one_tile``); more: the tiles in turn (``_merge_tiles_in_turn``). Launched like
    ``lane_update_kernel`` (warps along BLOCK_D only: the scan stays inside each lane)."""
    prog = tl.program_id(0).to(tl.int64)
    if CHUNKS == 1:
        _merge_one_tile(weights_ptr, state1_ptr, state2_ptr, part_ptr, part_key_ptr, out_ptr, out_key_ptr,
                        row_base_ptr, elem_base_ptr, dim_ptr, n_slots, num_tables, prog,
                        lr, eps, mix1, mix2, weight_decay, seed,
                        OPTIM, HAS_WD, STOCHASTIC, BLOCK_D, VEC, T_PAD, TILE, ONE_DIM)
    else:
        _merge_tiles_in_turn(weights_ptr, state1_ptr, state2_ptr, part_ptr, part_key_ptr, out_ptr, out_key_ptr,
                             row_base_ptr, elem_base_ptr, dim_ptr, n_slots, num_tables, prog,
                             lr, eps, mix1, mix2, weight_decay, seed,
                             OPTIM, HAS_WD, STOCHASTIC, BLOCK_D, VEC, T_PAD, TILE, CHUNKS, ONE_DIM)


@triton.jit
def _merge_one_tile(
    weights_ptr, state1_ptr, state2_ptr, part_ptr, part_key_ptr, out_ptr, out_key_ptr,
    row_base_ptr, elem_base_ptr, dim_ptr, n_slots, num_tables, tile,
    lr, eps, mix1, mix2, weight_decay, seed,
    OPTIM: tl.constexpr, HAS_WD: tl.constexpr, STOCHASTIC: tl.constexpr, BLOCK_D: tl.constexpr, VEC: tl.constexpr,
    T_PAD: tl.constexpr, TILE: tl.constexpr, ONE_DIM: tl.constexpr,
):
    """Merge-level program ``tile`` over TILE slots, parking pieces per tile (``park_partials``);
    slots without any piece (most of them) cost one load of their keys."""
    i = tl.arange(0, TILE)
    pos = tile * TILE + i  # [TILE] slots
    code = tl.load(part_key_ptr + pos, mask=pos < n_slots, other=-1)
    key = _slot_row(code)
    if tl.max(key, axis=0) >= 0:
        prev = _slot_row(tl.load(part_key_ptr + pos - 1, mask=(pos < n_slots) & (pos > 0), other=-1))
        nxt = _slot_row(tl.load(part_key_ptr + pos + 1, mask=pos + 1 < n_slots, other=-1))
        before = _slot_row(tl.load(part_key_ptr + tile * TILE - 1, mask=tile > 0, other=-1))
        ok = key >= 0
        is_end = key != nxt
        started = key != before  # the run's first piece is in these slots (pieces are sorted by key)
        whole = ok & is_end & started
        d = tl.arange(0, BLOCK_D)
        lo, hi = _key_bounds(key, ok)
        addr, d_mask, dim = tile_rows(key, ok, lo, hi, row_base_ptr, elem_base_ptr, dim_ptr, num_tables, d, T_PAD,
                                       VEC, ONE_DIM)
        w, s1, s2 = load_rows(weights_ptr, state1_ptr, state2_ptr, key, whole, addr, d_mask & whole[:, None], OPTIM)
        g = tl.load(part_ptr + pos[:, None] * BLOCK_D + d[None, :], mask=(code >= 0)[:, None] & d_mask, other=0.0)
        flags = tl.broadcast_to((key != prev).to(tl.int32)[:, None], (TILE, BLOCK_D))
        _, acc = tl.associative_scan((flags, g), 0, segment_add)  # acc[i] = sum from i's run start (in tile)
        store_update(weights_ptr, state1_ptr, state2_ptr, key, whole, addr, d, d_mask & whole[:, None], acc, w, s1, s2, lr,
                     eps, mix1, mix2, weight_decay, dim, seed, OPTIM, HAS_WD, STOCHASTIC)
        park_partials(out_ptr, out_key_ptr, acc, key, i, ok, started, is_end, tile, d, TILE, BLOCK_D)
    else:
        tl.store(out_key_ptr + tile * 2, -1)
        tl.store(out_key_ptr + tile * 2 + 1, -1)


@triton.jit
def _merge_tiles_in_turn(
    weights_ptr, state1_ptr, state2_ptr, part_ptr, part_key_ptr, out_ptr, out_key_ptr,
    row_base_ptr, elem_base_ptr, dim_ptr, n_slots, num_tables, prog,
    lr, eps, mix1, mix2, weight_decay, seed,
    OPTIM: tl.constexpr, HAS_WD: tl.constexpr, STOCHASTIC: tl.constexpr, BLOCK_D: tl.constexpr, VEC: tl.constexpr,
    T_PAD: tl.constexpr, TILE: tl.constexpr, CHUNKS: tl.constexpr, ONE_DIM: tl.constexpr,
):
    """Merge-level program ``prog`` over CHUNKS tiles of TILE slots, taken in turn as
    ``lane_update_kernel`` takes its tiles: the run open at a tile's end is carried into the next, and
    only the pieces of runs crossing the program's ends are parked (``park_program_ends``). A tile of
    empty slots costs one load of its keys and ends any open run: a run's slots are contiguous."""
    i = tl.arange(0, TILE)
    d = tl.arange(0, BLOCK_D)
    last = i == TILE - 1
    first = prog * (CHUNKS * TILE)
    before = _slot_row(tl.load(part_key_ptr + first - 1, mask=prog > 0, other=-1)).to(tl.int64)
    carry = tl.zeros([BLOCK_D], dtype=tl.float32)  # in-program sum of the run open at the last tile's end
    carry_key = before * 0 - 3  # that run's row; -3: none
    head_key = before * 0 - 1  # row of the run that began before this program, once it ends here
    for c in range(CHUNKS):
        pos = first + c * TILE + i  # [TILE] slots
        code = tl.load(part_key_ptr + pos, mask=pos < n_slots, other=-1)
        key = _slot_row(code).to(tl.int64)
        if tl.max(key, axis=0) >= 0:
            prev = _slot_row(tl.load(part_key_ptr + pos - 1, mask=(pos < n_slots) & (pos > 0), other=-1))
            nxt = _slot_row(tl.load(part_key_ptr + pos + 1, mask=pos + 1 < n_slots, other=-1))
            ok = key >= 0
            is_start = key != prev
            is_end = key != nxt
            started = key != before  # the run's first piece is in this program (pieces are sorted by key)
            whole = ok & is_end & started
            lo, hi = _key_bounds(key, ok)
            addr, d_mask, dim = tile_rows(key, ok, lo, hi, row_base_ptr, elem_base_ptr, dim_ptr, num_tables, d,
                                           T_PAD, VEC, ONE_DIM)
            w, s1, s2 = load_rows(weights_ptr, state1_ptr, state2_ptr, key, whole, addr, d_mask & whole[:, None],
                                  OPTIM)
            g = tl.load(part_ptr + pos[:, None] * BLOCK_D + d[None, :], mask=(code >= 0)[:, None] & d_mask,
                        other=0.0)
            carry, carry_key, head_key = sum_tile_runs(
                weights_ptr, state1_ptr, state2_ptr, out_ptr, g, w, s1, s2, key, addr, d_mask, dim, ok, is_start,
                is_end, started, last, carry, carry_key, head_key, prog, d, lr, eps, mix1, mix2, weight_decay, seed,
                OPTIM, HAS_WD, STOCHASTIC, TILE, BLOCK_D, BLOCK_D)
        else:
            carry = carry * 0.0
            carry_key = carry_key * 0 - 3
    park_program_ends(out_ptr, out_key_ptr, carry, carry_key, head_key, before, prog, d, BLOCK_D)
