"""Fused backward + optimizer of the table-batched embedding: sort, segment-reduce, update in place.

1. ``sort_keys_kernel`` writes each id position's global row id (key), its output-gradient row and
   scale; ``torch.sort`` (a radix sort on GPUs) orders positions by key, ties in input order when
   deterministic.
2. The sorted positions are cut into *pieces*: runs of equal keys, also cut at every multiple of
   CHUNK positions, so no piece is longer than CHUNK (a hot row of a skewed table cannot serialise
   one program). Piece starts come from a cumulative sum and a scatter: no host synchronisation.
3. ``update_kernel``: PIECES pieces per program; it sums each piece's gradient slices in fp32 (in
   sorted order: deterministic) and, for a piece that is a whole run (the common case), applies the
   optimizer to that row in registers: one read and one write of each unique row and its state.
   A piece of a longer run stores its partial sum in ``partial[chunk, slot]`` (slot 0: the first
   piece of a chunk continuing a run; slot 1: the last piece of a chunk whose run continues).
4. ``merge_kernel``: one program per chunk owning a run that crosses its end adds the run's
   partial sums in order and applies the optimizer once.
No atomics, no dense gradient, no O(rows) temporaries: memory is O(nnz).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from torch import Tensor

from polyrec.kernels.tbe_optim import apply_update

#: Longest piece (sorted positions) one program sums before handing over to the merge kernel.
CHUNK = 64
#: Chunks whose partials the merge kernel sums per loop iteration.
MERGE_BLOCK = 16


@dataclass(kw_only=True, slots=True)
class UpdateArgs:
    """Scalars of one optimizer step."""

    optim_code: int
    lr: float  # already bias-corrected for adam
    eps: float
    beta1: float
    beta2: float
    weight_decay: float
    seed: int  # stochastic-rounding stream of this step (31-bit)


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
def update_kernel(
    weights_ptr, state1_ptr, state2_ptr, grad_ptr, partial_ptr,
    keys_ptr, perm_ptr, src_ptr, scale_ptr, piece_start_ptr, num_pieces_ptr,
    row_base_ptr, elem_base_ptr, dim_ptr, feat_col_ptr,
    n_pos, batch_size, grad_stride, num_tables, invalid_key,
    lr, eps, beta1, beta2, weight_decay, seed,
    OPTIM: tl.constexpr, HAS_WD: tl.constexpr, STOCHASTIC: tl.constexpr, SEQUENCE: tl.constexpr,
    HAS_SCALE: tl.constexpr, PIECES: tl.constexpr, BLOCK_D: tl.constexpr, VEC: tl.constexpr,
    T_PAD: tl.constexpr, CHUNK_SIZE: tl.constexpr,
):
    """Sum each piece's gradient; update whole-run pieces in place, park partial sums of the others."""
    num_pieces = tl.load(num_pieces_ptr)
    p = tl.program_id(0) * PIECES + tl.arange(0, PIECES)
    p_ok = p < num_pieces
    start = tl.load(piece_start_ptr + p, mask=p_ok, other=0)
    has_next = p_ok & (p + 1 < num_pieces)
    end = tl.where(has_next, tl.load(piece_start_ptr + p + 1, mask=has_next, other=0), n_pos)
    key = tl.load(keys_ptr + start, mask=p_ok, other=invalid_key).to(tl.int64)
    p_ok = p_ok & (key != invalid_key)
    length = tl.where(p_ok, end - start, 0)
    d = tl.arange(0, BLOCK_D)
    addr, d_mask, dim = _row_addresses(key, p_ok, row_base_ptr, elem_base_ptr, dim_ptr, num_tables, d, T_PAD, VEC)
    acc = tl.zeros([PIECES, BLOCK_D], dtype=tl.float32)
    for j in range(0, tl.max(length, axis=0)):
        m = j < length
        orig = tl.load(perm_ptr + start + j, mask=m, other=0)
        src = tl.load(src_ptr + orig, mask=m, other=0).to(tl.int64)
        if SEQUENCE:
            g_row = src * grad_stride
        else:
            f = src // batch_size
            g_row = (src - f * batch_size) * grad_stride + tl.load(feat_col_ptr + f, mask=m, other=0)
        g = tl.load(grad_ptr + g_row[:, None] + d[None, :], mask=m[:, None] & d_mask, other=0.0).to(tl.float32)
        if HAS_SCALE:
            g = g * tl.load(scale_ptr + orig, mask=m, other=0.0)[:, None]
        acc += g
    prev_key = tl.load(keys_ptr + start - 1, mask=p_ok & (start > 0), other=invalid_key).to(tl.int64)
    next_key = tl.load(keys_ptr + end, mask=p_ok & (end < n_pos), other=invalid_key).to(tl.int64)
    true_start = (start == 0) | (prev_key != key)
    true_end = (end == n_pos) | (next_key != key)
    whole = p_ok & true_start & true_end
    mask = d_mask & whole[:, None]
    apply_update(weights_ptr, state1_ptr, state2_ptr, key, addr, mask, acc, lr, eps, beta1, beta2, weight_decay,
                 dim, seed, OPTIM, HAS_WD, STOCHASTIC)
    slot = (start // CHUNK_SIZE) * 2 + true_start.to(tl.int64)
    part = p_ok & ~whole
    tl.store(partial_ptr + slot[:, None] * BLOCK_D + d[None, :], acc, mask=part[:, None])


@triton.jit
def merge_kernel(
    weights_ptr, state1_ptr, state2_ptr, partial_ptr, keys_ptr,
    row_base_ptr, elem_base_ptr, dim_ptr,
    n_pos, num_tables, invalid_key,
    lr, eps, beta1, beta2, weight_decay, seed,
    OPTIM: tl.constexpr, HAS_WD: tl.constexpr, STOCHASTIC: tl.constexpr, BLOCK_D: tl.constexpr, VEC: tl.constexpr,
    T_PAD: tl.constexpr, CHUNK_SIZE: tl.constexpr, MERGE: tl.constexpr,
):
    """For the run that starts in this chunk and crosses its end: add its partials, update once."""
    c = tl.program_id(0).to(tl.int64)
    last = (c + 1) * CHUNK_SIZE - 1  # last position of the chunk
    one = tl.arange(0, 1)
    inside = (last + 1 + one) < n_pos
    key = tl.load(keys_ptr + last + one, mask=inside, other=invalid_key).to(tl.int64)  # [1]
    after = tl.load(keys_ptr + last + 1 + one, mask=inside, other=invalid_key).to(tl.int64)
    first = tl.load(keys_ptr + c * CHUNK_SIZE - 1 + one, mask=inside & (c > 0), other=invalid_key).to(tl.int64)
    owns = inside & (key == after) & (key != invalid_key) & ((c == 0) | (first != key))  # [1]
    d = tl.arange(0, BLOCK_D)
    acc = tl.load(partial_ptr + (c * 2 + 1) * BLOCK_D + d[None, :], mask=owns[:, None], other=0.0)
    k = c + 1
    more = tl.max(owns.to(tl.int32), axis=0) > 0
    while more:
        ks = k + tl.arange(0, MERGE)
        kin = ks * CHUNK_SIZE < n_pos
        kkey = tl.load(keys_ptr + ks * CHUNK_SIZE, mask=kin, other=invalid_key).to(tl.int64)
        match = kin & (kkey == tl.max(key, axis=0))
        heads = tl.load(partial_ptr + (ks * 2)[:, None] * BLOCK_D + d[None, :], mask=match[:, None], other=0.0)
        acc += tl.sum(heads, axis=0)[None, :]
        more = tl.min(match.to(tl.int32), axis=0) > 0
        k += MERGE
    addr, mask, dim = _row_addresses(key, owns, row_base_ptr, elem_base_ptr, dim_ptr, num_tables, d, T_PAD, VEC)
    acc = tl.where(mask, acc, 0.0)
    apply_update(weights_ptr, state1_ptr, state2_ptr, key, addr, mask, acc, lr, eps, beta1, beta2, weight_decay,
                 dim, seed, OPTIM, HAS_WD, STOCHASTIC)


def piece_starts(sorted_keys: Tensor) -> tuple[Tensor, Tensor]:
    """Start positions of the pieces ([n + 1] int64, valid up to num_pieces) and num_pieces ([1]).

    A piece starts where the key changes and at every multiple of CHUNK; computed on the device
    without synchronising (the tail of ``starts`` past num_pieces is garbage and never read).
    """
    n = sorted_keys.numel()
    pos = torch.arange(n, device=sorted_keys.device)
    flag = pos % CHUNK == 0
    flag[1:] |= sorted_keys[1:] != sorted_keys[:-1]
    piece = torch.cumsum(flag, 0) - 1  # [n] piece index of each position
    starts = torch.empty(n + 1, dtype=torch.int64, device=sorted_keys.device)
    starts.scatter_(0, torch.where(flag, piece, n), pos)
    return starts, piece[-1:] + 1
