"""Zero-warmup launch configs of the embedding kernels, chosen by ``polyrec.perfmodel.tbe``.

No timed runs: each candidate's time is predicted from the problem shape, the device spec and the
ceilings (``polyrec.hardware.calibrate.ceilings``), and the fastest prediction wins. The warp count
follows from the tile: about ELEMS_PER_THREAD tile elements per thread (warp_size 32 or 64, so AMD's
wave64 halves the warps of the same tile).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from polyrec.hardware.calibrate import ceilings
from polyrec.hardware.types import Ceilings, DeviceSpec
from polyrec.perfmodel.tbe import (LANE_PERMUTE_HOST_S, MERGE_LEVEL_HOST_S, UpdateShape, update_fits_registers,
                                   update_seconds)
from polyrec.perfmodel.tbe_lookup import ForwardTile, LoopTrips, forward_seconds

if TYPE_CHECKING:
    import torch

#: Tile elements (rows in flight x BLOCK_D) a forward program may load per iteration.
FORWARD_TILE_ELEMS: tuple[int, ...] = (2048, 4096, 8192)
#: Ids per bag loaded per iteration (the HOTS axis): 1 suits one-hot features, 16 long bags.
FORWARD_HOTS: tuple[int, ...] = (1, 4, 16)
#: Tile elements (pieces x BLOCK_D) of the update kernel.
UPDATE_TILE_ELEMS: tuple[int, ...] = (2048, 4096, 8192)
#: Target fp32 tile elements per thread; sets the warp count (keeps registers well under 255).
ELEMS_PER_THREAD = 16
MAX_WARPS = 8
#: Forward tile elements per thread: 32 (the H200 sweep, benchmarks/results/tbe_breakdown_nvidia-h200_2026-11-29,
#: has the 2048/4096/8192-element tiles fastest at 2/4/8 warps).
FORWARD_ELEMS_PER_THREAD = 32
#: Update-kernel elements per thread on wave64: with 16, gfx942 compiles of 8-16 pieces spill SGPRs
#: (to VGPR lanes); with 4 they compile clean (checked by tests/test_tbe_compile.py).
UPDATE_ELEMS_PER_THREAD_WAVE64 = 4
#: Positions per program of the sequence lookup, and its tile elements.
SEQUENCE_TILE_ELEMS = 4096
#: Unique rows / ids assumed when the selector is not told (MLPerf uniform: 10.21M of 14.02M ids,
#: benchmarks/results/tbe_nvidia-h200_2026-11-29.json); sets the merge's share of crossing runs.
UNIQUE_FRACTION = 0.73


#: Most selections ``remembered`` keeps (then it starts again): the planner asks a few hundred distinct
#: ones per plan (MLPerf on 64 GPUs: 360 forward and 330 update selections among 1688 and 865 asked).
REMEMBERED_LIMIT = 65536
_REMEMBERED: dict[tuple, tuple[DeviceSpec, object]] = {}
_T = TypeVar("_T")


def _ceilings_key(ceil: Ceilings) -> tuple:
    """The numbers of ``ceil`` the models read, hashable."""
    return (ceil.copy_bandwidth.value, ceil.l2_bandwidth.value, ceil.launch_latency.value,
            tuple(sorted((dtype, c.value) for dtype, c in ceil.matmul_flops.items())))


def remembered(kind: str, spec: DeviceSpec, ceil: Ceilings, args: tuple, select: Callable[[], _T]) -> _T:
    """``select()``, made once per (``kind``, device, ceilings, ``args``) in this process: a selection is a
    pure function of those, and the planner asks for the same shard's again for every candidate plan.
    Keyed by the spec's identity (kept alive with the answer) and the ceilings' values, so a new calibration
    selects afresh. Forgotten by ``clear_cache``."""
    key = (kind, id(spec), _ceilings_key(ceil), args)
    entry = _REMEMBERED.get(key)
    if entry is None:
        if len(_REMEMBERED) >= REMEMBERED_LIMIT:
            _REMEMBERED.clear()
        entry = (spec, select())
        _REMEMBERED[key] = entry
    return entry[1]  # type: ignore[return-value]


def clear_cache() -> None:
    """Forget every remembered selection (tests that change the model's constants; a fresh process's timing)."""
    _REMEMBERED.clear()


@dataclass(frozen=True, kw_only=True, slots=True)
class ForwardConfig:
    bags: int  # samples per program
    hots: int  # ids per bag per loop iteration
    num_warps: int


#: Update-kernel variants (``tbe_backward``): "scan" (``update_kernel``: perm -> source row -> column ->
#: gradient chain, warps along the tile) and "lane" (``permute_kernel`` + ``lane_update_kernel``: two
#: round trips, warps along BLOCK_D only, the segmented scan inside each lane).
UPDATE_VARIANTS: tuple[str, ...] = ("scan", "lane")
#: Sorted positions per program of the lane variant: TILE * VEC fp32 gradient values per lane.
LANE_TILES: tuple[int, ...] = (8, 16, 32)
#: Elements per lane vector access in the lane kernel's warp count (16 B of fp32; narrower types keep 4 so the
#: gradient and the weight loads share one layout).
LANE_VEC = 4
#: Tiles a lane-update program takes one after another (carrying the open run): the merge then sees
#: 2 pieces per LANE_CHUNKS * TILE positions. 8: on Zipf-skewed MLPerf ids the one-tile programs left
#: a piece at almost every tile end and the merge took 2.3 ms of an 8.7 ms backward
#: (tbe_breakdown_fp32_skewed_nvidia-h200_2026-11-29); fp32 rows, update + merge 7.38 -> 6.56 ms
#: uniform, 7.66 -> 6.00 skewed (against tbe_breakdown_fp32*_onetile_*). For every row precision and
#: gradient dtype since the twenty-third session. Before the sorted keys were padded and the register
#: cap (LANE_MAX_REGISTERS) existed, stochastic rounding (fp16 / bf16 rows) ran the chunked update at
#: 10.06 ms against 6.50 for one tile (tbe_breakdown_fp16_chunks{1,8}_*), so those rows kept one tile:
#: since the sixteenth session only where the tables' dims differ. Re-measured there (H200, step of
#: forward + backward + update, one tile -> 8 tiles at the cap the selector gives, uncapped for Adam;
#: benchmarks/results/tbe_shapes_2026-12-01/): 8 random cases of `tbe_shapes.py` with mixed dims,
#: fp16 / bf16 rows and 7-37M ids all ran faster, by 2-18% (seed 1 cases 12, 1, 4: 7.34 -> 7.16,
#: 12.46 -> 11.21, 6.96 -> 5.75 ms; seeds 2-5, drawn after the change was proposed: 17.70 -> 15.75,
#: 8.14 -> 7.18, 5.89 -> 4.80, 4.72 -> 4.01, 4.33 -> 3.62 ms). A bf16 gradient takes the chunks too:
#: full MLPerf tables, uniform ids, lane update + merge 4.14 + 0.88 ms with one tile per program ->
#: 4.15 + 0.19 with 8 (benchmarks/results/tbe_lane_ab_2026-11-30/s11c_*, at e041e0d).
LANE_CHUNKS = 8
#: Register cap per thread of the chunked lane update on NVIDIA (ptxas ``maxnreg``; AMD: none): 152 holds
#: 13 one-warp programs per SM where ptxas's own 168 (bf16 gradient: 176) holds 12 (11), and the kernel
#: waits on its loads more than it issues. Measured on the H200 at e041e0d (benchmarks/results/
#: tbe_lane_ab_2026-11-30/s11c_*, two rounds each): fp32 gradient 4.372 -> 4.325 ms (144: 4.355; ptxas
#: then recomputes more), Zipf ids 3.034 -> 2.913, bf16 gradient with 8-tile chunks 4.216 at 168 -> 4.150;
#: Adagrad (one per-element state tile; tables capped at 4M rows) 5.185 -> 4.753 (s11f_*). Not for Adam:
#: its two state tiles ran 6.806 ms uncapped, 9.715 capped (LANE_CAP_MAX_STATE_TILES). No spills at 152
#: for fp32 rows at D128 (cuobjdump's stack frame); with weight decay and per-id scales the bf16-row and
#: D512 builds spill (``tbe_compile.LANE_CAP_SPILLS``, untimed).
LANE_MAX_REGISTERS = {"nvidia": 152}
#: LANE_MAX_REGISTERS of the lane update of tables that share one dim (``tbe_backward.tile_rows``'s
#: ONE_DIM: no table looked up, 1042 -> 676 instructions per tile at 152 registers, cuda:90). 128 (ptxas
#: takes 124, 16 programs per SM): measured on the H200 in one call, full MLPerf tables, row-wise Adagrad
#: (benchmarks/results/tbe_lane_ab_2026-11-30/s16c_*), lane update at 152 / 128 / 112 / 96: fp32 gradient
#: 4.088 / 4.088 / 4.240 / 5.19 ms (the kernel before, at 152: 4.317), bf16 gradient 3.719 / 3.539 / - /
#: 4.092 (4.177), Zipf ids 2.594 / 2.438 / - / - (2.936). Below 128 ptxas recomputes more than the warps
#: gain. SGD as row-wise Adagrad (tables capped at 4M rows, bf16 gradient, s16d_*: 2.553 at 152, 2.264 at
#: 128); not Adagrad, whose state tile wants the registers (4.399 at 152, 4.595 at 128): it keeps
#: LANE_MAX_REGISTERS. No spills at 128 for fp32 rows, nor for bf16 rows without weight decay and per-id
#: scales (with weight decay 40 B, with both 104 B: ``tbe_compile.LANE_CAP_SPILLS``). 16-bit rows against
#: 152, where no build spills (benchmarks/results/lane_cap_2026-12-03/, lane update): bf16 2.762 -> 2.774
#: ms, fp16 2.884 -> 3.289; with weight decay bf16 3.133 -> 3.400, fp16 3.393 -> 3.567. Re-tried at
#: ce59424 (697 / 714 instructions per trip against 625): 128 -> 104 / 96 lane update 4.002 -> 4.170 /
#: 4.772 ms, fp32 gradient (benchmarks/results/lane_cap_probe_2026-12-02/). That session read "no spills"
#: at 104 and 96 from a harness that took cuobjdump's LOCAL column (always 0) for spills; the stack frame
#: says they spill 24 / 72 B per thread without weight decay or scales (136 / 256 B with both), which the
#: slowdown includes.
LANE_MAX_REGISTERS_ONE_DIM = {"nvidia": 128}
#: Most per-element fp32 state tiles (Adagrad 1, Adam 2) of an update that takes the register cap.
LANE_CAP_MAX_STATE_TILES = 1
#: Tiles of LEVEL_TILE partial slots one merge-level program may take in turn, carrying open runs
#: (``tbe_merge.merge_level_kernel``'s CHUNKS): 1 = one tile per program (11 levels on the MLPerf
#: step with one-tile lane programs); 8 = the walk of 691c40d (5 levels). The selector takes the one
#: the model prices lower (``merge_seconds``; on a step the planner predicts host-bound, with each level's
#: host issue, ``MERGE_LEVEL_HOST_S``: 8 there, 1 on device time alone under 8-tile lane programs).
#: In one process on the H200 (benchmarks/results/host_side_probes_2026-12-01_s21/merge_ab_0d55bb7.json,
#: 1 -> 8): dcnv2-small 16384 graphed (host-bound) 3.200 -> 2.934 ms per step; MLPerf DLRM-DCNv2 16384
#: graphed (device-bound) 5.083 -> 5.135, 65536 eager 17.93 -> 18.25. Measured in one process
#: (tbe_breakdown_*_mergeab_nvidia-h200_2026-11-30 at 598c161), merge kernels per step 1 -> 8:
#: bf16 output gradient 2.11 -> 1.55 ms uniform, 3.30 -> 2.61 skewed; fp32 0.31 -> 0.33 uniform,
#: 0.48 -> 0.47 skewed (whole step 10.17 -> 9.65, 9.63 -> 8.97, 9.38 -> 9.40, 8.18 -> 8.17 ms).
#: ``tbe_compile`` compiles each.
MERGE_CHUNK_CHOICES: tuple[int, ...] = (1, 8)


@dataclass(frozen=True, kw_only=True, slots=True)
class UpdateConfig:
    """Launch config of the fused update: kernel variant (UPDATE_VARIANTS), tile, warps, and the merge
    levels' tiles per program."""

    tile: int  # sorted positions per tile (per program for "scan")
    num_warps: int
    variant: str = "lane"  # one of UPDATE_VARIANTS
    chunks: int = 1  # "lane": tiles one program takes in turn, carrying the open run's sum
    merge_chunks: int = 1  # tiles of LEVEL_TILE slots one merge-level program takes in turn (MERGE_CHUNK_CHOICES)
    max_registers: int | None = None  # "lane" on NVIDIA: register cap per thread (ptxas maxnreg); None: ptxas's

    @property
    def span(self) -> int:
        """Sorted positions per program."""
        return self.tile * self.chunks

    def __post_init__(self) -> None:
        if self.variant not in UPDATE_VARIANTS:
            raise ValueError(f"UpdateConfig.variant must be one of {UPDATE_VARIANTS}, got '{self.variant}'")
        if self.tile < 2 or self.tile & (self.tile - 1) or self.num_warps < 1:
            raise ValueError(f"UpdateConfig: tile must be a power of two >= 2 and num_warps >= 1, got {self}")
        if self.chunks < 1 or self.merge_chunks < 1:
            raise ValueError(f"UpdateConfig: chunks and merge_chunks must be >= 1, got {self}")


@functools.cache
def selection_spec(device: torch.device) -> DeviceSpec:
    """The device spec configs are chosen for (detected once per device); on the CPU (interpreter) the
    H200's stands in."""
    from polyrec.hardware.catalog import get_device
    from polyrec.hardware.detect import detect

    if device.type == "cuda":
        spec = detect(device.index or 0).spec
        if spec.triton is not None:
            return spec
    return get_device("H200")


def warps_for(tile_elems: int, warp_size: int, elems_per_thread: int = ELEMS_PER_THREAD) -> int:
    return max(1, min(MAX_WARPS, tile_elems // (warp_size * elems_per_thread)))


def forward_candidates(block_d: int, warp_size: int) -> list[ForwardConfig]:
    """Every forward config the selector may return for a BLOCK_D. Tiles whose warps outnumber their
    bags (the warps split a bag's ids, summed across warps through shared memory) are left out where
    others exist: in 15 H200 sweeps of every candidate (MLPerf tables under uniform and power-law ids,
    fp32 and fp16; dims 8-256 at 16-id bags; 12 random lookups) none was the fastest, and the best of
    them took 1.19-4.21x the fastest's time (benchmarks/results/gather_rate_2026-12-01/)."""
    out = []
    for tile in FORWARD_TILE_ELEMS:
        for hots in FORWARD_HOTS:
            bags = tile // (hots * block_d)
            if bags >= 1 and bags * hots * block_d == tile:
                out.append(ForwardConfig(bags=bags, hots=hots,
                                         num_warps=warps_for(tile, warp_size, FORWARD_ELEMS_PER_THREAD)))
    whole = [c for c in out if c.num_warps <= c.bags]
    if whole:
        return whole
    return out or [ForwardConfig(bags=1, hots=1, num_warps=warps_for(block_d, warp_size))]  # rows past the tiles


def scan_candidates(block_d: int, warp_size: int) -> list[UpdateConfig]:
    """The "scan" variant's configs (the previous default): tiles of UPDATE_TILE_ELEMS elements."""
    per_thread = UPDATE_ELEMS_PER_THREAD_WAVE64 if warp_size == 64 else ELEMS_PER_THREAD
    tiles = UPDATE_TILE_ELEMS[:-1] if warp_size == 64 else UPDATE_TILE_ELEMS  # gfx942: 8192 spills VGPRs
    out = [UpdateConfig(tile=tile // block_d, num_warps=warps_for(tile, warp_size, per_thread), variant="scan",
                        merge_chunks=m) for tile in tiles if tile >= 2 * block_d for m in MERGE_CHUNK_CHOICES]
    return out or [UpdateConfig(tile=2, num_warps=warps_for(2 * block_d, warp_size), variant="scan",
                                merge_chunks=m) for m in MERGE_CHUNK_CHOICES]


def lane_warps(block_d: int, warp_size: int) -> int:
    """Warps of the lane variant: along BLOCK_D only (one LANE_VEC-wide column block per lane)."""
    return max(1, block_d // (warp_size * LANE_VEC))


def lane_register_cap(vendor: str, chunks: int, tile: int, state_tiles: int, one_dim: bool = False) -> int | None:
    """``UpdateConfig.max_registers`` of a lane update: LANE_MAX_REGISTERS (tables of one dim without a
    per-element state tile: LANE_MAX_REGISTERS_ONE_DIM) for the measured shapes (TILE 8 in chunks, at most
    LANE_CAP_MAX_STATE_TILES per-element state tiles, on the vendors listed), else the compiler's choice."""
    measured = chunks > 1 and tile == LANE_TILES[0] and state_tiles <= LANE_CAP_MAX_STATE_TILES
    caps = LANE_MAX_REGISTERS_ONE_DIM if one_dim and state_tiles == 0 else LANE_MAX_REGISTERS
    return caps.get(vendor) if measured else None


def lane_candidates(block_d: int, warp_size: int, vendor: str = "nvidia", state_tiles: int = 0,
                    one_dim: bool = False) -> list[UpdateConfig]:
    tiles = LANE_TILES[:-1] if warp_size == 64 else LANE_TILES  # wave64 TILE 32: Adam spills VGPRs on gfx942/950
    chunks = LANE_CHUNKS
    return [UpdateConfig(tile=t, num_warps=lane_warps(block_d, warp_size), variant="lane", chunks=chunks,
                         merge_chunks=m, max_registers=lane_register_cap(vendor, chunks, t, state_tiles, one_dim))
            for t in tiles for m in MERGE_CHUNK_CHOICES]


def update_candidates(block_d: int, warp_size: int, vendor: str = "nvidia", state_tiles: int = 0,
                      one_dim: bool = False) -> list[UpdateConfig]:
    """Every update config of both variants, for rows of any precision, before the register fit
    (``fitting_update_candidates``); ``vendor``: the device's (register caps are NVIDIA's);
    ``state_tiles``: per-element fp32 state tiles (0, 1, 2); ``one_dim``: every table has the same dim
    (the lane update then looks no table up: ``TableBatchedEmbedding.one_dim``). The same for either
    gradient dtype."""
    return (scan_candidates(block_d, warp_size)
            + lane_candidates(block_d, warp_size, vendor, state_tiles, one_dim))


def fitting_update_candidates(block_d: int, spec: DeviceSpec, state_tiles: int = 0,
                              one_dim: bool = False) -> list[UpdateConfig]:
    """``update_candidates`` whose tile fits the registers (``update_fits_registers``): the configs
    ``select_update`` prices, and ``tbe_compile.compile_jobs`` builds."""
    return [c for c in update_candidates(block_d, spec.warp_size, spec.vendor, state_tiles, one_dim)
            if update_fits_registers(UpdateShape(variant=c.variant, tile=c.tile, num_warps=c.num_warps,
                                                 elems_per_thread=_elems_per_thread(c, block_d, spec)), spec)]


def _elems_per_thread(cand: UpdateConfig, block_d: int, spec: DeviceSpec) -> float:
    """fp32 gradient-tile elements one thread of ``cand`` holds."""
    return cand.tile * block_d / (cand.num_warps * spec.warp_size)


def staged_loads(cfg: ForwardConfig) -> bool:
    """Whether the pooled forward stages its loads (``pooled_forward_kernel``'s STAGED) under ``cfg``:
    with HOTS = 1. ptxas interleaves each row's id load, row load and add, so a thread's rows make
    one round trip after another: 6 / 10 / 18 dependent steps per iteration for 16 x 1 at 4 / 2 / 1
    warps, against 4-8 for the HOTS = 4 tiles (cuda:90 SASS, counted by the eighth session). Measured
    on the H200 (tbe_forward_groups_nvidia-h200_2026-11-30 at 718558e, power-law ids): staging made
    every HOTS = 1 candidate faster in all three cases (16 x 1, 2 warps: world 1 1.53 -> 1.22 ms, world-2
    rank 0 1.52 -> 1.17, rank 1 1.55 -> 1.30) and every HOTS = 4 and 16 one slower (4 x 4: 1.16 -> 1.19,
    0.98 -> 1.02, 1.33 -> 1.37 ms). The forward model does not price it (see docs/tbe.md)."""
    return cfg.hots == 1


def forward_config_seconds(spec: DeviceSpec, ceil: Ceilings, cfg: ForwardConfig, *, batch_size: int,
                           bag_lengths: list[float], block_d: int, row_bytes: int, vec: int, hit_fraction: float,
                           loop_trips: LoopTrips | None) -> float:
    """``forward_seconds`` of the pooled forward under ``cfg`` (its tile of ``block_d`` elements of
    ``row_bytes`` / ``block_d`` bytes), at this tile's entry of ``loop_trips`` where given."""
    tile = ForwardTile(bags=cfg.bags, hots=cfg.hots, block_d=block_d, num_warps=cfg.num_warps, vec=vec,
                       elem_bytes=row_bytes // block_d)
    trips = None if loop_trips is None else loop_trips[(cfg.bags, cfg.hots)]
    return forward_seconds(tile, spec, ceil, batch_size=batch_size, bag_lengths=bag_lengths, row_bytes=row_bytes,
                           out_bytes=4, hit_fraction=hit_fraction, loop_trips=trips)


def select_forward(spec: DeviceSpec, *, batch_size: int, num_features: int, mean_bag: float, block_d: int,
                   row_bytes: int, vec: int, bag_lengths: list[float] | None = None,
                   hit_fraction: float = 0.0, loop_trips: LoopTrips | None = None,
                   ceil: Ceilings | None = None) -> ForwardConfig:
    """The forward (and sort-key) config with the least predicted time
    (``polyrec.perfmodel.tbe_lookup.forward_seconds``).

    ``bag_lengths``: mean bag length of each feature (HOTS > a feature's bags wastes lanes, long bags
    want HOTS); without it every feature is taken at ``mean_bag``. ``row_bytes``: ``block_d`` elements;
    ``vec``: the kernel's VEC (``tbe_forward.vector_width``). ``hit_fraction``: the row reads
    expected to hit L2 (``polyrec.perfmodel.tbe_reads.least_hit_fraction``). ``loop_trips``: per
    (BAGS, HOTS) tile, each feature's loop iterations per program on the batch at hand
    (``tbe_forward.loop_trips``; ragged bags loop over their program's longest); None: bags of their mean.
    ``ceil``: the device's ceilings (default: ``ceilings(spec)``, which reads the stored calibration).
    """
    lengths = list(bag_lengths) if bag_lengths is not None else [mean_bag] * num_features
    ceil = ceil or ceilings(spec)
    best, best_s = None, math.inf
    for cand in forward_candidates(block_d, spec.warp_size):
        seconds = forward_config_seconds(spec, ceil, cand, batch_size=batch_size, bag_lengths=lengths,
                                         block_d=block_d, row_bytes=row_bytes, vec=vec, hit_fraction=hit_fraction,
                                         loop_trips=loop_trips)
        if seconds < best_s:
            best, best_s = cand, seconds
    return best


#: Sort keys below this (and the invalid key) fit int32: fewer radix passes and bytes than int64
#: (``tbe_fused_backward.KeyPlan.key_dtype``).
INT32_KEY_LIMIT = 2**31 - 1
#: Predicted device seconds of a module's update at its widest BLOCK_D from which tables of mixed dims
#: take one update launch per BLOCK_D group (``groups_pay``). Fitted on one H200 (in-process A/B of 15
#: mixed-dims ``tbe_shapes`` cases, ``benchmarks/results/tbe_groups_ab_2026-12-01/``): the steps predicted at
#: 0.13-1.88 ms of update waited on the host (steps of 1.9-2.3 ms, 0.2-2.2 ms of kernels) and lost 0-19%
#: grouped, each of the G - 1 more launches adding ~0.1 ms of host time; those predicted at 4.4-19.4 ms won
#: 7-35%. 2 ms is about the lookup step's own host time there.
GROUP_MIN_UPDATE_S = 2e-3


def select_update(spec: DeviceSpec, *, nnz: int, block_d: int, row_bytes: int, state_tiles: int,
                  unique: float | None = None, rounding: str = "", grad_bytes: int = 4,
                  one_dim: bool = False, host_bound: bool = False, ceil: Ceilings | None = None) -> UpdateConfig:
    """The update config (variant, tile, warps, merge chunks) with the least predicted time
    (``polyrec.perfmodel.tbe.update_seconds``; ``host_bound``: the step waits on the host, so each merge
    level takes at least its host issue, ``MERGE_LEVEL_HOST_S``, ties broken by device time);
    ``state_tiles``: per-element fp32 state tiles (0, 1, 2);
    ``rounding``: "fp16" / "bf16" rows, updates rounded stochastically ("" fp32 rows); ``grad_bytes``: the output
    gradient's element size (the module's output dtype); ``one_dim``: every table has the same dim;
    ``ceil``: as ``select_forward``'s."""
    return _best_update(spec, nnz=nnz, block_d=block_d, row_bytes=row_bytes, state_tiles=state_tiles, unique=unique,
                        rounding=rounding, grad_bytes=grad_bytes, one_dim=one_dim, host_bound=host_bound,
                        ceil=ceil)[0]


def groups_pay(spec: DeviceSpec, *, nnz: int, groups: int, total_rows: int, block_d: int, row_bytes: int,
               state_tiles: int, rounding: str = "", grad_bytes: int = 4, host_bound: bool = False,
               ceil: Ceilings | None = None) -> bool:
    """Whether a module of ``total_rows`` rows whose dims take ``groups`` BLOCK_D should update each dim
    group by a launch of its own (``TableBatchedEmbedding.key_plan``, ``planner.shard_cost.dim_groups``): where
    the step does not wait on the host, the groups' keys (up to ``groups * total_rows``) need no wider
    integers than the rows' (int64 keys: a sort of twice the key bytes), and the update of ``nnz`` ids at
    the widest BLOCK_D (``block_d``, as ``select_update`` prices it) is predicted to take at least
    ``GROUP_MIN_UPDATE_S`` of device time."""
    if host_bound or groups * total_rows >= INT32_KEY_LIMIT > total_rows:
        return False
    seconds = _best_update(spec, nnz=nnz, block_d=block_d, row_bytes=row_bytes, state_tiles=state_tiles,
                           rounding=rounding, grad_bytes=grad_bytes, ceil=ceil)[1]
    return seconds >= GROUP_MIN_UPDATE_S


def _best_update(spec: DeviceSpec, *, nnz: int, block_d: int, row_bytes: int, state_tiles: int,
                 unique: float | None = None, rounding: str = "", grad_bytes: int = 4,
                 one_dim: bool = False, host_bound: bool = False,
                 ceil: Ceilings | None = None) -> tuple[UpdateConfig, float]:
    """``select_update``'s config and its predicted device seconds."""
    ceil = ceil or ceilings(spec)
    args = (nnz, block_d, row_bytes, state_tiles, unique, rounding, grad_bytes, one_dim, host_bound)
    return remembered("update", spec, ceil, args, functools.partial(
        _price_updates, spec, ceil, nnz=nnz, block_d=block_d, row_bytes=row_bytes, state_tiles=state_tiles,
        unique=unique, rounding=rounding, grad_bytes=grad_bytes, one_dim=one_dim, host_bound=host_bound))


def _price_updates(spec: DeviceSpec, ceil: Ceilings, *, nnz: int, block_d: int, row_bytes: int, state_tiles: int,
                   unique: float | None, rounding: str, grad_bytes: int, one_dim: bool,
                   host_bound: bool) -> tuple[UpdateConfig, float]:
    """Every fitting update candidate priced: the fastest and its predicted device seconds."""
    unique = nnz * UNIQUE_FRACTION if unique is None else unique
    state_row = 4 * block_d * state_tiles if state_tiles else 4
    best, best_s = None, (math.inf, math.inf)
    for cand in fitting_update_candidates(block_d, spec, state_tiles, one_dim):
        shape = UpdateShape(variant=cand.variant, tile=cand.tile, num_warps=cand.num_warps, chunks=cand.chunks,
                            merge_chunks=cand.merge_chunks, rounding=rounding, grad_bytes=grad_bytes,
                            one_dim=one_dim, elems_per_thread=_elems_per_thread(cand, block_d, spec),
                            state_tiles=state_tiles, max_registers=cand.max_registers)
        priced = functools.partial(update_seconds, shape, spec, ceil, nnz=nnz, unique=unique, row_bytes=row_bytes,
                                   grad_row_bytes=grad_bytes * block_d, state_bytes_per_row=state_row)
        device = priced()
        seconds = (_host_bound_seconds(cand, priced) if host_bound else device, device)
        if seconds < best_s:
            best, best_s = cand, seconds
    return best, best_s[1]


def _host_bound_seconds(cand: UpdateConfig, priced: Callable[..., float]) -> float:
    """The update's price on a step that waits on the host: each merge level takes at least its host issue
    (``MERGE_LEVEL_HOST_S``), and the lane update's permute pass adds its own (``LANE_PERMUTE_HOST_S``)."""
    permute_s = LANE_PERMUTE_HOST_S if cand.variant == "lane" else 0.0
    return priced(level_issue_s=MERGE_LEVEL_HOST_S) + permute_s


def sequence_positions(block_d: int) -> int:
    return max(1, SEQUENCE_TILE_ELEMS // block_d)
