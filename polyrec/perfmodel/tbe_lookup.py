"""Cost model of the pooled lookup (``pooled_forward_kernel``; pure Python): a launch runs its features in
turn (its grid is feature-major), each taking the longer of its row reads at the copy rate and its programs'
chains of dependent round trips over the programs resident at once (registers, warp and block slots decide
how many), plus the launch's load issue. The forward
selector (``tbe_select.select_forward``), the forward plan (``tbe_forward_plan``) and the planner price
the same launches with it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from polyrec.hardware.types import Ceilings, DeviceSpec
from polyrec.perfmodel.tbe_reads import (LOADED_LATENCY_S, MAX_PROGRAMS_PER_CU, MAX_WARPS_PER_CU, TableLoad,
                                         hit_fraction, random_read_bytes)

#: Latency of a forward row load that hits L2, as a fraction of LOADED_LATENCY_S (fitted with the trip constants
#: below, the power-law sweeps priced at their ids' L2 hits as the planner prices them; the module's plan prices every
#: lookup at its tables' least reuse). Until the sixty-sixth session the hits shortened every trip of a program's
#: chain, the setup's and the ids' too (fraction 0.4, setup 0.75, cross-warp 2.25), though only the row load reads
#: the table. Uniform ids over the MLPerf tables that fit L2 then ran 1.3-1.6x longer than priced, on an H100 and an
#: H200 alike (``benchmarks/module_forward_check.py``: the tables of <= 512 rows 0.117 / 0.113 ms against 0.075 /
#: 0.071, those of 513-100k rows 0.226 / 0.217 against 0.184 / 0.171; the same in bf16 0.186 / 0.180: round trips,
#: not bytes; results module_forward_check_2026-12-06b, -c). Refitted with the hits on the row trip alone, on a grid
#: (setup 0.25-1, per iteration 1.5-2.25, cross-warp 1.5-2.5, fraction 0-0.4) for the least ``forward_model_fit``
#: objective plus the rms log error of the H200's eight module rows, under the stored calibrations. At the
#: datasheet's rates (the calibrated in brackets): the modules' rms log error 0.263 -> 0.098 on the H200 (0.256 ->
#: 0.107) and 0.277 -> 0.094 on the H100, not fitted on (0.254 -> 0.098); the sweeps' 0.227 -> 0.253 (0.213 ->
#: 0.241: the world-2 power-law launches priced higher), their picks 1.011 of the fastest both (1.015 -> 1.011); the
#: checks not fitted on (draws 103, 104) 0.334 -> 0.346 (0.319 -> 0.329), their picks 1.047 -> 1.031 (1.031 both).
#: ``forward_model_fit.py --grid --modules`` (the whole grid, datasheet rates) picks setup 0.25, per iteration
#: 1.75, cross-warp 2.25, fraction 0.7: modules 0.070 / 0.092, but the checks 0.389 with picks 1.062: not taken.
L2_HIT_LATENCY_FRACTION = 0.2
#: Loaded round trips (of LOADED_LATENCY_S) before a forward program's first id load: the feature's
#: table fields and its bags' offsets. A program pays them once, so tiles of few bags pay them per bag.
FORWARD_SETUP_TRIPS = 0.5
#: Loaded round trips per forward loop iteration: the ids, then the rows they address.
FORWARD_TRIPS_PER_ITER = 2.0
#: Of FORWARD_TRIPS_PER_ITER, the row load's: the trip an L2 hit shortens (to L2_HIT_LATENCY_FRACTION).
FORWARD_ROW_TRIPS_PER_ITER = 1.0
#: Loaded round trips each iteration adds per extra warp along the tile's HOTS axis (``warps_along_hots``): the sum
#: over HOTS then crosses warps through shared memory behind a barrier every iteration. Until the twenty-seventh
#: session the term counted warps beyond BAGS, but Triton's layout fills BAGS with threads first: 4 x 16 tiles of
#: fp16 rows over 64 columns put all 4 warps on HOTS, and such tiles (half-precision rows, 4 warps along HOTS = 16)
#: ran 2.3x slower than priced (geometric mean of 44 measurements). The four constants were fitted together by
#: ``benchmarks/forward_model_fit.py --grid`` (its ``objective``: rms log error and the picks' slowdowns) on 40 H200
#: sweeps of every candidate with today's kernel (``benchmarks/results/gather_rate_2026-12-01/``: dims 8-256 at
#: 16-id bags; the full MLPerf tables, fp32 and fp16 rows, uniform and power-law ids; the world-2 ranks of
#: tbe_forward_groups_nvidia-h200_2026-11-30; the random lookups of ``gather_rate --draw`` 101 and 102), with
#: RANDOM_READ_MIN_BYTES and HALF_ELEMENT_REGISTERS: setup 2 -> 0.75 trips, cross-warp 0.75 -> 2.25 (the others
#: unchanged). On those sweeps the rms log error went 0.37 -> 0.23 and the picks 1.037 -> 1.011 of the fastest
#: candidate; on draws 103 and 104 (not fitted on) 0.40 -> 0.34, picks 1.047 both. On 28 lookups drawn after the
#: change (``benchmarks/results/forward_layout_2026-12-01/``, draws 105 and 106): rms 0.42 / 0.40 -> 0.29 / 0.28,
#: single-launch picks 1.039 / 1.032 -> 1.009 / 1.013, and the module's plans (with
#: ``tbe_forward_plan.GROUPING_MIN_GAIN``) 1.061 / 1.044 -> 1.008 / 1.010 of the fastest single launch (worst 1.62
#: -> 1.10). The MLPerf plans and the training step measured the same (within 0.3%). Refitted in the sixty-sixth
#: session with setup 0.75 -> 0.5 and cross-warp 2.25 -> 2.0, when an L2 hit came to shorten the row trip alone
#: (L2_HIT_LATENCY_FRACTION says how and on what).
FORWARD_CROSS_WARP_TRIPS = 2.0
#: 32-bit registers a loaded half-precision row element takes: two share one. cuda:90 compiles of the
#: HOTS = 4 tiles at D = 128 (inference): 48-64 registers per thread with fp16 rows against 66-74 with fp32
#: (tests/test_tbe_forward_layout.py checks fp16 < fp32 for each such tile, inference and trained).
HALF_ELEMENT_REGISTERS = 0.5
#: Bytes per clock one SM / CU's load-store path issues (L1: 128 B/clk on Hopper, CUDA C++ Programming
#: Guide "Compute Capability 9.0" shared memory/L1; CDNA3 vL1D 64 B/clk, CDNA3 ISA/whitepaper). Masked
#: lanes of a tile still occupy it: this is what HOTS > bag length wastes.
LSU_BYTES_PER_CLK = {"nvidia": 128, "amd": 64}


#: Device seconds each forward launch adds in the planner's price (``planned_forward_seconds``) beyond
#: ``forward_seconds``, whose chains already hold a program's start and tail. Fitted with
#: ``tbe_step.TRAINED_FORWARD_SM_CYCLES_PER_ID`` (benchmarks/trained_forward_fit.py, the pooled-lookup kernels of 96
#: ``tbe_device_times`` cases on H200s and an H100): 0 on a 0.5 us grid. Until then each launch took the calibrated
#: launch latency (the host's rate of launching small torch ops, 6.9 us H200, 9.7 us H100), which priced the
#: lookups of less than 0.1 ms +23% (H200) and +28% (H100) in the mean, +8% and +2% now. The module's own plan
#: (``tbe_forward_plan.plan_forward``) still weighs an extra launch at the launch latency: that choice is the
#: runtime's, not re-measured.
FORWARD_LAUNCH_DEVICE_S = 0.0
#: Per (BAGS, HOTS) tile, each feature's loop iterations per program on a batch (``forward_seconds``'s
#: ``loop_trips``, computed by ``polyrec.kernels.tbe_forward.loop_trips``).
LoopTrips = Mapping[tuple[int, int], Sequence[float]]


@dataclass(frozen=True, kw_only=True, slots=True)
class ForwardTile:
    """Launch shape of the pooled forward: a [bags, hots, block_d] tile per loop iteration."""

    bags: int
    hots: int
    block_d: int
    num_warps: int
    vec: int  # row elements per thread access (the kernel's VEC: up to 16 bytes, dividing every dim)
    elem_bytes: int  # bytes of a row element


def warps_along_hots(tile: ForwardTile, warp_size: int) -> int:
    """Warps that split the HOTS axis of the tile's [BAGS, HOTS, BLOCK_D] row loads. Triton's default
    blocked layout fills a warp's threads, then the program's warps, along BLOCK_D (VEC elements per
    thread), then BAGS, then HOTS (order [2, 0, 1] in the compiled TTGIR; tests/test_tbe_forward_layout.py
    checks this against the compiles): 4 x 16 tiles of 4 warps over 64 fp16 columns put every warp on
    HOTS, where the same tile of fp32 rows puts two."""
    threads_d = min(warp_size, max(tile.block_d // tile.vec, 1))
    threads_bags = min(warp_size // threads_d, tile.bags)
    warps_d = min(tile.num_warps, max(tile.block_d // (tile.vec * threads_d), 1))
    warps_bags = min(tile.num_warps // warps_d, max(tile.bags // threads_bags, 1))
    return max(tile.num_warps // (warps_d * warps_bags), 1)


def forward_registers(tile: ForwardTile, warp_size: int) -> int:
    """32-bit registers per thread: the fp32 accumulator [bags, block_d] with its 64-bit row base per
    element (2 per element), the loaded [bags, hots, block_d] tile (1 per element, HALF_ELEMENT_REGISTERS
    for half-precision rows) and ~32 for indices, masks and loop state; capped at the 255 the compiler
    allows. Only roughly the compiles' (cuda:90, D = 128, inference / trained): 4 x 4 w2 fp32 rows 80
    here, 66 / 96 compiled; fp16 64 here, 48 / 64; staged 16 x 1 w2 fp32 128 here, 165 / 192. The
    compiled counts themselves, tried offline in place of this one, fitted no better (docs/tbe.md)."""
    threads = tile.num_warps * warp_size
    acc = tile.bags * tile.block_d / threads
    per_element = HALF_ELEMENT_REGISTERS if tile.elem_bytes == 2 else 1.0
    loaded = tile.bags * tile.hots * tile.block_d / threads * per_element
    return int(min(255, 32 + 2 * acc + loaded))


def forward_slots(tile: ForwardTile, spec: DeviceSpec) -> int:
    """Programs resident on the whole device (registers, warp slots, block slots)."""
    regs = -(-forward_registers(tile, spec.warp_size) // 8) * 8  # allocation granule of 8 registers
    threads = tile.num_warps * spec.warp_size
    per_cu = min(spec.registers_per_cu // (regs * threads), MAX_WARPS_PER_CU[spec.vendor] // tile.num_warps,
                 MAX_PROGRAMS_PER_CU[spec.vendor])
    return max(per_cu, 1) * spec.compute_units


def forward_seconds(tile: ForwardTile, spec: DeviceSpec, ceil: Ceilings, *, batch_size: int,
                    bag_lengths: list[float], row_bytes: int, out_bytes: int, hit_fraction: float = 0.0,
                    loop_trips: Sequence[float] | None = None) -> float:
    """Predicted pooled-forward time: per feature, in turn (the grid is feature-major: a feature's programs
    run together, then the next feature's), the longer of its bytes at the copy rate (row reads that miss
    L2, ``1 - hit_fraction`` of them, each at least RANDOM_READ_MIN_BYTES, and its output) and its programs'
    chains of dependent round trips over the resident slots; features with fewer programs than the slots
    share a turn with those resident beside them. Plus the load-issue time of the whole tile (masked lanes
    included) and the last program's chain (the tail of the grid). A round trip takes LOADED_LATENCY_S; the
    row loads' (``FORWARD_ROW_TRIPS_PER_ITER``) are shortened by the L2 hits (``L2_HIT_LATENCY_FRACTION``).
    Until the twenty-ninth session a launch took the longer of all its bytes and all its chains: a feature
    bound by its bytes hid the round trips of the short bags beside it, and at the H200's measured copy
    rate (a stored calibration: 4.15-4.24 TB/s, not the datasheet's 4.8) the MLPerf forward planned one
    4 x 4 launch, measured 1.851 ms against 1.752 for the two launches it plans now
    (benchmarks/results/forward_phases_2026-12-01). On the committed sweeps (``benchmarks/forward_model_fit.py``,
    the constants kept) the rms log error went 0.230 -> 0.227 at the datasheet's copy rate and 0.215 -> 0.212
    at a measured one, the single-launch picks 1.011 -> 1.011 and 1.012 -> 1.015 of the fastest; on the
    draws not fitted on, rms 0.342 -> 0.334 and 0.323 -> 0.318, picks 1.047 -> 1.047 and 1.035 -> 1.031.
    ``loop_trips``: each feature's loop iterations per program under this tile, where the batch is at
    hand (``tbe_forward.loop_trips``): a program loops over the longest of its BAGS bags, so ragged bags
    take more iterations than their mean length says. None: every bag at its feature's mean length.
    ``out_bytes`` is priced once per bag (the callers pass one element's size), not per pooled row of
    ``block_d`` elements as the kernel writes it: pricing the whole row moves world 2 rank 1's fp32 plan
    to one 16 x 1 launch, measured 1.02x (uniform ids) and 1.10x (skewed) slower than the two launches
    planned now; elsewhere it changed nothing measurable (benchmarks/results/capture_forward_2026-12-05,
    ``forward_out_bytes_ab.py``), so the constants fitted with it stay."""
    lat = LOADED_LATENCY_S[spec.vendor]
    hit_saving = FORWARD_ROW_TRIPS_PER_ITER * (1.0 - L2_HIT_LATENCY_FRACTION) * hit_fraction  # trips an iteration saves
    programs = -(-batch_size // tile.bags)
    iters = (list(loop_trips) if loop_trips is not None
             else [math.ceil(length / tile.hots) if length > 0 else 0 for length in bag_lengths])
    per_iter = (FORWARD_TRIPS_PER_ITER - hit_saving
                + FORWARD_CROSS_WARP_TRIPS * (warps_along_hots(tile, spec.warp_size) - 1))
    chains = [FORWARD_SETUP_TRIPS + per_iter * it for it in iters]
    slots = forward_slots(tile, spec)
    per_read = random_read_bytes(row_bytes) * (1.0 - hit_fraction)
    bytes_s = [batch_size * (length * per_read + out_bytes) / ceil.copy_bandwidth.value for length in bag_lengths]
    trips_s = [programs * chain * lat / slots for chain in chains]
    together = max(1, slots // max(programs, 1))  # features whose programs are resident at once
    phases = sum(max(sum(bytes_s[f:f + together]), sum(trips_s[f:f + together]))
                 for f in range(0, len(bag_lengths), together))
    issued = programs * sum(iters) * tile.bags * tile.hots * row_bytes
    issue_s = issued / (spec.compute_units * LSU_BYTES_PER_CLK[spec.vendor] * spec.boost_clock_hz)
    return phases + issue_s + max(chains, default=0) * lat


def planned_forward_seconds(tables: list[TableLoad], launches: Sequence[tuple[ForwardTile, Sequence[int]]], *,
                            batch_size: int, out_bytes: int, spec: DeviceSpec, ceil: Ceilings) -> float:
    """The pooled forward as the module launches it: each launch (a tile over the tables it reads, by
    index, its rows of ``block_d`` elements) priced by ``forward_seconds`` at those tables'
    ``hit_fraction``, plus FORWARD_LAUNCH_DEVICE_S each."""
    total = 0.0
    for tile, reads in launches:
        loads = [tables[i] for i in reads]
        total += forward_seconds(tile, spec, ceil, batch_size=batch_size,
                                 bag_lengths=[t.accesses / max(batch_size, 1) for t in loads],
                                 row_bytes=tile.block_d * tile.elem_bytes, out_bytes=out_bytes,
                                 hit_fraction=hit_fraction(loads, spec))
        total += FORWARD_LAUNCH_DEVICE_S
    return total
