"""Analytical time of the persistent Hopper TMA GEMM (``polyrec.kernels.gemm_tma``) on a DeviceSpec.

``polyrec.perfmodel.gemm.estimate`` and ``gemm_footprint.footprint`` hand a config with ``persistent_tma``
here. What differs from the classic kernel's model, from the kernel's code and the H200 probe
(benchmarks/results/gemm_tma_probe_nvidia-h200_2026-11-29.json):

1. **Grid**: ``min(tiles, SMs x ctas_per_sm)`` programs stay resident and walk the output tiles, so
   the busiest SM runs ``rounds = ceil(tiles / (SMs x ctas_per_sm))`` rounds of ``ctas_per_sm``
   tiles: no launch per tile, and one pipeline fill per program (the flattened tile loop prefetches
   the next tile's first K steps during this tile's epilogue).
2. **Main loop**: TMA copies the A / B tiles into shared memory and ``wgmma`` reads them there (no
   address arithmetic, no register staging), at ``TMA_MAINLOOP_EFFICIENCY`` of the measured library
   ceiling. A K-major B costs nothing extra: the descriptor loads [BN, BK] tiles that ``wgmma`` reads
   transposed (the classic kernel's ``KMAJOR_B_WIDE_TILE_FACTOR`` does not apply).
3. **Epilogue**: the cross update's x0 / x come by TMA loads that Triton 3.6 waits on where they are
   issued (TTGIR: ``async_tma_copy_global_to_local`` then ``wait_barrier``), so every epilogue piece
   (two with ``epilogue_subtile``) pays one memory latency per load phase plus its bytes at the SM's
   share of the copy bandwidth, serial after the main loop; only another resident program's main
   loop (``ctas_per_sm`` 2) hides it. The C stores are asynchronous TMA stores, hidden as much as the
   classic kernel's (``EPILOGUE_OVERLAP``).
4. **Footprint**: shared memory holds the A / B stages and the epilogue's staging buffers (C, or x0
   and x, one [BM, BN] or with the subtile [BM, BN/2] each); registers the accumulator and the cross
   update's x0 / x pieces (half of them with the subtile).
5. **Host**: each call builds its TMA descriptors on the host (``TMA_HOST_S``); with no work queued
   ahead the GPU waits for them, so a call takes at least that long.
"""

from __future__ import annotations

import math

from polyrec.hardware.types import Ceilings, DeviceSpec
from polyrec.perfmodel import gemm as base
from polyrec.perfmodel.gemm_footprint import (CROSS_EPILOGUE_REGISTERS_PER_ACC, EPILOGUE_TENSORS, MAX_THREADS_PER_CU,
                                              Footprint, warp_grid)

#: Epilogues ``polyrec.kernels.gemm_tma`` implements (bias, ReLU, the cross update); any other makes
#: a TMA config infeasible.
TMA_EPILOGUES: tuple[str, ...] = ("none", "bias", "relu", "bias_relu", "cross")
#: The constants below (main-loop efficiency, host seconds, held buffers, co-resident overlap) are
#: fitted together over a grid (``benchmarks/gemm_tma_probe.py --fit``) on fold A of
#: benchmarks/results/gemm_tma_probe_nvidia-h200_2026-11-29.json at the H200's calibrated ceilings
#: (benchmarks/results/calibrate_nvidia-h200_2026-11-29.json): the probe's rows alternated within each
#: of its 7 shapes (fold A: even positions; 31 rows the model can run), checked on fold B (the other
#: 30): geomean |error| 4.4% on A, 6.3% on B. Split by shape instead (fold A: cross GEMM alone, cross
#: fwd B2048, cross-U dgrad, top2; fold B: cross fwd B16384 / B65536, top1) the fit gives 0.875 / 110
#: us / 0 / 0 with 5.5% / 6.1%, and these constants 5.7% / 4.6%.
#:
#: Triton's TMA main loop against the vendor library's: fraction of the measured matmul ceiling
#: (``hw calibrate``) its ``wgmma`` steps run at. Grid 0.60-1.00 by 0.025.
TMA_MAINLOOP_EFFICIENCY = 0.90
#: Host seconds per call: building the A, B, C (and x0, x) TMA descriptors
#: (``triton.tools.tensor_descriptor.TensorDescriptor`` objects, encoded by the launcher) and the
#: launch; it shows on the cross fwd B2048 rows, where it bounds every config (0.098-0.127 ms
#: against ~0.03 ms of GPU work and torch.matmul's 0.016 ms). Grid 40-120 us by 10.
TMA_HOST_S = 110e-6
#: Pipeline buffers the matrix unit holds while the next TMA loads are issued (the classic kernel's
#: ``WGMMA_HELD_BUFFERS`` is 1): loads run ``num_stages - 1 - this`` steps ahead. Grid 0 / 1: with 1,
#: every 3-stage config would wait a full memory latency per K step (BM128 x BN128 "cross GEMM alone"
#: predicted ~1.8x its measured 0.458 ms).
TMA_HELD_BUFFERS = 0
#: Fraction of a co-resident program's main loop (``ctas_per_sm`` 2) that hides this program's
#: epilogue. Grid 0 / 0.25 / 0.5 / 0.75 / 1.
TMA_CORESIDENT_OVERLAP = 0.25
#: Main-loop cost of a config whose warpgroups issue ``wgmma`` narrower than 256 columns (each
#: warpgroup's share of BLOCK_N below 256: BM256 x BN128 or BM128 x BN128) against BM128 x BN256,
#: where each warpgroup issues m64n256 instructions. The model without it called the BM256 x BN128 /
#: BM128 x BN256 twins equal (or BM256 ahead by wave quantization) where the H200 measured BN256
#: 5-10% faster in every large shape: the median over 44 twin pairs (TMA BM256 x BN128 and BM128 x
#: BN128 w4 against BM128 x BN256, shapes over 1e10 MAC, skinny shapes left out) of measured ratio
#: over predicted ratio in the sweep at 8cd3e5a (``git show 81782fd:benchmarks/results/
#: gemm_selection_nvidia-h200_2026-11-30.json``) is 1.077. Checked offline (gemm_model_check.py) on
#: the next sweep (a184b6c, another machine): 4 dgrad shapes now pick BM128 x BN256, 4-6% faster
#: measured there, no pick got slower.
TMA_NARROW_WGMMA_FACTOR = 1.075
#: Widest ``wgmma`` instruction: m64n256k16 (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply").
WGMMA_MAX_N = 256
#: Registers per thread besides the accumulator and the epilogue's pieces: descriptors, tile
#: indices, loop state (no per-element pointers: TMA computes addresses). From the sm_90 compiles of
#: the space (``tests/test_gemm_compile.py``, none epilogue): accumulator + 26-28; 32 keeps a margin.
TMA_BASE_REGISTERS = 32
#: Shared memory besides the operand stages and epilogue buffers: the pipeline's mbarriers and the
#: layout-conversion scratch. From the probe's OutOfResources reports: BM128 BN256 BK64 s3 cross
#: asked 279576 B = 3 x 384 x 64 x 2 + 2 x 128 x 256 x 2 + 1048 (its subtiled s4 twin: + 48).
TMA_EXTRA_SMEM_BYTES = 1048


def store_block_n(cfg: base.TileConfig) -> int:
    """Columns of one epilogue piece (``TmaGemmConfig.store_block_n``)."""
    return cfg.block_n // 2 if cfg.epilogue_subtile else cfg.block_n


def footprint(cfg: base.TileConfig, dtype: str, spec: DeviceSpec, epilogue: str = "none") -> Footprint:
    """Shared memory, registers and resident programs of one TMA config, and whether it fits."""
    elem = 2 if dtype in ("bf16", "fp16") else 4
    reads = EPILOGUE_TENSORS[epilogue][0]
    piece = cfg.block_m * store_block_n(cfg)
    smem = (cfg.num_stages * (cfg.block_m + cfg.block_n) * cfg.block_k * elem
            + max(1, reads) * piece * elem + TMA_EXTRA_SMEM_BYTES)
    threads = cfg.num_warps * spec.warp_size
    accumulator = cfg.block_m * cfg.block_n // threads
    held = CROSS_EPILOGUE_REGISTERS_PER_ACC[spec.vendor] * (piece // threads) * min(2, reads) / 2
    regs = accumulator + int(held) + TMA_BASE_REGISTERS
    problems = []
    if epilogue not in TMA_EPILOGUES:
        problems.append(f"the TMA kernel has no {epilogue} epilogue")
    if spec.arch != "sm_90" or elem != 2:
        problems.append(f"the TMA kernel runs bf16 / fp16 on sm_90 only, not {dtype} on {spec.arch}")
    if smem > spec.smem_per_block:
        problems.append(f"shared memory {smem} B > {spec.smem_per_block} B per block")
    if regs > spec.max_registers_per_thread:
        problems.append(f"~{regs} registers per thread > {spec.max_registers_per_thread} (would spill)")
    if cfg.num_warps % 4 or cfg.block_m % 64:
        problems.append("wgmma needs whole warpgroups and 64-row multiples")
    programs = min(spec.smem_per_cu // smem, spec.registers_per_cu // (regs * threads),
                   MAX_THREADS_PER_CU // threads)
    if programs == 0 and not problems:
        problems.append("no program fits one SM")
    return Footprint(smem_bytes=smem, registers=regs, register_limit=spec.max_registers_per_thread,
                     programs_per_cu=max(0, programs), instruction="wgmma", problems=tuple(problems))


def _epilogue_seconds(cfg: base.TileConfig, p: base.GemmProblem, spec: DeviceSpec, ceil: Ceilings,
                      resident: int) -> tuple[float, float]:
    """(loads, stores) of one round's epilogues on one SM: loads wait one latency per phase per piece
    plus their bytes at the SM's share of the copy bandwidth; stores move their bytes alone (async)."""
    reads, writes, phases = EPILOGUE_TENSORS[p.epilogue]
    pieces = 2 if cfg.epilogue_subtile else 1
    tile_bytes = resident * cfg.block_m * cfg.block_n * p.c_bytes
    share = ceil.copy_bandwidth.value / spec.compute_units
    loads = pieces * phases * base.MEMORY_LATENCY_S[spec.vendor] + tile_bytes * reads / share
    return loads, tile_bytes * (1 + writes) / share


def estimate(p: base.GemmProblem, cfg: base.TileConfig, spec: DeviceSpec, ceil: Ceilings, *,
             efficiency: float = TMA_MAINLOOP_EFFICIENCY, host_s: float = TMA_HOST_S,
             held_buffers: int = TMA_HELD_BUFFERS, coresident: float = TMA_CORESIDENT_OVERLAP) -> base.GemmEstimate:
    """Predicted seconds of ``p`` with the TMA config ``cfg`` (``efficiency``, ``host_s``,
    ``held_buffers`` and ``coresident`` override the fitted constants, for the fit)."""
    fp = footprint(cfg, p.dtype, spec, p.epilogue)
    if not fp.fits:
        return base.GemmEstimate(seconds=math.inf, footprint=fp, parts={})
    rated = base.rate_dtype(p.dtype, spec)
    clock = ceil.matmul_flops[rated].value * (spec.boost_clock_hz / spec.peak_flops[rated]) * efficiency
    mma, smem = base._step_cycles(cfg, p, spec, fp)
    operand_bw = ceil.l2_bandwidth.value * base.L2_OPERAND_OVER_PROBE[spec.vendor]
    port = (cfg.block_m + cfg.block_n) * cfg.block_k * p.in_bytes / (operand_bw / spec.compute_units / clock)
    step = max(mma, smem, port) + base.STEP_OVERHEAD_CYCLES
    if cfg.block_n // warp_grid(cfg, fp.instruction)[1] < WGMMA_MAX_N:
        step *= TMA_NARROW_WGMMA_FACTOR
    tiles = math.ceil(p.m / cfg.block_m) * math.ceil(p.n / cfg.block_n)
    together = min(cfg.ctas_per_sm, fp.programs_per_cu)  # programs beyond what fits wait their turn
    slots = spec.compute_units * together
    rounds = math.ceil(tiles / slots)
    resident = min(together, math.ceil(min(tiles, slots) / spec.compute_units))
    latency = base.MEMORY_LATENCY_S[spec.vendor]
    in_flight = max(1, cfg.num_stages - 1 - held_buffers)
    main = math.ceil(p.k / cfg.block_k) * max(resident * step / clock, latency / in_flight)
    loads, stores = _epilogue_seconds(cfg, p, spec, ceil, resident)
    epilogue = loads + (1 - base.EPILOGUE_OVERLAP) * min(main, stores) + max(0.0, stores - main)
    hidden = min(epilogue, coresident * main * (resident - 1) / resident)  # behind the other programs' main loops
    compute = latency + rounds * (main + epilogue - hidden)  # + one pipeline fill per program
    memory = base._memory_seconds(cfg, p, spec, ceil, min(tiles, slots))
    gpu = max(compute, *memory.values()) + base.KERNEL_OVERHEAD_S
    parts = {"compute": compute, "mma_cycles": mma, "smem_cycles": smem, "port_cycles": port,
             "epilogue_loads": loads, "epilogue_stores": stores, "rounds": rounds, "resident": resident,
             "gpu": gpu, "host": host_s} | memory
    return base.GemmEstimate(seconds=max(gpu, host_s), footprint=fp, parts=parts)
