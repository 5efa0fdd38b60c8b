"""Forward kernels of the table-batched embedding: pooled lookup, sequence lookup, sort-key preparation.

All tables of one precision live in one flat buffer; table ``t`` holds rows ``[rows_t, dim_t]`` at
element offset ``elem_base[t]``, and its rows have global ids ``row_base[t] + local id``. The backward
sorts keys ``key_base[t] + local id``: the global row id, or (tables whose dims take several BLOCK_D,
on a batch where that pays) plus ``group * total_rows``, so that each group's keys sort together (one
update launch per group at its own width: ``tbe_fused_backward.KeyPlan``).

The pooled kernel runs one program per (block of BAGS samples, feature). Each iteration of its loop
gathers a [BAGS, HOTS, BLOCK_D] tile: HOTS consecutive ids of each of the BAGS bags, so that
BAGS * HOTS rows are in flight per program, and sums over the HOTS axis in fp32. Out-of-range ids and
malformed offsets are masked (they read nothing and contribute zero) and flagged per feature in
``flags`` (bit 1: id out of range, bit 2: bad offsets; ``bag_ends_kernel`` bit 4: ids outside every
bag, i.e. offsets[0] != 0 or offsets[-1] < nnz), which the module turns into an error.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from torch import Tensor

FLAG_BAD_ID = 1
FLAG_BAD_OFFSETS = 2
FLAG_BAD_ENDS = 4


@dataclass(kw_only=True, slots=True)
class TableLayout:
    """Device-side description of the tables and features (small int tensors)."""

    feat_table: Tensor  # [F] int32: table each feature reads
    feat_col: Tensor  # [F] int32: first output column of the feature (-1: pooling "none")
    feat_mean: Tensor  # [F] int32: 1 where the feature's table pools by mean
    table_rows: Tensor  # [T] int64
    table_row_base: Tensor  # [T] int64: global id of the table's row 0
    table_key_base: Tensor  # [T] int64: sort key of the table's row 0 (its dim group * total_rows + row base)
    table_elem_base: Tensor  # [T] int64: element offset of the table in the flat buffer
    table_dim: Tensor  # [T] int32
    total_rows: int  # sum of rows

    def to(self, device: torch.device) -> TableLayout:
        fields = {k: getattr(self, k).to(device) for k in ("feat_table", "feat_col", "feat_mean", "table_rows",
                                                           "table_row_base", "table_key_base", "table_elem_base",
                                                           "table_dim")}
        return TableLayout(**fields, total_rows=self.total_rows)


@triton.jit
def _bag_bounds(offsets_ptr, f, b0, batch_size, nnz, BAGS: tl.constexpr):
    """Samples [BAGS], their validity, start and length of feature ``f``'s bags, and a bad-offset mask."""
    bags = b0 + tl.arange(0, BAGS)
    bag_ok = bags < batch_size
    bag_idx = f.to(tl.int64) * batch_size + bags
    start = tl.load(offsets_ptr + bag_idx, mask=bag_ok, other=0).to(tl.int64)
    end = tl.load(offsets_ptr + bag_idx + 1, mask=bag_ok, other=0).to(tl.int64)
    bad = bag_ok & ((end < start) | (start < 0) | (end > nnz))
    length = tl.where(bad, 0, end - start)
    return bags, bag_ok, start, length, bad


@triton.jit
def bag_ends_kernel(offsets_ptr, flags_ptr, num_bags, nnz, last_feature, CODE: tl.constexpr):
    """One program: flag ``CODE`` (``FLAG_BAD_ENDS``) on feature 0 where offsets[0] != 0 and on the last
    feature where offsets[-1] (``num_bags`` = F * B) < nnz: ids lie before the first bag or after the
    last, and no lookup reads them. A launch of its own: inside the pooled kernel's programs, even as two
    scalar loads in the two programs holding those bags, the check made the forward 3-6% slower on the
    H200 (``benchmarks/results/tbe_input_checks_ab_2026-12-01``)."""
    if tl.load(offsets_ptr).to(tl.int64) != 0:
        tl.atomic_or(flags_ptr, CODE)
    if tl.load(offsets_ptr + num_bags).to(tl.int64) < nnz:
        tl.atomic_or(flags_ptr + last_feature, CODE)


@triton.jit
def _mean_scale(feat_mean_ptr, f, length, HAS_SCALE: tl.constexpr):
    """[BAGS] gradient scale of feature ``f``'s bags: 1 / length where its table pools by mean, else 1
    (1 without ``HAS_SCALE``: the backward reads no scale)."""
    if HAS_SCALE:
        is_mean = tl.load(feat_mean_ptr + f) != 0
        return tl.where(is_mean, 1.0 / tl.maximum(length, 1).to(tl.float32), 1.0)
    return length.to(tl.float32) * 0.0 + 1.0


@triton.jit
def _raise_flags(flags_ptr, f, bad_ids, bad_offsets):
    """OR into feature ``f``'s flags FLAG_BAD_ID and FLAG_BAD_OFFSETS where any of the [n] masks is set."""
    n_ids = tl.sum(bad_ids.to(tl.int32))
    n_off = tl.sum(bad_offsets.to(tl.int32))
    code = tl.where(n_ids > 0, 1, 0) + tl.where(n_off > 0, 2, 0)
    if code > 0:
        tl.atomic_or(flags_ptr + f, code)


@triton.jit
def _store_sort_keys(keys_ptr, src_ptr, scale_ptr, pos, in_bag, ok, idx, key_base, src, scale, invalid_key,
                     HAS_SCALE: tl.constexpr):
    """The backward's inputs of the id positions ``pos`` [BAGS, HOTS]: sort key (``key_base`` + id;
    ``invalid_key`` where the id is out of range), output-gradient row ``src`` (int32) and scale
    (broadcast over HOTS). The key is summed in the keys' own type (int32 keys: an invalid key below
    2^31), which costs the forward fewer registers than int64 sums."""
    kt = keys_ptr.dtype.element_ty
    key = tl.where(ok, key_base.to(kt) + idx.to(kt), invalid_key.to(kt))
    tl.store(keys_ptr + pos, key, mask=in_bag)
    tl.store(src_ptr + pos, src + 0 * pos.to(tl.int32), mask=in_bag)
    if HAS_SCALE:
        tl.store(scale_ptr + pos, scale + 0.0 * pos.to(tl.float32), mask=in_bag)


@triton.jit
def pooled_forward_kernel(
    weights_ptr, values_ptr, offsets_ptr, per_sample_ptr, out_ptr, flags_ptr,
    feat_ids_ptr, feat_table_ptr, feat_col_ptr, feat_mean_ptr, table_rows_ptr, table_elem_base_ptr, table_dim_ptr,
    keys_ptr, src_ptr, scale_ptr, table_key_base_ptr,
    batch_size, nnz, out_stride, invalid_key,
    BAGS: tl.constexpr, HOTS: tl.constexpr, BLOCK_D: tl.constexpr, VEC: tl.constexpr,
    HAS_PER_SAMPLE: tl.constexpr, HAS_MEAN: tl.constexpr, STAGED: tl.constexpr = False,
    SORT_KEYS: tl.constexpr = False, HAS_SCALE: tl.constexpr = False,
):
    """out[b, col_f : col_f + dim] = pool over the bag of (feature f, sample b) of weight rows.
    ``STAGED``: a barrier after the id loads and one after the row loads, so that a thread issues all
    of an iteration's loads before it waits on any (ptxas otherwise interleaves id load, row load and
    add per row, one round trip after another).
    ``SORT_KEYS`` (a lookup that will be trained): also write what ``sort_keys_kernel`` writes for the
    backward (key, gradient row and, with ``HAS_SCALE``, scale of each id position), from the ids this
    kernel loads anyway: the backward then skips that kernel's second read of the ids and offsets."""
    f = tl.load(feat_ids_ptr + tl.program_id(1))
    t = tl.load(feat_table_ptr + f)
    rows = tl.load(table_rows_ptr + t)
    base = tl.multiple_of(tl.load(table_elem_base_ptr + t), VEC)
    dim = tl.multiple_of(tl.load(table_dim_ptr + t), VEC)
    bags, bag_ok, start, length, bad_off = _bag_bounds(offsets_ptr, f, tl.program_id(0) * BAGS, batch_size, nnz,
                                                       BAGS)
    if SORT_KEYS:
        key_base = tl.load(table_key_base_ptr + t)
        src = (f * batch_size + bags)[:, None]  # [BAGS, 1] int32: the bag's gradient row
        key_scale = _mean_scale(feat_mean_ptr, f, length, HAS_SCALE)[:, None]
    d = tl.arange(0, BLOCK_D)
    d_ok = d < dim
    h = tl.arange(0, HOTS)
    acc = tl.zeros([BAGS, BLOCK_D], dtype=tl.float32)
    bad_ids = tl.zeros([BAGS, HOTS], dtype=tl.int1)
    for j0 in range(0, tl.max(length, axis=0), HOTS):
        in_bag = (j0 + h[None, :]) < length[:, None]  # [BAGS, HOTS]
        pos = start[:, None] + j0 + h[None, :]
        idx = tl.load(values_ptr + pos, mask=in_bag, other=0).to(tl.int64)
        if STAGED:
            tl.debug_barrier()
        ok = in_bag & (idx >= 0) & (idx < rows)
        bad_ids = bad_ids | (in_bag & ~ok)
        row = base + idx * dim  # [BAGS, HOTS] element offset of each row
        if SORT_KEYS:  # before the row loads: idx is dead once they are issued
            if HAS_PER_SAMPLE:
                per_pos = key_scale * tl.load(per_sample_ptr + pos, mask=in_bag, other=0.0).to(tl.float32)
            else:
                per_pos = key_scale
            _store_sort_keys(keys_ptr, src_ptr, scale_ptr, pos, in_bag, ok, idx, key_base, src, per_pos, invalid_key,
                             HAS_SCALE)
        vals = tl.load(weights_ptr + row[:, :, None] + d[None, None, :],
                       mask=ok[:, :, None] & d_ok[None, None, :], other=0.0)
        if STAGED:
            tl.debug_barrier()
        vals = vals.to(tl.float32)
        if HAS_PER_SAMPLE:
            w = tl.load(per_sample_ptr + pos, mask=ok, other=0.0).to(tl.float32)
            vals = vals * w[:, :, None]
        acc += tl.sum(vals, axis=1)
    if HAS_MEAN:
        is_mean = tl.load(feat_mean_ptr + f) != 0
        scale = tl.where(is_mean & (length > 0), 1.0 / tl.maximum(length, 1).to(tl.float32), 1.0)
        acc = acc * scale[:, None]
    col = tl.load(feat_col_ptr + f)
    out = out_ptr + bags[:, None].to(tl.int64) * out_stride + col + d[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=bag_ok[:, None] & d_ok[None, :])
    _raise_flags(flags_ptr, f, bad_ids, bad_off)


@triton.jit
def sequence_forward_kernel(
    weights_ptr, values_ptr, offsets_ptr, out_ptr, flags_ptr,
    f, start, count, out_row0, out_stride, rows, base, dim, batch_size, nnz,
    POSITIONS: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """out[out_row0 + i, :dim] = weights row of values[start + i] for i < count (one feature ``f``, its
    id range clamped into [0, nnz] by the host). Each program also checks POSITIONS of the feature's
    bags (the grid covers max(count, batch_size)) and flags bad ids and offsets as the pooled kernel
    does."""
    p0 = tl.program_id(0) * POSITIONS
    i = p0 + tl.arange(0, POSITIONS)
    in_range = i < count
    idx = tl.load(values_ptr + start + i, mask=in_range, other=0).to(tl.int64)
    ok = in_range & (idx >= 0) & (idx < rows)
    d = tl.arange(0, BLOCK_D)
    d_ok = d < dim
    row = base + idx * dim
    vals = tl.load(weights_ptr + row[:, None] + d[None, :], mask=ok[:, None] & d_ok[None, :], other=0.0)
    out = out_ptr + (out_row0 + i[:, None]).to(tl.int64) * out_stride + d[None, :]
    tl.store(out, vals.to(out_ptr.dtype.element_ty), mask=in_range[:, None] & d_ok[None, :])
    bad_off = _bag_bounds(offsets_ptr, f, p0, batch_size, nnz, POSITIONS)[4]
    _raise_flags(flags_ptr, f, in_range & ~ok, bad_off)


@triton.jit
def sort_keys_kernel(
    values_ptr, offsets_ptr, per_sample_ptr, keys_ptr, src_ptr, scale_ptr,
    feat_ids_ptr, feat_table_ptr, feat_mean_ptr, table_rows_ptr, table_key_base_ptr, seq_base_ptr,
    batch_size, nnz, invalid_key,
    BAGS: tl.constexpr, HOTS: tl.constexpr, SEQUENCE: tl.constexpr, HAS_SCALE: tl.constexpr,
):
    """Per id position: its sort key (``key_base`` + id; ``invalid_key`` if out of range), the
    output-gradient row it reads (pooled: the bag f*B + b; sequence: the output row), and its scale
    (per-sample weight times 1/len for mean pooling)."""
    fi = tl.program_id(1)
    f = tl.load(feat_ids_ptr + fi)
    t = tl.load(feat_table_ptr + f)
    rows = tl.load(table_rows_ptr + t)
    key_base = tl.load(table_key_base_ptr + t)
    bags, bag_ok, start, length, bad_off = _bag_bounds(offsets_ptr, f, tl.program_id(0) * BAGS, batch_size, nnz,
                                                       BAGS)
    h = tl.arange(0, HOTS)
    if SEQUENCE:  # the feature's id range clamped as the host clamps it (its output rows, from seq_base)
        first_bag = f.to(tl.int64) * batch_size
        feat_start = tl.minimum(tl.maximum(tl.load(offsets_ptr + first_bag).to(tl.int64), 0), nnz)
        feat_end = tl.minimum(tl.maximum(tl.load(offsets_ptr + first_bag + batch_size).to(tl.int64), feat_start), nnz)
        seq_base = tl.load(seq_base_ptr + fi)
    inv_len = _mean_scale(feat_mean_ptr, f, length, HAS_SCALE)[:, None]
    for j0 in range(0, tl.max(length, axis=0), HOTS):
        in_bag = (j0 + h[None, :]) < length[:, None]
        pos = start[:, None] + j0 + h[None, :]
        if SEQUENCE:  # bad offsets elsewhere in the feature can put a good bag outside its range
            in_bag = in_bag & (pos >= feat_start) & (pos < feat_end)
        idx = tl.load(values_ptr + pos, mask=in_bag, other=0).to(tl.int64)
        ok = (idx >= 0) & (idx < rows)
        if SEQUENCE:
            src = (seq_base + pos - feat_start).to(tl.int32)
        else:
            src = (f * batch_size + bags)[:, None]
        scale = inv_len
        if HAS_SCALE and per_sample_ptr is not None:
            scale = scale * tl.load(per_sample_ptr + pos, mask=in_bag, other=0.0).to(tl.float32)
        _store_sort_keys(keys_ptr, src_ptr, scale_ptr, pos, in_bag, ok, idx, key_base, src, scale, invalid_key,
                         HAS_SCALE)


def vector_width(dims: list[int], elem_bytes: int) -> int:
    """Largest power-of-two element count dividing every dim, up to one 16-byte vector access."""
    vec = 16 // elem_bytes
    while vec > 1 and any(d % vec for d in dims):
        vec //= 2
    return vec


def block_d(dims: list[int]) -> int:
    return triton.next_power_of_2(max(dims))


def loop_trips(offsets: Tensor, batch_size: int, features: list[int],
               tiles: list[tuple[int, int]]) -> dict[tuple[int, int], list[float]]:
    """Per (BAGS, HOTS) tile, per feature (of ``features``, positions in the batch's feature-major
    ``offsets``): the mean over the feature's programs of the loop iterations ``pooled_forward_kernel``
    takes, ceil(longest of the program's BAGS bags / HOTS). Where bags are ragged this exceeds the
    mean bag's iterations (bags of 0-32 ids, uniform: 8 bags per program at HOTS 4 loop 1.9x as long);
    it is what ``perfmodel.tbe_lookup.forward_seconds`` takes as ``loop_trips``. Synchronises once."""
    if batch_size == 0 or not features:
        return {tile: [0.0] * len(features) for tile in tiles}
    bag_ends = offsets[: (max(features) + 1) * batch_size + 1]
    lengths = bag_ends.diff().clamp_min(0).view(-1, batch_size)[features]  # [F, B]
    trips = []
    for bags_per_program, hots in tiles:
        programs = -(-batch_size // bags_per_program)
        padded = lengths.new_zeros(len(features), programs * bags_per_program)
        padded[:, :batch_size] = lengths
        longest = padded.view(len(features), programs, bags_per_program).amax(-1)  # [F, programs]
        trips.append(torch.div(longest + hots - 1, hots, rounding_mode="floor").double().mean(-1))  # [F]
    table = torch.stack(trips).tolist()  # [tiles, F]
    return {tile: row for tile, row in zip(tiles, table)}
