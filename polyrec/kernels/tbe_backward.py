"""Fused backward + optimizer of the table-batched embedding: sort, segment-reduce, update in place.

1. ``sort_keys_kernel`` (tbe_forward.py) writes each id position's global row id (key), its
   output-gradient row and scale; ``torch.sort`` (a radix sort on GPUs) orders positions by key,
   ties in input order when deterministic.
2. ``update_kernel``: one program per tile of TILE consecutive sorted positions. It loads the tile's
   keys, permutation, source rows and scales, gathers all TILE gradient slices at once (a
   [TILE, BLOCK_D] gather: TILE * row bytes in flight per program, so the kernel is bandwidth-bound,
   not a chain of dependent loads per duplicate), and sums runs of equal keys in registers with a
   segmented inclusive scan (``tl.associative_scan`` on (segment-start flag, value) pairs). At the
   last position of every run that starts and ends inside the tile it applies the optimizer: one read
   and one write of each unique row and its state. A run crossing the tile's start parks its in-tile
   sum in ``partial[tile, 0]`` (head); a run that starts inside the tile and continues past its end
   parks it in ``partial[tile, 1]`` (tail).
   The "lane" variant splits this: ``permute_kernel`` writes each sorted position's gradient offset
   and scale in sorted order, and ``lane_update_kernel`` needs two dependent round trips (keys and
   offsets, then gradient slices with the weight rows and state of its runs), one warp per program at
   D = 128 with the scan inside each lane (docs/tbe.md compares the two).
3. ``tbe_merge.merge_level_kernel`` finishes the runs that cross program ends, level by level.
Summation order is fixed by the sort and by the scan's and merge's trees: reproducible.
No atomics, no dense gradient, no O(rows) temporaries: memory is O(nnz).

Why a scan and not a [TILE, TILE] segment-membership matrix through ``tl.dot``: the matrix costs
2 * TILE^2 * BLOCK_D FLOPs per tile (~0.2 TFLOP per MLPerf step at TILE = 32, and fp32 dots run
as TF32 unless forced to IEEE), while the scan is log2(TILE) adds per element; both are exact
segment sums in a fixed order.
"""

from __future__ import annotations

import numpy as np
import triton
import triton.language as tl

from polyrec.kernels.interpreter import numpy_combine
from polyrec.kernels.tbe_optim import apply_update, load_rows, store_update

#: Sorted positions per program of ``permute_kernel`` (a streaming gather: 8 per thread at 4 warps).
PERMUTE_BLOCK = 1024


@triton.jit
def _table_of(key, row_base_ptr, num_tables, T_PAD: tl.constexpr):
    """Table index of each global row id (count of table bases <= key, minus one)."""
    tb = tl.arange(0, T_PAD)
    bases = tl.load(row_base_ptr + tb, mask=tb < num_tables, other=0x7FFFFFFFFFFFFFFF)
    return tl.sum((bases[None, :] <= key[:, None]).to(tl.int32), axis=1) - 1


@triton.jit
def _row_addresses(key, ok, row_base_ptr, elem_base_ptr, dim_ptr, num_tables, d,
                   T_PAD: tl.constexpr, VEC: tl.constexpr):
    """[R, BLOCK_D] element offsets and mask of rows ``key``, and each row's dim."""
    t = tl.maximum(_table_of(key, row_base_ptr, num_tables, T_PAD), 0)
    local = key - tl.load(row_base_ptr + t)
    dim = tl.load(dim_ptr + t)
    row = tl.multiple_of(tl.load(elem_base_ptr + t) + local * dim, [VEC])
    return row[:, None] + d[None, :], ok[:, None] & (d[None, :] < dim[:, None]), dim


@triton.jit
def segment_add(flag_a, sum_a, flag_b, sum_b):
    """Combine of a segmented sum: b restarts the sum where it holds a segment start."""
    return flag_a | flag_b, tl.where(flag_b != 0, sum_b, sum_a + sum_b)


def _segment_add_numpy(flag_a, sum_a, flag_b, sum_b):
    """``segment_add`` on numpy arrays, for the interpreter's scans (``interpreter.numpy_combine``)."""
    return flag_a | flag_b, np.where(flag_b != 0, sum_b, sum_a + sum_b)


numpy_combine(segment_add, _segment_add_numpy)


@triton.jit
def park_partials(partial_ptr, part_key_ptr, acc, key, i, ok, started, is_end, tile, d,
                   TILE: tl.constexpr, STRIDE: tl.constexpr):
    """Store the pieces of runs crossing the tile's edges for the next merge level: slot 2*tile the
    head piece (a run that started in an earlier tile), slot 2*tile+1 the tail piece (a run that goes
    on past the tile), and each slot's row id: -1 where there is no piece, -(row + 2) for the tail of
    a run that is also the head's (a tile it passes through: the head piece already holds the whole
    tile, so the tail has the row but no value, and nothing is stored for it). ``STRIDE``: elements per
    slot of ``partial_ptr``."""
    last = i == TILE - 1
    head = ok & ~started & (is_end | last)  # [TILE] at most one position
    tail = ok & last & ~is_end
    own_tail = tail & started
    slot = tile * 2 + own_tail.to(tl.int64)
    tl.store(partial_ptr + slot[:, None] * STRIDE + d[None, :], acc, mask=(head | own_tail)[:, None])
    tail_code = tl.where(started, key, -key - 2)
    tl.store(part_key_ptr + tile * 2, tl.sum(tl.where(head, key + 1, 0), axis=0) - 1)
    tl.store(part_key_ptr + tile * 2 + 1, tl.sum(tl.where(tail, tail_code + 1, 0), axis=0) - 1)


@triton.jit
def _group_row(key, key_lo, key_hi, invalid_key, GROUPED: tl.constexpr):
    """Row id of sorted keys for the launch of one dim group (``GROUPED``): the group's keys are
    ``key_lo + row`` up to ``key_hi``; the other groups' keys, around its range in sorted order, become
    ``invalid_key`` (masked: the launch of their own group takes them). Without ``GROUPED`` keys are rows."""
    if GROUPED:
        inside = (key >= key_lo.to(key.dtype)) & (key < key_hi.to(key.dtype))
        return tl.where(inside, key - key_lo.to(key.dtype), invalid_key.to(key.dtype))
    return key


@triton.jit
def _group_bound(key, key_lo, key_hi, GROUPED: tl.constexpr):
    """Row id bounding a tile's rows from its first or last sorted key (``tile_rows``'s ``lo`` / ``hi``).
    With ``GROUPED`` the key is clamped into the group's range first: a tile at the edge of its group's
    keys starts or ends with another group's key, whose ``_group_row`` (the invalid key) would put the
    bound in the last table, and a tile whose two bounds are then in that table takes every row as that
    table's (tests/test_tbe_fuzz.py, ``test_grouped_lane_tile_at_other_groups_keys``)."""
    if GROUPED:
        inside = tl.minimum(tl.maximum(key, key_lo.to(key.dtype)), key_hi.to(key.dtype) - 1)
        return inside - key_lo.to(key.dtype)
    return key


@triton.jit
def _group_active(keys_ptr, first, span, key_lo, key_hi, GROUPED: tl.constexpr):
    """Whether any of the sorted positions [first, first + span) holds a key of the launch's group (the
    keys are sorted: the first and the last decide); always without ``GROUPED``."""
    if GROUPED:
        k0 = tl.load(keys_ptr + first)
        k1 = tl.load(keys_ptr + first + span - 1)
        return (k0 < key_hi.to(k0.dtype)) & (k1 >= key_lo.to(k1.dtype))
    return True


@triton.jit
def _grad_offset(src_ptr, feat_col_ptr, orig, ok, batch_size, grad_stride, SEQUENCE: tl.constexpr):
    """Element offset of the output-gradient slice of the ids at input positions ``orig``: their source
    row (sequence: the output row; pooled: feature f's bag b, at row b and feature f's column)."""
    src = tl.load(src_ptr + orig, mask=ok, other=0).to(tl.int64)
    if SEQUENCE:
        return src * grad_stride
    f = src // batch_size
    return (src - f * batch_size) * grad_stride + tl.load(feat_col_ptr + f, mask=ok, other=0)


@triton.jit(do_not_specialize=["seed"])
def update_kernel(
    weights_ptr, state1_ptr, state2_ptr, grad_ptr, partial_ptr, part_key_ptr,
    keys_ptr, perm_ptr, src_ptr, scale_ptr,
    row_base_ptr, elem_base_ptr, dim_ptr, feat_col_ptr,
    n_pos, batch_size, grad_stride, num_tables, invalid_key, key_lo, key_hi,
    lr, eps, mix1, mix2, weight_decay, seed,
    OPTIM: tl.constexpr, HAS_WD: tl.constexpr, STOCHASTIC: tl.constexpr, SEQUENCE: tl.constexpr,
    HAS_SCALE: tl.constexpr, TILE: tl.constexpr, BLOCK_D: tl.constexpr, VEC: tl.constexpr,
    T_PAD: tl.constexpr, GROUPED: tl.constexpr = False, PART_D: tl.constexpr = 0,
):
    """Segment-sum TILE sorted positions; update runs inside the tile, park partials of crossing runs.
    ``GROUPED``: the launch of one dim group (keys ``key_lo`` .. ``key_hi``, ``_group_row``); a tile
    without its keys only marks its slots empty. ``PART_D``: elements per slot of ``partial`` (the
    merge's BLOCK_D; 0: BLOCK_D)."""
    tile = tl.program_id(0).to(tl.int64)
    if _group_active(keys_ptr, tile * TILE, TILE, key_lo, key_hi, GROUPED):
        _scan_tile(weights_ptr, state1_ptr, state2_ptr, grad_ptr, partial_ptr, part_key_ptr, keys_ptr, perm_ptr,
                   src_ptr, scale_ptr, row_base_ptr, elem_base_ptr, dim_ptr, feat_col_ptr, n_pos, batch_size,
                   grad_stride, num_tables, invalid_key, key_lo, key_hi, lr, eps, mix1, mix2, weight_decay, seed,
                   tile, OPTIM, HAS_WD, STOCHASTIC, SEQUENCE, HAS_SCALE, TILE, BLOCK_D, VEC, T_PAD, GROUPED,
                   PART_D if PART_D > 0 else BLOCK_D)
    else:
        tl.store(part_key_ptr + tile * 2, -1)
        tl.store(part_key_ptr + tile * 2 + 1, -1)


@triton.jit
def _scan_tile(
    weights_ptr, state1_ptr, state2_ptr, grad_ptr, partial_ptr, part_key_ptr,
    keys_ptr, perm_ptr, src_ptr, scale_ptr,
    row_base_ptr, elem_base_ptr, dim_ptr, feat_col_ptr,
    n_pos, batch_size, grad_stride, num_tables, invalid_key, key_lo, key_hi,
    lr, eps, mix1, mix2, weight_decay, seed, tile,
    OPTIM: tl.constexpr, HAS_WD: tl.constexpr, STOCHASTIC: tl.constexpr, SEQUENCE: tl.constexpr,
    HAS_SCALE: tl.constexpr, TILE: tl.constexpr, BLOCK_D: tl.constexpr, VEC: tl.constexpr,
    T_PAD: tl.constexpr, GROUPED: tl.constexpr, STRIDE: tl.constexpr,
):
    """``update_kernel``'s tile ``tile``."""
    i = tl.arange(0, TILE)
    pos = tile * TILE + i  # [TILE] sorted positions
    in_range = pos < n_pos
    key = _group_row(tl.load(keys_ptr + pos, mask=in_range, other=invalid_key), key_lo, key_hi, invalid_key,
                     GROUPED).to(tl.int64)
    prev = _group_row(tl.load(keys_ptr + pos - 1, mask=in_range & (pos > 0), other=-1), key_lo, key_hi, invalid_key,
                      GROUPED).to(tl.int64)
    nxt = _group_row(tl.load(keys_ptr + pos + 1, mask=pos + 1 < n_pos, other=-1), key_lo, key_hi, invalid_key,
                     GROUPED).to(tl.int64)
    ok = in_range & (key != invalid_key)
    is_start = key != prev  # [TILE] a run starts here
    is_end = key != nxt  # [TILE] a run ends here
    orig = tl.load(perm_ptr + pos, mask=ok, other=0)
    g_row = _grad_offset(src_ptr, feat_col_ptr, orig, ok, batch_size, grad_stride, SEQUENCE)
    d = tl.arange(0, BLOCK_D)
    addr, d_mask, dim = _row_addresses(key, ok, row_base_ptr, elem_base_ptr, dim_ptr, num_tables, d, T_PAD, VEC)
    g = tl.load(grad_ptr + g_row[:, None] + d[None, :], mask=d_mask, other=0.0).to(tl.float32)  # [TILE, BLOCK_D]
    if HAS_SCALE:
        g = g * tl.load(scale_ptr + orig, mask=ok, other=0.0)[:, None]
    flags = tl.broadcast_to(is_start.to(tl.int32)[:, None], (TILE, BLOCK_D))
    _, acc = tl.associative_scan((flags, g), 0, segment_add)  # acc[i] = sum from i's run start (in tile)
    started = tl.cumsum(is_start.to(tl.int32), 0) > 0  # [TILE] i's run started inside the tile
    whole = ok & is_end & started
    apply_update(weights_ptr, state1_ptr, state2_ptr, key, whole, addr, d, d_mask & whole[:, None], acc, lr, eps,
                 mix1, mix2, weight_decay, dim, seed, OPTIM, HAS_WD, STOCHASTIC)
    park_partials(partial_ptr, part_key_ptr, acc, key, i, ok, started, is_end, tile, d, TILE, STRIDE)


@triton.jit
def permute_kernel(
    keys_ptr, perm_ptr, src_ptr, scale_ptr, feat_col_ptr, g_off_ptr, sorted_scale_ptr,
    n_pos, batch_size, grad_stride, invalid_key,
    SEQUENCE: tl.constexpr, HAS_SCALE: tl.constexpr, BLOCK: tl.constexpr,
):
    """Per sorted position: the element offset of its output-gradient slice and its scale, so the
    update reads them coalesced with its key (one round trip instead of perm -> src -> column)."""
    pos = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    in_range = pos < n_pos
    key = tl.load(keys_ptr + pos, mask=in_range, other=invalid_key)
    ok = in_range & (key != invalid_key)  # invalid positions have no source row (never written)
    orig = tl.load(perm_ptr + pos, mask=ok, other=0)
    g_off = _grad_offset(src_ptr, feat_col_ptr, orig, ok, batch_size, grad_stride, SEQUENCE)
    tl.store(g_off_ptr + pos, g_off.to(g_off_ptr.dtype.element_ty), mask=in_range)
    if HAS_SCALE:
        tl.store(sorted_scale_ptr + pos, tl.load(scale_ptr + orig, mask=ok, other=0.0), mask=in_range)


@triton.jit
def _keys_after_loads(keys_ptr, pos, mask):
    """The keys before positions ``pos`` (``keys_ptr[pos - 1]``; -1 where masked), loaded after a
    barrier that follows the tile's row, state and gradient loads. The run starts derived from them
    keep the segmented scan below the barrier: otherwise ptxas hoists the scan above the row loads, so
    a warp waits on its gradient before it issues them (cuda:90 SASS of the lane update: three
    dependent round trips per tile instead of two). The loads hit L1: they are the lines of the keys."""
    tl.debug_barrier()
    return tl.load(keys_ptr + pos - 1, mask=mask, other=-1)


@triton.jit
def _table_fields(key, row_base_ptr, elem_base_ptr, dim_ptr, num_tables, T_PAD: tl.constexpr):
    """(table row base, element base, dim) of each global row id, selected from the T_PAD-wide table
    vectors (loaded independently of ``key``: no dependent round trip after the keys)."""
    tb = tl.arange(0, T_PAD)
    in_t = tb < num_tables
    bases = tl.load(row_base_ptr + tb, mask=in_t, other=0x7FFFFFFFFFFFFFFF)
    elem = tl.load(elem_base_ptr + tb, mask=in_t, other=0)
    dims = tl.load(dim_ptr + tb, mask=in_t, other=0)
    t = tl.maximum(tl.sum((bases[None, :] <= key[:, None]).to(tl.int32), axis=1) - 1, 0)
    hit = tb[None, :] == t[:, None]  # [R, T_PAD] one-hot table of each row
    return (tl.sum(tl.where(hit, bases[None, :], 0), axis=1), tl.sum(tl.where(hit, elem[None, :], 0), axis=1),
            tl.sum(tl.where(hit, dims[None, :], 0), axis=1))


@triton.jit
def _sorted_table_fields(key, lo, hi, row_base_ptr, elem_base_ptr, dim_ptr, num_tables, T_PAD: tl.constexpr):
    """``_table_fields`` of a tile whose keys are sorted, ``lo`` and ``hi`` its smallest and largest
    key (scalars; keys past ``hi`` are masked by the caller). All but the tiles at a table's edge hold
    one table's rows, so its fields are found once for the tile (the table of ``lo`` and ``hi``, then
    three scalar loads that hit L1) instead of per key: the per-key [TILE, T_PAD] selection and its
    cross-lane sums were ~240 of the lane update's ~1630 instructions per tile on cuda:90 (215 SHFL),
    and the kernel issues an instruction stream per tile of 8 ids."""
    tb = tl.arange(0, T_PAD)
    bases = tl.load(row_base_ptr + tb, mask=tb < num_tables, other=0x7FFFFFFFFFFFFFFF)
    t_lo = tl.sum((bases <= lo).to(tl.int32), axis=0) - 1
    t_hi = tl.sum((bases <= hi).to(tl.int32), axis=0) - 1
    if (t_lo == t_hi) & (t_lo >= 0):
        zero = key * 0
        row_base = zero + tl.load(row_base_ptr + t_lo)
        elem_base = zero + tl.load(elem_base_ptr + t_lo)
        dim = zero.to(tl.int32) + tl.load(dim_ptr + t_lo)
    else:
        row_base, elem_base, dim = _table_fields(key, row_base_ptr, elem_base_ptr, dim_ptr, num_tables, T_PAD)
    return row_base, elem_base, dim


@triton.jit
def tile_rows(key, ok, lo, hi, row_base_ptr, elem_base_ptr, dim_ptr, num_tables, d, T_PAD: tl.constexpr,
               VEC: tl.constexpr, ONE_DIM: tl.constexpr):
    """[TILE, BLOCK_D] element offsets and mask of the tile's rows ``key`` (sorted; ``ok`` the positions
    holding one, from ``lo`` to ``hi``), and each row's dim.

    ONE_DIM > 0: every table has that dim, so (the tables packed in order) a row's first element is its
    global row id times ONE_DIM and no table is looked up (``TableBatchedEmbedding.one_dim``)."""
    if ONE_DIM > 0:
        dim = (key * 0).to(tl.int32) + ONE_DIM
        first = key.to(tl.int64) * ONE_DIM
        d_mask = ok[:, None] & (d[None, :] < ONE_DIM)
    else:
        row_base, elem_base, dim = _sorted_table_fields(key, lo, hi, row_base_ptr, elem_base_ptr, dim_ptr,
                                                        num_tables, T_PAD)
        dim = (dim // VEC) * VEC  # every dim is a multiple of VEC; said so, the masks are constant per vector
        first = elem_base + (key - row_base) * dim
        d_mask = ok[:, None] & (d[None, :] < dim[:, None])
    return tl.multiple_of(first, [VEC])[:, None] + d[None, :], d_mask, dim


@triton.jit
def sum_tile_runs(weights_ptr, state1_ptr, state2_ptr, head_ptr, g, w, s1, s2, key, addr, d_mask, dim, ok,
                   is_start, is_end, started, last, carry, carry_key, head_key, prog, d,
                   lr, eps, mix1, mix2, weight_decay, seed,
                   OPTIM: tl.constexpr, HAS_WD: tl.constexpr, STOCHASTIC: tl.constexpr, TILE: tl.constexpr,
                   BLOCK_D: tl.constexpr, STRIDE: tl.constexpr):
    """One tile of a program that takes its tiles in turn (``lane_update_kernel``, the chunked
    ``merge_level_kernel``): segment-sum the tile's values g [TILE, BLOCK_D] in sorted order, add the
    ``carry`` of the run open at the previous tile's end, update the rows (loaded as w, s1, s2) of runs
    that end here and began in the program, store the piece of the run that began before the program
    where it ends (slot 2 * prog of ``head_ptr``, ``STRIDE`` elements per slot); ``last``: the tile's last
    position [TILE]. Returns the new (carry, carry_key, head_key)."""
    whole = ok & is_end & started  # [TILE] last position of a run that lies inside the program
    goes_on = (tl.arange(0, TILE) == 0) & (key == carry_key)  # [TILE] the first position continues the open run
    g += tl.where(goes_on[:, None], carry[None, :], 0.0)  # the scan carries it to the run's other positions
    flags = tl.broadcast_to(is_start.to(tl.int32)[:, None], (TILE, BLOCK_D))
    _, acc = tl.associative_scan((flags, g), 0, segment_add)  # acc[i] = sum from i's run start (in tile)
    store_update(weights_ptr, state1_ptr, state2_ptr, key, whole, addr, d, d_mask & whole[:, None], acc, w, s1, s2, lr,
                 eps, mix1, mix2, weight_decay, dim, seed, OPTIM, HAS_WD, STOCHASTIC)
    head = ok & ~started & is_end  # the run from before the program ends here
    tl.store(head_ptr + prog * 2 * STRIDE + d[None, :] + 0 * key[:, None], acc, mask=head[:, None])
    head_key = tl.maximum(head_key, tl.max(tl.where(head, key, -1), axis=0))
    open_run = ok & last & ~is_end  # [TILE] the run going on into the next tile
    carry = tl.sum(tl.where(open_run[:, None], acc, 0.0), axis=0)
    return carry, tl.max(tl.where(open_run, key, -3), axis=0), head_key


@triton.jit(do_not_specialize=["seed"])
def lane_update_kernel(
    weights_ptr, state1_ptr, state2_ptr, grad_ptr, partial_ptr, part_key_ptr,
    keys_ptr, g_off_ptr, scale_ptr,
    row_base_ptr, elem_base_ptr, dim_ptr,
    num_tables, invalid_key, key_lo, key_hi,
    lr, eps, mix1, mix2, weight_decay, seed,
    OPTIM: tl.constexpr, HAS_WD: tl.constexpr, STOCHASTIC: tl.constexpr, HAS_SCALE: tl.constexpr,
    TILE: tl.constexpr, CHUNKS: tl.constexpr, BLOCK_D: tl.constexpr, VEC: tl.constexpr, T_PAD: tl.constexpr,
    ONE_DIM: tl.constexpr, GROUPED: tl.constexpr = False, PART_D: tl.constexpr = 0,
):
    """``update_kernel``'s result with two dependent round trips per tile: (keys, gradient offsets,
    scales) coalesced, then the gradient slices together with the weight rows and state of the tile's
    runs. A program takes CHUNKS tiles of TILE sorted positions one after another and carries the sum
    of the run open at a tile's end into the next, so only runs crossing its CHUNKS * TILE positions
    leave pieces for the merge (on Zipf-skewed ids most tiles sit inside a long run).

    Launched with warps along BLOCK_D only (BLOCK_D / (lanes * VEC) warps), so each lane holds all
    TILE positions of its VEC columns and the segmented scan runs inside the lane, in registers.

    The sorted arrays (keys, gradient offsets, scales) are padded past the last program's positions
    plus one, the keys with ``invalid_key`` (``SortedIds``): their loads need no mask, so each lane loads
    its TILE keys and offsets as 16-byte vectors, where a masked load was one scalar load per position.
    With the keys compared in their own dtype, cuda:90 (benchmarks/sass_count.py, MLPerf config):
    221 -> 168 registers per thread (9 -> 12 programs per SM), 1199 -> 995 instructions per tile.

    ``GROUPED``: the launch of one dim group of a module of mixed dims, at that group's BLOCK_D (keys
    ``key_lo`` .. ``key_hi``, ``_group_row``); a program without its keys only marks its slots empty.
    ``PART_D``: elements per slot of ``partial`` (the merge's BLOCK_D; 0: BLOCK_D).
    """
    prog = tl.program_id(0).to(tl.int64)
    if _group_active(keys_ptr, prog * (CHUNKS * TILE), CHUNKS * TILE, key_lo, key_hi, GROUPED):
        _lane_program(weights_ptr, state1_ptr, state2_ptr, grad_ptr, partial_ptr, part_key_ptr, keys_ptr, g_off_ptr,
                      scale_ptr, row_base_ptr, elem_base_ptr, dim_ptr, num_tables, invalid_key, key_lo, key_hi,
                      lr, eps, mix1, mix2, weight_decay, seed, prog, OPTIM, HAS_WD, STOCHASTIC, HAS_SCALE, TILE,
                      CHUNKS, BLOCK_D, VEC, T_PAD, ONE_DIM, GROUPED, PART_D if PART_D > 0 else BLOCK_D)
    else:
        tl.store(part_key_ptr + prog * 2, -1)
        tl.store(part_key_ptr + prog * 2 + 1, -1)


@triton.jit
def _lane_program(
    weights_ptr, state1_ptr, state2_ptr, grad_ptr, partial_ptr, part_key_ptr, keys_ptr, g_off_ptr, scale_ptr,
    row_base_ptr, elem_base_ptr, dim_ptr, num_tables, invalid_key, key_lo, key_hi,
    lr, eps, mix1, mix2, weight_decay, seed, prog,
    OPTIM: tl.constexpr, HAS_WD: tl.constexpr, STOCHASTIC: tl.constexpr, HAS_SCALE: tl.constexpr,
    TILE: tl.constexpr, CHUNKS: tl.constexpr, BLOCK_D: tl.constexpr, VEC: tl.constexpr, T_PAD: tl.constexpr,
    ONE_DIM: tl.constexpr, GROUPED: tl.constexpr, STRIDE: tl.constexpr,
):
    """``lane_update_kernel``'s program ``prog``."""
    i = tl.arange(0, TILE)
    d = tl.arange(0, BLOCK_D)
    last = i == TILE - 1
    first = prog * (CHUNKS * TILE)
    before = _group_row(tl.load(keys_ptr + first - 1, mask=prog > 0, other=-1), key_lo, key_hi, invalid_key, GROUPED)
    carry = tl.zeros([BLOCK_D], dtype=tl.float32)  # in-program sum of the run open at the last tile's end
    carry_key = before * 0 - 3  # that run's row; -3: none
    head_key = before * 0 - 1  # row of the run that began before this program, once it ends here
    for c in range(CHUNKS):
        pos = first + c * TILE + i  # [TILE] sorted positions
        key = _group_row(tl.load(keys_ptr + pos), key_lo, key_hi, invalid_key, GROUPED)
        nxt = _group_row(tl.load(keys_ptr + pos + 1), key_lo, key_hi, invalid_key, GROUPED)
        g_off = tl.multiple_of(tl.load(g_off_ptr + pos).to(tl.int64), [VEC])
        if HAS_SCALE:
            scale = tl.load(scale_ptr + pos)
        ok = key != invalid_key
        is_end = key != nxt  # [TILE] a run ends here
        started = key != before  # [TILE] i's run started inside the program (keys are sorted)
        whole = ok & is_end & started  # [TILE] last position of a run that lies inside the program
        lo = _group_bound(tl.load(keys_ptr + first + c * TILE), key_lo, key_hi,
                          GROUPED)  # scalars: no cross-lane min / max
        hi = _group_bound(tl.load(keys_ptr + first + c * TILE + TILE - 1), key_lo, key_hi,
                          GROUPED)  # invalid keys: masked (ok)
        addr, d_mask, dim = tile_rows(key, ok, lo, hi, row_base_ptr, elem_base_ptr, dim_ptr, num_tables, d, T_PAD,
                                       VEC, ONE_DIM)
        w, s1, s2 = load_rows(weights_ptr, state1_ptr, state2_ptr, key, whole, addr, d_mask & whole[:, None], OPTIM)
        g = tl.load(grad_ptr + g_off[:, None] + d[None, :], mask=d_mask, other=0.0,
                    eviction_policy="evict_last")  # [TILE, BLOCK_D]
        is_start = key != _group_row(_keys_after_loads(keys_ptr, pos, pos > 0), key_lo, key_hi, invalid_key,
                                     GROUPED)  # a run starts
        g = g.to(tl.float32)
        if HAS_SCALE:
            g = g * scale[:, None]
        carry, carry_key, head_key = sum_tile_runs(
            weights_ptr, state1_ptr, state2_ptr, partial_ptr, g, w, s1, s2, key, addr, d_mask, dim, ok, is_start,
            is_end, started, last, carry, carry_key, head_key, prog, d, lr, eps, mix1, mix2, weight_decay, seed,
            OPTIM, HAS_WD, STOCHASTIC, TILE, BLOCK_D, STRIDE)
    park_program_ends(partial_ptr, part_key_ptr, carry, carry_key, head_key, before, prog, d, STRIDE)


@triton.jit
def park_program_ends(partial_ptr, part_key_ptr, carry, carry_key, head_key, before, prog, d,
                       STRIDE: tl.constexpr):
    """The pieces at the end of a program that takes its tiles in turn (lane update, chunked merge
    level; slot codes as ``park_partials``): a run open at the end that began before the program is
    its head piece (the whole program) with a tail code -(row + 2); one that began inside is the tail
    piece."""
    through = carry_key == before
    has_open = carry_key >= 0
    head_slot = tl.where(through & has_open, prog * 2, prog * 2 + 1)
    tl.store(partial_ptr + head_slot * STRIDE + d, carry, mask=has_open & (d >= 0))
    tl.store(part_key_ptr + prog * 2, tl.where(through & has_open, carry_key, head_key))
    tl.store(part_key_ptr + prog * 2 + 1, tl.where(has_open, tl.where(through, -carry_key - 2, carry_key), -1))
