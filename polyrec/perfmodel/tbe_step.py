"""Time of one embedding module's training step, as the planner prices it (pure Python; no GPU, no torch):
``estimate`` adds the pooled forward (``tbe_lookup``), the radix sort of the ids, the fused update and its
merge (``tbe``) and the per-row work of an optimizer with per-row state.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from polyrec.hardware.types import Ceilings, DeviceSpec
from polyrec.perfmodel.tbe import UpdateShape, update_bytes, update_launch_seconds, update_merge_seconds
from polyrec.perfmodel.tbe_lookup import ForwardTile, planned_forward_seconds
from polyrec.perfmodel.tbe_reads import (GATHER_GRANULARITY, TableLoad, gather_efficiency, l2_hits, random_read_bytes,
                                         unique_rows)

#: Radix-sort digit width of the device sort (CUB onesweep and rocPRIM use 8-bit digits).
SORT_DIGIT_BITS = 8
#: ``torch.sort`` of the TBE's keys (CUB's onesweep radix sort on NVIDIA: four passes over int32 keys, a
#: histogram, the int64 index iota, the keys' copy): a fixed SORT_FIXED_S, plus the bytes ``sort_bytes`` counts
#: at SORT_COPY_FRACTION of the copy rate, plus SORT_SM_CYCLES_PER_ID_PASS SM cycles for every id in every pass,
#: spread over the compute units. Fitted together (benchmarks/sort_model_fit.py, weighted least squares on
#: relative errors) on the sort kernels of 160 ``tbe_device_times`` cases, 14k-41M ids: 128 on H200s, 32 on an
#: H100 (the same SMs and clock, 1.41x less copy rate: the two terms part there). Rms log error 0.054 (H200) and
#: 0.062 (H100), where the copy rate alone at 0.48 of it (fitted on one H200 row, 14.02M ids, 0.694 ms) had
#: 0.142 and 0.256 (the H100 priced 24% high: the sort ran 1.13x the H200's time, not 1.41x). The fraction
#: above one says the passes move fewer DRAM bytes than counted. Checked on the full-size MLPerf step's profiles
#: (14.02M ids; not fitted on): radix passes and iota 0.640 ms on an H200 and 0.717 on an H100, priced 0.641 and
#: 0.719, the keys' copy (30-40 us) beside (benchmarks/results/sort_model_2026-12-06/). rocPRIM's sort on AMD is
#: priced alike, not measured.
SORT_FIXED_S = 39e-6
SORT_COPY_FRACTION = 1.73
SORT_SM_CYCLES_PER_ID_PASS = 1.92
#: SM-cycles per id position that an optimizer with per-row state (row-wise Adagrad) spends on it
#: beyond what ``update_seconds`` prices: the reduction of the squared gradient across the row (a warp
#: shuffle tree) and the division by the row's state, which ``tbe_optim.store_update`` runs on every
#: row of a tile, run end or not. Fitted on one difference, MLPerf tables capped at 4M rows, batch
#: 65536, uniform ids (14.02M positions): the planner's embedding phase of full Adagrad minus row-wise
#: Adagrad's, 1.80 ms without this term, measured 1.31 / 1.31 / 1.29 ms (planner_accuracy at c70dac9,
#: 8ecaaac, 7686f78): 0.50 ms = 9.3 cycles x 14.02M / (132 SMs x 1.98 GHz). Checked on the others,
#: which have no per-row state either: SGD minus row-wise -0.62 ms predicted against -0.61 / -0.61 /
#: -0.62, Adam 3.22 against 3.34 / 3.34 / 3.31 (without it: -0.12 and 3.72). Per position rather than
#: per distinct row (the first form, 25e6800): the full tables' 10.2M distinct rows would have made
#: it 0.73 ms there, and the full-size row-wise backward, 5.23 ms measured (e2e at 8ecaaac), was
#: priced 5.23 without the term. The same count is assumed on AMD (estimate).
ROW_STATE_SM_CYCLES = 9.3


def sm_seconds(cycles: float, spec: DeviceSpec) -> float:
    """Seconds ``cycles`` SM (CU) cycles take spread over all of the device's compute units at its boost clock."""
    return cycles / (spec.compute_units * spec.boost_clock_hz)


def sort_passes(key_bytes: int) -> int:
    """Radix passes over keys of ``key_bytes``: one per digit."""
    return math.ceil(8 * key_bytes / SORT_DIGIT_BITS)


def sort_bytes(n: int, key_bytes: int) -> int:
    """Bytes the radix sort of n (key, int64 index) pairs counts: each pass reads and writes both, plus the
    histogram pass over the keys."""
    return sort_passes(key_bytes) * 2 * n * (key_bytes + 8) + n * key_bytes


def sort_seconds(n: int, key_bytes: int, ceil: Ceilings, spec: DeviceSpec) -> float:
    """Radix sort of n (key, int64 index) pairs: SORT_FIXED_S, ``sort_bytes`` at SORT_COPY_FRACTION of the copy
    rate, and SORT_SM_CYCLES_PER_ID_PASS per id and pass over the device's compute units."""
    return (SORT_FIXED_S + sort_bytes(n, key_bytes) / (SORT_COPY_FRACTION * ceil.copy_bandwidth.value)
            + sm_seconds(sort_passes(key_bytes) * n * SORT_SM_CYCLES_PER_ID_PASS, spec))


@dataclass(frozen=True, kw_only=True, slots=True)
class StepEstimate:
    """Predicted time and bytes of the forward and of the fused backward."""

    forward_s: float
    backward_s: float
    forward_bytes: float  # DRAM bytes the forward moves (after L2 hits and sector rounding)
    backward_bytes: float
    unique_rows: float
    sort_s: float  # of backward_s, the part that reads only the ids (the sort of the forward's keys)
    merge_s: float = 0.0  # of backward_s, the merge after the update (``update_merge_seconds``)
    grad_row_bytes: float = 0.0  # the gradient bytes per id the update reads (each table's at its random-read cost)


#: Bytes per id a trained forward writes for the backward (int32 sort key and gradient row), priced at the
#: copy rate beside the lookup. The stores cost more on the H200 (a segment per bag and iteration, registers:
#: +0.16-0.20 ms on the MLPerf tables where this prices 0.03, benchmarks/results/forward_shapes_2026-12-01/);
#: pricing them so made the planner's MLPerf steps worse on four committed runs (its backward over-prices
#: them by as much), so it is not adopted until that is mended.
SORT_KEY_BYTES_PER_ID = 8
#: SM cycles per id the trained forward takes at least (its lookup and key stores together, whatever the rows'
#: bytes), spread over the compute units: small-dim lookups of many ids ran at 9-11 cycles per id on an H200 and an
#: H100 alike (same SMs and clock, 1.41x apart in copy rate), priced 1.5-3.5x low by their bytes and round trips
#: (dim 16, 14.75M ids: 0.486 / 0.603 ms measured, 0.159 / 0.179 priced). Fitted with
#: ``tbe_lookup.FORWARD_LAUNCH_DEVICE_S`` (benchmarks/trained_forward_fit.py, least rms log error on a grid) on the
#: pooled-lookup kernels of the 96 ``tbe_device_times`` cases of today's forward kernel (64 on H200s, 32 on an H100):
#: rms log error 0.444 -> 0.206 over all (no floor and each launch at the calibrated launch latency before), 0.423
#: -> 0.138 over the 59 forwards of more than 0.1 ms (mean -0.21 -> -0.04). Not binding on the MLPerf tables (14M
#: ids at dim 128: 0.54 ms floor against ~1.9 ms). Not measured on AMD (the same count per CU assumed). The
#: selectors do not see it: it is the planner's, like SORT_KEY_BYTES_PER_ID.
TRAINED_FORWARD_SM_CYCLES_PER_ID = 10.15


def estimate(tables: list[TableLoad], *, batch_size: int, out_dim: int, out_bytes: int, state_bytes_per_row: float,
             spec: DeviceSpec, ceil: Ceilings, fwd: Sequence[tuple[ForwardTile, Sequence[int]]], bwd: UpdateShape,
             weight_bytes: int = 4, row_state: bool = False) -> StepEstimate:
    """Time of one forward and one fused backward + update over ``tables`` (each feature's load); the
    forward is ``planned_forward_seconds`` of the launches the module runs (``fwd``: each a tile and the
    tables it reads) with its sort-key stores, at least TRAINED_FORWARD_SM_CYCLES_PER_ID per id, and the update
    ``update_seconds`` of the config the selector runs (``bwd``), the same models that pick them.
    ``weight_bytes``: element size of the rows (their ``row_bytes`` / dim), so that the gradient slice per
    id is priced at the gradient's element size (``bwd.grad_bytes``) whatever the rows' precision.
    ``row_state``: the optimizer keeps per-row state (row-wise Adagrad), whose per-row work
    ``row_state_seconds`` adds."""
    gran = GATHER_GRANULARITY[spec.vendor]
    hits = l2_hits(tables, spec.l2_bytes)
    nnz = sum(t.accesses for t in tables)
    gathered = sum((t.accesses - h) * t.row_bytes / gather_efficiency(t.row_bytes, gran)
                   for t, h in zip(tables, hits))
    out = batch_size * out_dim * out_bytes
    key_bytes = 4
    sort_keys = nnz * SORT_KEY_BYTES_PER_ID
    fwd_bytes = gathered + out + nnz * 8 + batch_size * len(tables) * 8 + sort_keys
    fwd_s = max(planned_forward_seconds(tables, fwd, batch_size=batch_size, out_bytes=out_bytes, spec=spec, ceil=ceil)
                + sort_keys / ceil.copy_bandwidth.value, sm_seconds(nnz * TRAINED_FORWARD_SM_CYCLES_PER_ID, spec))
    uniq = sum(unique_rows(t) for t in tables)
    # per id, each table's rows and gradient slices at their random-read cost (a mean row size of mixed
    # dims would hide the floor of the small ones)
    row_read = sum(t.accesses * random_read_bytes(t.row_bytes) for t in tables) / max(nnz, 1)
    grad_row = sum(t.accesses * random_read_bytes(t.row_bytes / weight_bytes * bwd.grad_bytes)
                   for t in tables) / max(nnz, 1)
    update_kw = dict(nnz=nnz, unique=uniq, row_bytes=row_read, grad_row_bytes=grad_row,
                     state_bytes_per_row=state_bytes_per_row)
    bwd_bytes = update_bytes(bwd.variant, gran=gran, **update_kw)
    sort_s = sort_seconds(int(nnz), key_bytes, ceil, spec)
    merge_s = update_merge_seconds(bwd, spec, ceil, nnz=nnz, unique=uniq, grad_row_bytes=grad_row)
    update_s = update_launch_seconds(bwd, spec, ceil, **update_kw) + merge_s  # as update_seconds
    bwd_s = sort_s + update_s + 2 * ceil.launch_latency.value
    if row_state:
        bwd_s += row_state_seconds(nnz, spec)
    return StepEstimate(forward_s=fwd_s, backward_s=bwd_s, forward_bytes=fwd_bytes, backward_bytes=bwd_bytes,
                        unique_rows=uniq, sort_s=sort_s, merge_s=merge_s, grad_row_bytes=grad_row)


def row_state_seconds(positions: float, spec: DeviceSpec) -> float:
    """The per-row work of an optimizer with per-row state over ``positions`` id positions
    (ROW_STATE_SM_CYCLES each, spread over the compute units)."""
    return sm_seconds(positions * ROW_STATE_SM_CYCLES, spec)
