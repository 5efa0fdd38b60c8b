"""Cost model of the table-batched embedding's fused backward (pure Python; no GPU, no torch): the update
and its merge levels, as the selector (``kernels.tbe_select``) prices its configs and ``tbe_step`` a module's
backward.

Everything is bytes over a bandwidth, with the reads' corrections of ``tbe_reads`` (gather efficiency,
the random-read floor, L2 reuse under skew) and **latency-bound occupancy**: the kernels' programs wait
on chains of dependent loads, so a launch takes at least its programs' round trips over the programs
resident at once (registers, warp and block slots decide how many), and the lane update's instructions
at the SMs' issue rate. The pooled lookup's own model is ``tbe_lookup``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from polyrec.hardware.types import Ceilings, DeviceSpec
from polyrec.perfmodel.gemm import TRITON_PASS_HOST_S
from polyrec.perfmodel.tbe_reads import (GATHER_GRANULARITY, LOADED_LATENCY_S, MAX_PROGRAMS_PER_CU, MAX_WARPS_PER_CU,
                                         random_read_bytes)

#: Dependent DRAM round trips of one update program, per variant (counted from ``tbe_backward``):
#: "scan": keys -> perm -> source row -> gradient slices -> weight rows (the column lookup hits L1);
#: "lane": keys with sorted gradient offsets -> gradient slices together with the weight rows.
UPDATE_TRIPS = {"scan": 5, "lane": 2}
#: Dependent DRAM round trips of an update program whose positions hold none of its launch's dim group's ids
#: (``tbe_backward._group_active``: the first and the last key loaded together, then two slots stored): counted.
IDLE_PROGRAM_TRIPS = 1
#: Extra time of the "scan" variant per sorted position and per unit of TILE, seconds: its cross-warp
#: segmented scan and layout conversions grow with the tile. Fitted on one row of
#: benchmarks/results/tbe_update_variants_nvidia-h200_2026-11-29 (scan tile 64, 8 warps: 27.59 ms of
#: backward where the round-trip model gives 9.4 ms): 18.2 ms / (14.02M positions x 64). Checked on the
#: others: tile 16 predicted 14.5 ms (measured 13.83), tile 32 18.7 ms (18.63). Without it the model
#: picked scan tile 64 for Adagrad and Adam (a smaller merge) where it runs 3.5x slower than the lane
#: update (planner_accuracy_nvidia-h200_2026-11-29: 27-30 ms embedding steps with those optimizers).
SCAN_SECONDS_PER_POSITION_TILE = 2.02e-11
#: Registers per thread of an update program = 40 + this x fp32 tile elements per thread, fitted to the
#: cuda:90 compiles of the candidates (rowwise Adagrad, fp32; tests/test_tbe_compile.py compiles them):
#: scan 16 elements -> 128-148, lane TILE 8 (32 elements) -> 168; capped at 255.
UPDATE_REGS_PER_ELEM = {"scan": 5.5, "lane": 4.0}
#: Registers per thread each per-element fp32 optimizer-state tile (Adagrad 1, Adam 2) adds per tile
#: element per thread: counted, not fitted, on the cuda:90 compiles of the one-dim lane update at TILE 8
#: (32 elements per thread, 8-tile chunks, no cap; benchmarks/sass_count.py, twenty-fifth session): Adam
#: 254 registers (8 one-warp programs per SM) where 40 + 4 x 32 + 2 x 32 = 232 gives 8 as well; Adagrad
#: asks 200 and runs at the selector's 152 cap (13 per SM). Allocation only: the candidates' register fit
#: (``update_registers_needed``) is the fitted rule above.
STATE_TILE_REGS_PER_ELEM = 1.0
#: Partial slots per tile of a merge-level program (``tbe_merge.merge_level_kernel``, laid out as the
#: lane update: LEVEL_TILE x VEC fp32 values per lane). 8, as the lane update's fastest tile (TILE 16
#: asks ~296 registers per thread, over the 255 limit); with one tile per program (the config's
#: ``merge_chunks``, one of ``tbe_select.MERGE_CHUNK_CHOICES``) each level leaves 2 slots per 8, with 8 tiles 2 per 64.
LEVEL_TILE = 8
#: Effective dependent DRAM round trips of one merge-level tile of LEVEL_TILE slots (one program with
#: merge chunks 1; a chunked program takes its tiles in turn): MERGE_EMPTY_TRIPS + crossing x
#: MERGE_CROSSING_TRIPS, with crossing = 1 - unique / nnz (the chance that a program end splits a run).
#: Counted: 2 (slot keys -> pieces with the rows of the runs it ends); programs whose slots hold pieces
#: wait longer and issue more, and more of them hold pieces as duplicates grow. Refitted when the tiles
#: with pieces began finding their table once per tile (commit 22d2452): on one row, full MLPerf tables,
#: uniform ids, bf16 output gradient, one-tile lane update, merge chunks 8: 0.872 ms in both rounds of an
#: interleaved A/B against 1.530 ms for the previous code (benchmarks/results/tbe_lane_ab_2026-11-30,
#: copy rate taken as 4.24 TB/s). Checked on the same run's fp32-gradient rows (8-tile chunks): uniform
#: 0.173 ms predicted vs 0.166 measured, skewed 0.218 vs 0.234. The previous value, 11.6, fitted two
#: crossings (0.27 and 0.50) of the previous code; the capped tables' crossing is not re-measured.
MERGE_EMPTY_TRIPS = 2.0
MERGE_CROSSING_TRIPS = 2.66
#: Dependent round trips of a merge tile of slots that no program of their launch filled (the slots of a dim group's
#: launch over the other groups' ids, ``idle_programs_seconds``): the load of its keys, all empty, then its two
#: empty slots stored out (``tbe_merge._merge_one_tile``): counted.
MERGE_IDLE_TILE_TRIPS = 1.0
#: Device seconds of one merge level beyond its slots' work: the start and end of a small kernel that waits on
#: the level before it (the profiler's kernel time; the gap between two queued kernels is not in it). Until the
#: sixty-eighth session each level was priced at the calibrated launch latency (``Ceilings.launch_latency``: the
#: host's rate of launching small torch ops, 6.9 us on the H200, 9.7 us on the H100), which priced the merges of
#: the random cases 2.3x high in the mean, and the selector took 8 tiles per merge program on the H100 where an
#: H200 ran the same cases with 1 in 0.6-0.8x the merge time (tbe_model_check_2026-12-02, 41f78d1). Fitted with
#: MERGE_WALK_TRIPS (benchmarks/merge_model_fit.py, least squares on relative errors) on the merge kernels of 56
#: one-launch ``tbe_device_times`` cases on H100s (benchmarks/results/h100_backward_2026-12-06/ seeds 27-28,
#: h100_merge_2026-12-07/ seeds 29-30; 3-9 levels each): 1.85 us and 1.50 trips; rms log error 0.935 (mean +0.83)
#: -> 0.424 (-0.11). A fit of the level alone on seeds 27-28 (1.6 us) priced seeds 29-30, unseen, 0.952 -> 0.479.
#: Checks not fitted on: full-size MLPerf (4 levels of 8 tiles) 0.140 / 0.142 ms measured on an H200 / H100, 0.231 /
#: 0.243 priced before, 0.197 now (the rest of the gap is the slots' round trips); the H100's A/B of 1 and 8 tiles
#: per program there (bf16 rows and gradient): 0.146 / 0.141 ms measured, 0.196 / 0.197 priced (0.266 / 0.243
#: before), so the selector takes 1 and the merge runs 5 us (0.1% of the 5.6 ms step) longer than with 8.
#: The same values are assumed on AMD (not measured).
MERGE_LEVEL_DEVICE_S = {"nvidia": 1.85e-6, "amd": 1.85e-6}
#: Dependent round trips (of LOADED_LATENCY_S) per tile a chunked merge program walks after its first
#: (``merge_seconds``' walk), fitted with MERGE_LEVEL_DEVICE_S; MERGE_EMPTY_TRIPS (2), counted, before.
MERGE_WALK_TRIPS = 1.5
#: Host seconds to issue one merge level (a Triton launch of ~20 arguments), priced as the GEMM's
#: epilogue-pass launch (``polyrec.perfmodel.gemm.TRITON_PASS_HOST_S``, 35 us). The levels depend on one
#: another and each runs for a few microseconds of device time past the first, so on a step that waits on
#: the host a merge of many levels finishes when the host has issued them: the selector weighs this there
#: (``tbe_select.select_update``'s ``host_bound``; ``merge_seconds``'s ``issue_s``); the planner's device
#: estimate does not (it counts the launches in ``planner.host``).
MERGE_LEVEL_HOST_S = TRITON_PASS_HOST_S
#: Host seconds to issue the lane update's permute pass (a Triton launch before the update; the scan update
#: takes none), priced as a merge level, so a host-bound selection counts every launch of either variant. Four
#: small updates on one H100 (830-4000 ids, eager steps of 1.1-1.6 ms, each config in three rounds of
#: alternating order) took as many launches under each (the lane's permute against the scan's second merge
#: level) and stepped 0.12-0.27 ms shorter under the scan (``benchmarks/results/small_update_rounds_2026-12-07/``).
LANE_PERMUTE_HOST_S = TRITON_PASS_HOST_S
#: Fraction of the copy rate the update's traffic reaches (rows read and written back in place plus
#: gradient slices gathered in sorted order), by the output gradient's element size. Each fitted on one
#: row, the config the selector runs at e041e0d + the register cap (TILE 8, 8-tile chunks, 152 registers;
#: both rounds of benchmarks/results/tbe_lane_ab_2026-11-30/s11c_*): lane update + permute, row-wise
#: Adagrad, fp32 rows, uniform ids, full MLPerf tables, copy rate taken as 4.24 TB/s:
#: - fp32 gradient: 19.6 GB in 4.325 + 0.148 ms, 1.04 of the copy rate: the byte count over-states
#:   (gradient slices re-read from L2), so 1.0 (the bytes at the copy rate, 4.63 ms, +3.5%);
#: - bf16 gradient: 16.0 GB in 4.150 + 0.148 ms = 0.880. Why it reaches less than the fp32 one, which moves
#:   more, is not measured apart (its SASS is as long; ptxas gives it 8 more registers uncapped).
#: Until c1ce9af one value, 0.866, fitted on the fp32-gradient row of the kernel then (5.21 ms).
#: fp16 / bf16 rows move fewer bytes but round stochastically, which is issue-bound: ``rounding_seconds``.
UPDATE_COPY_FRACTION = {4: 1.0, 2: 0.880}
#: UPDATE_COPY_FRACTION of the lane update of tables that share one dim (``UpdateShape.one_dim``: rows
#: addressed as global row x dim, no table looked up, ``tbe_backward.tile_rows``'s ONE_DIM; the gradient
#: slices loaded evict-last in L2, the rows and state stored evict-first; 128-register cap,
#: ``tbe_select.LANE_MAX_REGISTERS_ONE_DIM``). Fitted on the sixteenth session's interleaved rows
#: (benchmarks/results/tbe_lane_ab_2026-11-30/s16c_F128_*, full MLPerf tables, uniform ids, row-wise
#: Adagrad, the committed calibration's copy rate, 4.24 TB/s) as ``tbe_step.estimate`` prices them: this term,
#: the merge and the per-row work ``row_state_seconds`` (0.50 ms) against lane update + permute + merge,
#: fp32 gradient 19.64 GB in 4.088 + 0.149 + 0.129 ms -> 1.242; bf16 gradient 16.05 GB in 3.539 + 0.148 +
#: 0.129 ms -> 1.190 (1.258 / 1.209 while the merge priced each level at the calibrated launch latency, before
#: MERGE_LEVEL_DEVICE_S; refitted so that the two rows stay priced as measured). Above 1: the byte count takes one
#: gradient slice per id from DRAM where a bag's repeated slices hit L2 (so the floor of ``update_seconds`` is
#: ``update_dram_floor``), and the fit of UPDATE_COPY_FRACTION did not take the per-row term out (it came later).
#: Checked on the same run's Zipf-skewed row (12.45 GB): 3.07 ms predicted, 2.438 + 0.145 + 0.187 measured
#: (+11%); and by the planner against this session's e2e run (tests/test_tbe_state_trips.py).
#: Not for optimizers with a per-element state tile, which the one-dim kernel sped up far less (tables capped
#: at 4M rows, bf16 gradient, lane + permute + merge, s16d_*: Adagrad 5.124 -> 4.738 ms, Adam 7.252 -> 6.860,
#: against row-wise Adagrad 3.885 -> 2.926, SGD 3.228 -> 2.529): they keep UPDATE_COPY_FRACTION and
#: LANE_INSTRUCTIONS.
ONE_DIM_UPDATE_COPY_FRACTION = {4: 1.242, 2: 1.190}
#: Dependent DRAM round trips per update tile that each fp32 optimizer-state array adds beyond the kernel
#: UPDATE_COPY_FRACTION was fitted on (FIT_STATE_ARRAYS). None since the lane update issues all of a tile's
#: row, state and gradient loads before a barrier (02e0c4b; the cuda:90 SASS of the one-tile lane update
#: shows every LDG of the rows, the state and the gradient ahead of BAR.SYNC for SGD, row-wise Adagrad and
#: Adam), so a state array costs its bytes only. Until then ptxas issued each state array's loads after
#: instructions that consumed the loads before them, and one trip per array (NVIDIA) matched SGD - row-wise
#: -1.28 ms and Adam - Adagrad +3.43 ms. Measured since, on the H200 (planner_accuracy_nvidia-h200_2026-11-30
#: at 4925e3c, tables capped at 4M rows, batch 65536, embedding phase): Adagrad - row-wise +1.95 ms (model
#: +1.83), Adam - row-wise +3.67 (+3.78), SGD - row-wise -1.17 (-0.12): row-wise Adagrad's per-row sum of
#: squares across lanes, square root and division are ALU work the model does not price, so SGD is
#: over-predicted by ~1 ms of embedding time. gfx942 compiles show no step per state array either.
STATE_ARRAY_TRIPS = {"nvidia": 0, "amd": 0}
#: fp32 state arrays of the kernel UPDATE_COPY_FRACTION was fitted on (row-wise Adagrad).
FIT_STATE_ARRAYS = 1
#: Instructions per thread per tile element that stochastic rounding (fp16 / bf16 rows,
#: ``tbe_optim.round_stochastic`` of ``random_u32``: the per-row hash shared by the row's elements, each element's
#: multiply, the dither and truncation (fp16) or the carry (bf16), and the row's load converted to fp32) adds to a
#: program: counted, not fitted, as the difference of the cuda:90 SASS (``benchmarks/sass_count.py --weights fp16``
#: / ``--weights fp32``) of the kernels with STOCHASTIC on (by the rows' dtype) and off (fp32 rows), row-wise
#: Adagrad, BLOCK_D 128, one warp, no weight decay or scale: the mixed-dims lane update (TILE 8, 8-tile chunks,
#: 152-register cap) 1145 -> 1579 warp instructions per loop trip; the one-tile merge level 1368 -> 1824 in all (8
#: tiles per program: 1090 -> 1527 per trip; 1004 -> 1441 since the thirty-fifth session's carry) x 32 / 1024
#: elements.
#: Every element of a tile executes them, masked or not. The scan variant runs the same ``store_update``: the lane
#: count. (Before the thirty-third session's rounding: 24.5 / 24.5 / 23.75, a hash per element and the ulp gap drawn
#: against.) Recounted for the lane when the open run's carry moved before the scan (thirty-fifth session,
#: benchmarks/results/lane_carry_probe_2026-12-02/sass_count_s35_cpu.json): 1016 -> 1469 (13.56 before); the
#: one-tile merge level does not run that code (unchanged). Recounted after the forty-eighth session's cheaper
#: random bits and NaN guard (``tbe_optim.random_u32``, ``round_stochastic``; benchmarks/results/lane_alu_2026-12-04/):
#: the lane update 1016 -> 1438 per trip, the one-tile merge level 3464 -> 3840 in all (3864 before the change: the
#: 14.25 above was a count of an older merge kernel). Counted for bf16 rows apart since the seventieth session (fp16's
#: count priced both until then; benchmarks/results/rounding_by_dtype_2026-12-07/): the lane update 1016 -> 1298
#: per trip, the one-tile merge level 3464 -> 3736 in all (bf16's carry rounds with fewer instructions than fp16's
#: dither and truncation).
ROUNDING_INSTRUCTIONS = {"fp16": {"lane": 13.19, "scan": 13.19, "merge": 11.75},
                         "bf16": {"lane": 8.81, "scan": 8.81, "merge": 8.50}}
#: Registers per thread stochastic rounding adds to a merge-level program, by its tiles per program (same
#: compiles, the larger of fp16 / bf16 rows: one tile 189 -> 192 / 221, eight 207 -> 229 / 233 since the
#: carry moved before the scan, 191 -> 221 / 217 before): fewer merge programs stay resident. (66 and 39 with
#: the rounding before the thirty-third session.)
MERGE_ROUNDING_REGISTERS = {1: 32, 8: 26}
#: Thread instructions one SM / CU issues per clock: 4 schedulers x one 32-wide warp instruction on Hopper
#: (NVIDIA H100 whitepaper, "SM architecture"); CDNA3: 4 SIMDs x 16 lanes (a wave64 instruction every 4
#: clocks; AMD CDNA3 ISA guide). The rounding's instructions are issued at this rate on top of the
#: program's wait for its loads: programs of one warp, 12 resident per SM, leave the SM's issue slots
#: idle while they wait, and the rounding of a tile follows its loads in the same warp.
ISSUE_LANES_PER_CLK = {"nvidia": 128, "amd": 64}
#: Fraction of ISSUE_LANES_PER_CLK the rounding instructions reach (one-warp programs, ~3 per scheduler,
#: whose instructions mostly wait on the one before). Fitted on ONE committed row, as the planner prices it
#: (``planner.shard_cost.tbe_group_seconds`` with the committed calibrate_nvidia-h200_2026-11-29 ceilings, and
#: the lane update's own issue floor, LANE_INSTRUCTIONS): benchmarks/tbe.py at d0fe027
#: (tbe_nvidia-h200_2026-11-30), fp16 rows, full MLPerf tables, uniform ids, fp32 output gradient, forward +
#: backward 9.04 ms. Checked, not refitted: the same run's Zipf-skewed ids 9.13 ms predicted vs 9.48 measured
#: (-3.7%). Before the update kernel found its table once per tile and issued its rows ahead of the scan
#: (22d2452, 02e0c4b) the same row measured 12.73 ms and the fit gave 0.33: the rounding's instructions then
#: queued behind ~1630 others per tile.
#: Refitted to the thirty-third session's cheaper rounding on the two device-bound mixed-dims half-row cases
#: of a fresh draw (``tbe_device_times.py --seed 25``, benchmarks/results/tbe_model_check_2026-12-02/, priced by
#: ``tbe_groups_model_check.py``): case 4 (fp16, row-wise Adagrad, 3.18 ms) -6.6% -> -3.7%, case 7 (bf16,
#: 0.85 ms) -3.3% -> +0.3% at 0.75 -> 0.6. Checked on seed 26's four (fp16 Adam / Adagrad x2, bf16 SGD), all
#: closer: -8.5 / -20.7 / -17.9 / -10.3% -> -6.4 / -18.1 / -16.0 / -7.1% (the Adagrad rows' gap is the
#: per-element state's, under-priced for fp32 rows as well). On seeds 27-28, drawn after: the mixed-dims half-row
#: modules of 0.48 ms and more closer but one (-8.0 / -12.9 / -8.7 / -5.4% -> -5.6 / -9.9 / -4.7 / -2.8%; +13.0 ->
#: +17.2%), the small ones priced high higher (+5.4 / +7.9 -> +8.4 / +10.6%).
ROUNDING_ISSUE_FRACTION = 0.6
#: Thread instructions per tile element the lane update issues without rounding: counted, not fitted,
#: with benchmarks/sass_count.py (``loop_path``) on the cuda:90 SASS of the lane update of mixed dims
#: (one dim group's launch, ``GROUPED``; TILE 8, 8-tile chunks, 152-register cap, BLOCK_D 128, row-wise
#: Adagrad, fp32 rows, no weight decay or scale, int32 keys): 1016 warp instructions per trip of its loop
#: (benchmarks/results/lane_carry_probe_2026-12-02/sass_count_s35_cpu.json; 1145 before the open run's carry
#: moved before the scan; 1021 for the kernel of e041e0d, before grouped launches, which LANE_ISSUE_FRACTION
#: was fitted with) x 32 lanes / 1024 tile elements. Every position
#: of the sorted ids pays them, unique or not: this is what the update costs when few of its ids are
#: distinct (Zipf-skewed ids, small tables), where its bytes are few. Not counted on gfx942 (wave64): the
#: same count is used there, as for ROUNDING_INSTRUCTIONS.
LANE_INSTRUCTIONS = 31.75
#: LANE_INSTRUCTIONS of the one-dim lane update (``UpdateShape.one_dim``), counted the same way at the
#: sixteenth session's config (128-register cap: 123 used, 16 warps per SM): 625 warp instructions per
#: loop trip x 32 / 1024 since the open run's carry is added before the scan (thirty-fifth session,
#: sass_count_s35_cpu.json; 766 before, 761 at the sixteenth session).
ONE_DIM_LANE_INSTRUCTIONS = 19.53
#: Instructions per tile element that stochastic rounding adds to the one-dim lane update with 8-tile
#: chunks and the 128-register cap (fp16 / bf16 rows of one dim), counted as LANE_INSTRUCTIONS: fp16 rows
#: 1039 warp instructions per loop trip against 625 without rounding (cuda:90, ``sass_count.py``, row-wise
#: Adagrad, the compile job at BLOCK_D 128) x 32 / 1024; bf16 rows 881 (8.0 per element; fp16's count priced both
#: until the seventieth session). Since the forty-eighth session's cheaper random bits and NaN guard
#: (``tbe_optim.random_u32``): 1089 and 979 before (14.5; 13.03 before the thirty-fifth session's carry: 1183
#: against 766).
ONE_DIM_ROUNDING_INSTRUCTIONS = {"fp16": 12.94, "bf16": 8.00}
#: Fraction of ISSUE_LANES_PER_CLK the one-dim lane update with rounding reaches: its rounding is part of
#: its instruction stream rather than added after the loads (``rounding_seconds``); Nsight Compute on the
#: H200 saw the fp16 update before the thirty-third session ALU-bound (ALU pipe 69% busy, issue slots 70%;
#: benchmarks/results/rounding_ab_2026-12-02/s33/ncu). Fitted on ONE row as ``tbe_step.estimate`` prices it
#: (with ``row_state_seconds`` and the merge): full MLPerf tables, fp16 rows, uniform ids, bf16 gradient,
#: row-wise Adagrad, lane update + permute + merge 2.884 + 0.148 + 0.170 ms (the median of two rounds of
#: benchmarks/results/lane_carry_probe_2026-12-02/tbe_checkout_ab_cf_g16_*, the open run's carry added before
#: the scan). Checked on bf16 rows of the same call: 3.20 ms priced, 3.076 measured (+4%). Not refitted after the
#: forty-eighth session's recount (ONE_DIM_ROUNDING_INSTRUCTIONS 14.5 -> 12.94): on that session's rows
#: (benchmarks/results/lane_alu_2026-12-04/, change arm) fp16 is priced 3.08 ms against 3.09 measured (the fit
#: would be 0.739), bf16 3.08 against 2.93 (+5%: one count, fp16's, prices both). (0.711 for the kernel
#: before, at 36.81 instructions per element: 3.177 + 0.148 + 0.185 ms; 0.893 with the rounding before the
#: thirty-third session.)
ONE_DIM_ROUNDED_ISSUE_FRACTION = 0.742
#: Fraction of ISSUE_LANES_PER_CLK the lane update's own instructions reach (one-warp programs, the loads
#: of a tile in flight while they issue). Fitted on ONE row: the fp32-gradient lane update + permute on
#: Zipf-skewed ids, full MLPerf tables, with the register cap (s11c_fp32_skewed_152 in
#: benchmarks/results/tbe_lane_ab_2026-11-30/: 2.913 + 0.147 ms for 14.02M ids, 3.61M of them distinct,
#: whose bytes at the copy rate give 2.94 ms). 0.48 at 02e0c4b (1252 instructions, 9 warps per SM).
LANE_ISSUE_FRACTION = 0.56
#: One-warp lane programs resident per SM in that fit's config (the 152-register cap: 65536 registers
#: / (152 x 32) = 13). With fewer resident (an optimizer's state tiles take registers: Adam's 8 per SM)
#: fewer warps hide each other's loads and the issue fraction falls in proportion (``lane_issue_fraction``).
#: Checked, not fitted: on the 27 mixed-dims cases of tbe_groups_ab (device times, H200), the planner's
#: error for Adam went from -26% to -11% in the mean, geomean over all 16.7% -> 10.4%
#: (tbe_groups_model_check); the committed planner_accuracy run at 000b1ea re-predicted the same within
#: 0.1 point (device-bound rows 1.98% -> 1.99%). NVIDIA only (AMD's lane programs are not measured: no
#: scaling there).
LANE_ISSUE_FIT_WARPS = {"nvidia": 13}
#: Bytes of a partial slot's row id.
SLOT_KEY_BYTES = 8
#: fp32 values per lane vector in the lane layout (``tbe_select.LANE_VEC``).
LANE_VEC_ELEMS = 4


@dataclass(frozen=True, kw_only=True, slots=True)
class UpdateShape:
    """One update config on one problem: the terms of ``update_seconds``."""

    variant: str  # "scan" or "lane"
    tile: int  # sorted positions per tile
    num_warps: int
    elems_per_thread: float  # fp32 gradient-tile elements per thread
    chunks: int = 1  # tiles per program, taken in turn ("lane"): pieces for the merge only at program ends
    merge_chunks: int = 1  # tiles of LEVEL_TILE slots per merge-level program, taken in turn (``merge_seconds``)
    rounding: str = ""  # "fp16" / "bf16" rows: the update and the merge round stochastically (``rounding_seconds``)
    grad_bytes: int = 4  # element size of the output gradient (4 fp32, 2 bf16 / fp16): UPDATE_COPY_FRACTION
    one_dim: bool = False  # "lane": every table has the same dim (the ONE_DIM_* constants)
    state_tiles: int = 0  # per-element fp32 optimizer-state tiles the program holds (Adagrad 1, Adam 2)
    max_registers: int | None = None  # the config's register cap (``UpdateConfig.max_registers``)

    def block_d(self, warp_size: int) -> float:
        """Padded row width (elements) of the tile: elems_per_thread x threads / tile."""
        return self.elems_per_thread * self.num_warps * warp_size / self.tile


def state_arrays(state_bytes_per_row: float, block_d: float) -> int:
    """fp32 optimizer-state arrays the update reads per row: none, one value per row (row-wise Adagrad), or
    ``state_bytes_per_row / (4 B x BLOCK_D)`` per-element tiles (Adagrad 1, Adam 2)."""
    if state_bytes_per_row <= 0:
        return 0
    return max(1, round(state_bytes_per_row / (4 * block_d)))


def update_registers_needed(shape: UpdateShape) -> int:
    """Registers per thread the tile asks for, before the compiler's 255 cap."""
    return int(40 + UPDATE_REGS_PER_ELEM[shape.variant] * shape.elems_per_thread)


def update_registers(shape: UpdateShape) -> int:
    """Registers per thread the program is allocated: what its tile and state tiles ask for, within the
    config's cap and the compiler's 255."""
    asked = update_registers_needed(shape) + STATE_TILE_REGS_PER_ELEM * shape.state_tiles * shape.elems_per_thread
    return int(min(255, asked, shape.max_registers or 255))


def update_fits_registers(shape: UpdateShape, spec: DeviceSpec) -> bool:
    """Whether the tile fits the per-thread register limit without the compiler serialising its loads.

    Measured on the H200 (benchmarks/results/tbe_update_variants_nvidia-h200_2026-11-29.json): the
    lane update at TILE 8 (~168 registers) took 5.25 ms, at TILE 16 and 32 (asking ~296 and ~552,
    compiled to 255) 7.25 and 13.86 ms for the same bytes, so a tile over the limit is not a candidate.
    """
    return update_registers_needed(shape) <= spec.max_registers_per_thread


def update_resident(shape: UpdateShape, spec: DeviceSpec, extra_registers: int = 0) -> int:
    """Update programs resident on the whole device (registers, warp slots, block slots)."""
    regs = -(-min(255, update_registers(shape) + extra_registers) // 8) * 8
    threads = shape.num_warps * spec.warp_size
    per_cu = min(spec.registers_per_cu // (regs * threads), MAX_WARPS_PER_CU[spec.vendor] // shape.num_warps,
                 MAX_PROGRAMS_PER_CU[spec.vendor])
    return max(per_cu, 1) * spec.compute_units


def idle_programs_seconds(shape: UpdateShape, spec: DeviceSpec, *, programs: float) -> float:
    """Device seconds of ``programs`` programs of a dim group's update launch that hold none of its group's ids:
    every launch of a module of several dim groups covers all the module's sorted positions
    (``tbe_fused_backward``), and a program over the other groups' positions loads its first and last key, finds
    them outside its group's range and stores its two slots empty (``tbe_backward._group_active``):
    IDLE_PROGRAM_TRIPS round trips, over the programs resident."""
    return programs / update_resident(shape, spec) * IDLE_PROGRAM_TRIPS * LOADED_LATENCY_S[spec.vendor]


def update_bytes(variant: str, *, nnz: float, unique: float, row_bytes: float, grad_row_bytes: float,
                 state_bytes_per_row: float, gran: int) -> float:
    """DRAM bytes of the update (and, for "lane", its permute pass): gradient slices one per id, unique
    rows and state read and written (at least one access unit each), and the per-position metadata.
    Gradient slices and rows, read and written at random, count at least RANDOM_READ_MIN_BYTES each (no
    change for the MLPerf update's 512 B rows; small rows: ``benchmarks/tbe_groups_model_check.py`` on
    the committed device times, 15.3% -> 14.4% geomean error on seeds 21-22, 13.1% -> 12.5% on seeds
    11-13). The state keeps one access unit per row: it lies in the rows' sorted order, and the
    update's fitted copy fraction was fitted with it so."""
    state = 2 * unique * max(state_bytes_per_row, gran) if state_bytes_per_row else 0.0
    common = nnz * random_read_bytes(grad_row_bytes) + 2 * unique * random_read_bytes(row_bytes) + state
    if variant == "scan":  # keys, perm (8 B), source row and scale gathered (one access unit each)
        return common + nnz * (4 + 8 + 2 * gran)
    # permute: keys, perm, source row and scale gathered, offset and scale written; update: keys, offset, scale
    return common + nnz * (4 + 8 + 2 * gran + 8) + nnz * 12


def update_dram_floor(moved: float, *, nnz: float, grad_row_bytes: float) -> float:
    """A lower bound of the update's DRAM bytes (``update_bytes``, ``moved``): all but its gradient slices,
    one per id, which L2 serves where a bag's ids read its slice again."""
    return moved - nnz * random_read_bytes(grad_row_bytes)


def merge_levels(tiles: int, per: int = LEVEL_TILE) -> int:
    """Launches of ``merge_level_kernel`` after an update over ``tiles`` tiles (as ``TableBatchedEmbedding._merge``)."""
    slots, levels = 2 * tiles, 1
    while slots > per:
        slots, levels = 2 * math.ceil(slots / per), levels + 1
    return levels


def update_merge_levels(nnz: float, span: int, chunks: int) -> int:
    """Merge levels after an update over ``nnz`` sorted positions, ``span`` per update program, with
    ``chunks`` tiles of LEVEL_TILE slots per merge-level program."""
    return merge_levels(max(1, math.ceil(nnz / span)), LEVEL_TILE * chunks)


def lane_issue_fraction(shape: UpdateShape, spec: DeviceSpec) -> float:
    """LANE_ISSUE_FRACTION, scaled down where fewer warps are resident per compute unit than in its fit
    (LANE_ISSUE_FIT_WARPS, where the vendor has one)."""
    fit = LANE_ISSUE_FIT_WARPS.get(spec.vendor)
    if fit is None:
        return LANE_ISSUE_FRACTION
    warps = update_resident(shape, spec) // spec.compute_units * shape.num_warps
    return LANE_ISSUE_FRACTION * min(1.0, warps / fit)


def issue_seconds(instructions: float, fraction: float, spec: DeviceSpec) -> float:
    """Time to issue ``instructions`` thread instructions at ``fraction`` of the device's issue rate
    (ISSUE_LANES_PER_CLK per compute unit and clock)."""
    return instructions / (spec.compute_units * ISSUE_LANES_PER_CLK[spec.vendor] * spec.boost_clock_hz * fraction)


def rounded(dtype: str) -> str:
    """``UpdateShape.rounding`` of rows of ``dtype`` ("fp32", "fp16", "bf16"): the dtype where its updates round
    stochastically, "" for fp32 rows."""
    return dtype if dtype in ROUNDING_INSTRUCTIONS else ""


def rounding_seconds(elements: float, kernel: str, rounding: str, spec: DeviceSpec) -> float:
    """Issue time of the stochastic rounding of ``rounding`` rows ("fp16" / "bf16") over ``elements`` tile
    elements of ``kernel`` ("lane", "scan" or "merge"; ROUNDING_INSTRUCTIONS each), at ROUNDING_ISSUE_FRACTION of
    the device's issue rate."""
    return issue_seconds(elements * ROUNDING_INSTRUCTIONS[rounding][kernel], ROUNDING_ISSUE_FRACTION, spec)


def merge_seconds(*, nnz: float, unique: float, tile: int, grad_row_bytes: float, spec: DeviceSpec,
                  ceil: Ceilings, chunks: int = 1, rounding: str = "", rounded_block_d: int = 0,
                  issue_s: float = 0.0) -> float:
    """Merge of runs crossing update-program ends (``tile``: sorted positions per update program;
    ``chunks``: tiles of LEVEL_TILE slots per merge-level program): the pieces the update parks
    (written, then read by the first level: a program end splits a run with the chance that the next
    sorted id repeats the key), the slot keys, and the dependent round trips of every tile of slots
    over the resident programs (as the lane update's), plus per level MERGE_LEVEL_DEVICE_S and, with chunks,
    the serial walk of its last program over the tiles after its first (MERGE_WALK_TRIPS each; one tile's
    chain is in the fit of the trips). ``rounding``: "fp16" / "bf16" rows, stored with stochastic rounding
    ("": fp32 rows) at BLOCK_D ``rounded_block_d``: the tiles that hold a piece round every element
    (``rounding_seconds``), and the rounding's registers leave fewer programs resident. ``issue_s``:
    host seconds to issue one level (``MERGE_LEVEL_HOST_S`` when selecting; 0, device time only, in
    the planner's estimate): the merge takes at least the levels' issue."""
    tiles = math.ceil(nnz / tile)
    launch = MergeLaunch(programs=tiles, crossing=max(0.0, 1.0 - unique / max(nnz, 1.0)), grad_row_bytes=grad_row_bytes)
    return slots_merge_seconds([launch], programs=tiles, spec=spec, ceil=ceil, chunks=chunks, rounding=rounding,
                               rounded_block_d=rounded_block_d, issue_s=issue_s)


@dataclass(frozen=True, kw_only=True, slots=True)
class MergeLaunch:
    """The pieces one update launch parks for the merge: its ``programs`` that hold ids of its own (two slots
    each), the chance ``crossing`` that a program end splits a run, and the gradient bytes of a piece's row."""

    programs: float
    crossing: float
    grad_row_bytes: float


def slots_merge_seconds(launches: Sequence[MergeLaunch], *, programs: float, spec: DeviceSpec, ceil: Ceilings,
                        chunks: int = 1, rounding: str = "", rounded_block_d: int = 0, issue_s: float = 0.0) -> float:
    """``merge_seconds`` of one merge over the slots of ``programs`` update programs, of which ``launches``' park
    pieces: a module of several dim groups updates each by a launch over all its sorted positions, whose programs
    over the other groups' ids park empty slots (``idle_programs_seconds``), and merges every launch's slots once,
    at the merge config (``chunks``) and BLOCK_D (``rounded_block_d``) of its widest group. A tile of a launch's own
    programs' slots takes MERGE_EMPTY_TRIPS and MERGE_CROSSING_TRIPS more per crossing, a tile of the others' empty
    slots MERGE_IDLE_TILE_TRIPS; the levels are those of all the slots."""
    per = LEVEL_TILE * chunks  # slots per merge-level program
    tiles_per_program = 2 / LEVEL_TILE * (1 + 2 / per)  # the first two levels' tiles; the rest are small
    slot_tiles = programs * tiles_per_program
    pieces = sum(2 * la.programs * la.crossing * 2 * la.grad_row_bytes for la in launches)  # head and tail, w + r
    keys = slot_tiles * LEVEL_TILE * SLOT_KEY_BYTES * 2  # read, and written by the level before
    lane = UpdateShape(variant="lane", tile=LEVEL_TILE, num_warps=1, elems_per_thread=LEVEL_TILE * LANE_VEC_ELEMS)
    own_tiles = sum(la.programs for la in launches) * tiles_per_program
    trips = ((slot_tiles - own_tiles) * MERGE_IDLE_TILE_TRIPS + own_tiles * MERGE_EMPTY_TRIPS
             + sum(la.programs * tiles_per_program * la.crossing * MERGE_CROSSING_TRIPS for la in launches))
    lat = LOADED_LATENCY_S[spec.vendor]
    nearest = min(MERGE_ROUNDING_REGISTERS, key=lambda c: abs(c - chunks))  # the compiled chunk count nearest
    extra = MERGE_ROUNDING_REGISTERS[nearest] if rounding else 0
    chain_s = trips * lat / update_resident(lane, spec, extra)
    levels = merge_levels(max(1, math.ceil(programs)), per)
    walk_s = (chunks - 1) * MERGE_WALK_TRIPS * lat
    holding = sum(la.programs * tiles_per_program * -math.expm1(LEVEL_TILE * math.log1p(-min(la.crossing, 1 - 1e-12)))
                  for la in launches)  # tiles with a piece
    round_s = rounding_seconds(holding * LEVEL_TILE * rounded_block_d, "merge", rounding, spec) if rounding else 0.0
    device = (max((pieces + keys) / ceil.copy_bandwidth.value, chain_s) + round_s
              + levels * (MERGE_LEVEL_DEVICE_S[spec.vendor] + walk_s))
    return max(device, levels * issue_s)


def one_dim_priced(shape: UpdateShape, state_bytes_per_row: float, warp_size: int) -> bool:
    """Whether ``update_seconds`` prices ``shape`` with the one-dim lane update's constants (ONE_DIM_*): tables of
    one dim and an optimizer without a per-element state tile (the one-dim kernel sped the others up far less)."""
    return shape.one_dim and shape.variant == "lane" and state_bytes_per_row < 4 * shape.block_d(warp_size)


def update_seconds(shape: UpdateShape, spec: DeviceSpec, ceil: Ceilings, *, nnz: float, unique: float,
                   row_bytes: float, grad_row_bytes: float, state_bytes_per_row: float,
                   level_issue_s: float = 0.0) -> float:
    """Predicted update (+ permute) + merge time (``level_issue_s``: ``merge_seconds``'s ``issue_s``):
    ``update_launch_seconds`` and ``update_merge_seconds``."""
    return (update_launch_seconds(shape, spec, ceil, nnz=nnz, unique=unique, row_bytes=row_bytes,
                                  grad_row_bytes=grad_row_bytes, state_bytes_per_row=state_bytes_per_row)
            + update_merge_seconds(shape, spec, ceil, nnz=nnz, unique=unique, grad_row_bytes=grad_row_bytes,
                                   level_issue_s=level_issue_s))


def update_copy_fraction(shape: UpdateShape, state_bytes_per_row: float, warp_size: int) -> float:
    """The fraction of the copy rate at which the update ``shape`` moves its bytes: UPDATE_COPY_FRACTION by the
    gradient's element size, ONE_DIM_UPDATE_COPY_FRACTION where its tables are priced as sharing one dim."""
    one_dim = one_dim_priced(shape, state_bytes_per_row, warp_size)
    return (ONE_DIM_UPDATE_COPY_FRACTION if one_dim else UPDATE_COPY_FRACTION)[shape.grad_bytes]


def update_launch_seconds(shape: UpdateShape, spec: DeviceSpec, ceil: Ceilings, *, nnz: float, unique: float,
                          row_bytes: float, grad_row_bytes: float, state_bytes_per_row: float) -> float:
    """Predicted update (+ permute) time, its merge apart: the longest of the bytes at the fitted fraction of the
    copy rate, the programs' dependent round trips over the resident programs (Little's law; at least one program's
    walk over its chunks after its first tile, where the tiles are too few to fill the device) and, for the lane
    update, the issue of its instructions (LANE_INSTRUCTIONS per tile element; ONE_DIM_* for tables of one dim),
    plus the round trips of the state arrays the fitted kernel did not read (or minus those it did and this one does
    not: STATE_ARRAY_TRIPS), never below the bytes that must cross DRAM at the copy rate (``update_dram_floor``),
    plus the rounding."""
    gran = GATHER_GRANULARITY[spec.vendor]
    copy = ceil.copy_bandwidth.value
    moved = update_bytes(shape.variant, nnz=nnz, unique=unique, row_bytes=row_bytes, grad_row_bytes=grad_row_bytes,
                         state_bytes_per_row=state_bytes_per_row, gran=gran)
    tiles = math.ceil(nnz / shape.tile)  # each waits on its round trips, in one program or in turn
    lat = LOADED_LATENCY_S[spec.vendor]
    resident = update_resident(shape, spec)
    # the tiles' round trips over the resident programs, or one program's walk over its chunks (few tiles)
    chain_s = max(tiles / resident, min(shape.chunks, tiles) - 1) * UPDATE_TRIPS[shape.variant] * lat
    block_d = shape.block_d(spec.warp_size)
    arrays = state_arrays(state_bytes_per_row, block_d)
    state_s = (arrays - FIT_STATE_ARRAYS) * STATE_ARRAY_TRIPS[spec.vendor] * tiles * lat / resident
    scan_s = nnz * shape.tile * SCAN_SECONDS_PER_POSITION_TILE if shape.variant == "scan" else 0.0
    elements = tiles * shape.tile * block_d
    one_dim = one_dim_priced(shape, state_bytes_per_row, spec.warp_size)
    instructions = ONE_DIM_LANE_INSTRUCTIONS if one_dim else LANE_INSTRUCTIONS
    issue_fraction = lane_issue_fraction(shape, spec)
    round_s = rounding_seconds(elements, shape.variant, shape.rounding, spec) if shape.rounding else 0.0
    if one_dim and shape.rounding:  # one instruction stream, issue-bound: the rounding is part of it
        instructions += ONE_DIM_ROUNDING_INSTRUCTIONS[shape.rounding]
        issue_fraction, round_s = ONE_DIM_ROUNDED_ISSUE_FRACTION, 0.0
    issue_s = issue_seconds(elements * instructions, issue_fraction, spec) if shape.variant == "lane" else 0.0
    fraction = update_copy_fraction(shape, state_bytes_per_row, spec.warp_size)
    floor = update_dram_floor(moved, nnz=nnz, grad_row_bytes=grad_row_bytes)
    return (max(floor / copy, max(moved / (fraction * copy), chain_s, issue_s) + state_s) + scan_s + round_s
            + UPDATE_TRIPS[shape.variant] * lat)


def update_merge_seconds(shape: UpdateShape, spec: DeviceSpec, ceil: Ceilings, *, nnz: float, unique: float,
                         grad_row_bytes: float, level_issue_s: float = 0.0) -> float:
    """``merge_seconds`` of the merge after the update ``shape`` (its programs' spans, merge chunks and rounding)."""
    block_d = shape.block_d(spec.warp_size)
    return merge_seconds(nnz=nnz, unique=unique, tile=shape.tile * shape.chunks, grad_row_bytes=grad_row_bytes,
                         spec=spec, ceil=ceil, chunks=shape.merge_chunks,
                         rounding=shape.rounding, rounded_block_d=round(block_d), issue_s=level_issue_s)
