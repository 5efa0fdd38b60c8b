"""Analytical time of a tiled GEMM on a DeviceSpec, from first principles (no GPU, no torch).

One program computes a ``block_m x block_n`` tile of C over a ``K / split_k`` slice, stepping
``block_k`` at a time through a software pipeline of ``num_stages`` buffers. The model follows one
main-loop step of one program through the resources it uses, then the grid over the device:

1. **Footprint** (``gemm_footprint.footprint``): shared memory / LDS of the pipeline buffers,
   registers per thread (accumulator tile + operand fragments + prefetch registers on AMD), hence
   programs per CU.
2. **Step time on one CU**, in clock cycles: the matrix unit (``2 BM BN BK`` FLOP at the CU's rate for
   the instruction Triton emits: Hopper ``wgmma`` or ``mma.sync``, AMD MFMA, FMA for IEEE fp32), the
   shared-memory / LDS traffic of the operand reads (each warp / warpgroup reads its A rows and B
   columns) and the tile writes, the CU's share of L2 bandwidth for the tile loads, and for operands
   whose loads cannot vectorize (``GemmProblem.a_aligned``) the scalar loads, serial with the MMAs.
   Cycles become seconds at the clock implied by the *measured* matmul ceiling (``ceilings(spec)``).
3. **Latency**: each program keeps ``num_stages - 1`` steps of loads in flight (one for scalar
   loads, which cannot be cp.async-pipelined), so a step cannot take less than memory latency /
   (stages - 1) (Little's law); programs resident on one CU overlap. Each round of programs also pays
   the pipeline fill and its epilogue (C written, x0 / x read), partly hidden (``EPILOGUE_OVERLAP``).
4. **Grid**: ``cdiv(programs, CUs)`` programs land on the busiest CU (wave quantization); they run
   ``min(occupancy, that)`` at a time, sharing the matrix unit.
5. **Memory system**: HBM bytes (compulsory, plus re-reads when an operand's panels do not stay in
   L2 under the ``group_m`` ordering; AMD: XCDs take programs round-robin, each with its own L2,
   behind the Infinity Cache), the epilogue's reads and writes, the split-K partials and their
   reduction kernel, and a fixed cost per kernel.

The time is the largest of the per-CU time and the device-wide memory times, plus what cannot
overlap. Constants below carry their unit and source; the ones marked *estimate* are to be checked
against ``benchmarks/gemm_selection.py``'s per-config measurements.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from polyrec.hardware.types import Ceilings, DeviceSpec
from polyrec.perfmodel.gemm_footprint import EPILOGUE_TENSORS, Footprint, warp_grid, footprint

GEMM_DTYPES: tuple[str, ...] = ("bf16", "fp16", "tf32", "fp32")

#: Shared memory / LDS bytes per clock per SM / CU. NVIDIA: 32 banks x 4 B per clock (CUDA C
#: Programming Guide, "Shared Memory" of compute capability 8.x/9.x). AMD CDNA3: 128 B/clk per CU
#: (AMD CDNA3 ISA guide, LDS: 32 banks x 4 B); CDNA4 doubles the LDS read bandwidth with its 160 KB
#: LDS (AMD CDNA4 architecture white paper, 2025).
SMEM_BYTES_PER_CLOCK: dict[str, int] = {"sm_80": 128, "sm_90": 128, "sm_100": 128, "gfx942": 128,
                                        "gfx950": 256}
#: Loaded global-memory latency, seconds: the time a step's loads take to land while the memory
#: system is busy. Unloaded pointer-chasing gives ~0.3-0.5 us on H100 HBM3 (Luo et al.,
#: "Benchmarking and Dissecting the Nvidia Hopper GPU Architecture", arXiv 2402.13499) and ~0.8 us on
#: MI300X (Chips and Cheese, "Testing AMD's Giant MI300X", 2024); queueing under load adds to it.
#: NVIDIA: fitted on fold A of benchmarks/results/gemm_selection_nvidia-h200_2026-11-29.json
#: (``benchmarks/gemm_model_check.py --fit``, grid 0.8 / 1.0 / 1.2 us; the stage-depth effect the
#: sweep shows: 3 stages with 32-deep steps run 1.16-1.20x slower than 4 on the largest tiles).
#: AMD: *estimate* (no AMD measurement yet).
MEMORY_LATENCY_S: dict[str, float] = {"nvidia": 1.0e-6, "amd": 0.9e-6}
#: Pipeline buffers the matrix unit still holds while the next loads are issued: Triton 3.6 runs
#: Hopper ``wgmma`` asynchronously with one group in flight (``warpgroup.wait 1``), so the buffer it
#: reads cannot be refilled yet and loads run ``num_stages - 2`` steps ahead instead of
#: ``num_stages - 1`` (TritonGPU pipeliner, MMAv3 path). Checked on fold A of the H200 sweep
#: (``--fit`` grid 0 / 1).
WGMMA_HELD_BUFFERS = 1
#: Operand bandwidth from L2 into the SMs over the L2 probe's rate (``hw calibrate``, a plain
#: read kernel with 4 warps). The sweep's tiles up to 128x128, which are L2-bound, sustain 9.5-11
#: TB/s of operand traffic on the H200 (``(BM + BN) / (BM BN)`` bytes per FLOP x their TFLOP/s)
#: against the probe's 8.5 (1.1-1.3x). NVIDIA: fitted on fold A of the H200 sweep (``--fit`` grid 1.0 / 1.2 /
#: 1.4); AMD: 1.0 (no measurement).
L2_OPERAND_OVER_PROBE: dict[str, float] = {"nvidia": 1.4, "amd": 1.0}
#: Slowdown of the whole per-CU time of a tile 256 columns wide whose B operand is K-major (B = Wᵀ
#: of a row-major W [N, K]: the forward ``x @ Wᵀ``) on Hopper. Measured, not derived: on every
#: forward (NT) shape of the H200 sweep, BM128 x BN256 runs 0.97-1.44x the time of BM256 x BN128 at 8
#: warps (geomean 1.15 on fold A), while on the NN shapes the 256-wide tile is the faster one (0.88-0.98)
#: and 64 x 256 is slower than 256 x 64 only in NT. The mechanism (a K-major B tile of 256 rows in
#: shared memory for ``wgmma``) is not identified. Fitted on fold A (``--fit`` grid 1.0 / 1.2;
#: fold A is flat from 1.1 up). Other architectures: 1.0 (no measurement).
KMAJOR_B_WIDE_TILE_FACTOR: dict[str, float] = {"sm_90": 1.2}
#: Hopper's legacy ``mma.sync`` path reaches about 2/3 of the ``wgmma`` dense rate (Luo et al.,
#: arXiv 2402.13499, tensor-core throughput of mma vs wgmma on H800). *Estimate*.
MMA_SYNC_FRACTION_SM90 = 0.65
#: Cycles of fixed work per main-loop step: loop counter, pointer increments, the barrier / async
#: wait that hands a pipeline buffer to the matrix unit. *Estimate* (tens of cycles per barrier).
STEP_OVERHEAD_CYCLES = 40
#: Fraction of an L2 that holds reused operand panels while other data streams through. *Estimate*.
L2_USABLE_FRACTION = 0.5
#: AMD Infinity Cache (MALL) peak bandwidth, B/s: 17.2 TB/s on MI300X (AMD CDNA3 white paper); the
#: same figure is assumed for CDNA4 parts (*estimate*).
MALL_BANDWIDTH = 17.2e12
#: Global-load bytes per clock per SM / CU when an operand's loads cannot vectorize (scalar 2- or
#: 4-byte loads; ``GemmProblem.a_aligned``): they issue as one element per thread per instruction,
#: go through registers (no cp.async, so no pipelining) and serialise with the MMAs of the step.
#: Fitted to benchmarks/results/gemm_selection_nvidia-h200_2026-11-29.json, fold A (shape names
#: sorted, even positions; ``benchmarks/gemm_model_check.py --fit``, grid 1.5 / 2 / 3; fold B alone gives 1.5).
SCALAR_LOAD_BYTES_PER_CLOCK = 3.0
#: Fraction of a program's epilogue (reading x0 / x, writing C) hidden behind the main loops of the
#: other programs of its round (0 = serial after the main loop, 1 = fully hidden). Fitted to
#: benchmarks/results/gemm_selection_nvidia-h200_2026-11-29.json, fold A (as above, grid 0.75 / 1; fold B
#: gives the same).
EPILOGUE_OVERLAP = 0.75
#: Fraction of the epilogue's *loads* (x0 / x of the cross update, the residual, CrossGrad's grad,
#: x0 and d_x0: ``EPILOGUE_TENSORS``) hidden behind other work. They are issued after the last K step
#: and the store depends on them, so with the short K loops of the DCN-v2 cross GEMMs (K = 512, 8
#: steps of 64) nothing hides them: fitted on the 24 swept configs of the forward cross GEMM alone
#: (benchmarks/results/dcn_gemms_nvidia-h200_2026-11-29.json, M 65536, N 3456, K 512; grid
#: 0 / 0.25 / 0.5 / 0.75). Dimensionless.
EPILOGUE_LOAD_OVERLAP = 0.0
#: GPU time of a kernel beyond its work: grid launch, program start-up and drain. *Estimate*: the
#: shortest kernels timed with CUDA events on Hopper / CDNA3 take ~2-3 us.
KERNEL_OVERHEAD_S = 2.5e-6
#: Host seconds of one ``polyrec.kernels.gemm.matmul`` call on the classic Triton kernel (argument
#: binding and specialization key of ~35 arguments, the wrapper's checks), and of one epilogue /
#: split-K reduction pass launch (fewer arguments): calls back to back take at least this much
#: whatever the GPU time. The sweep's shortest calls show them: classic GEMMs 39-88 us, the library
#: path with its pass 35 us (benchmarks/results/gemm_selection_nvidia-h200_2026-11-29.json, a61797a,
#: alone on one H200). On a grid (GEMM 0-70 us, pass 0-35 us) fitted to the library-choice score of
#: fold A (shape names sorted, even positions) with the pass below the GEMM: 50 / 35 us reach the
#: fold's best, 0.752 -> 0.978; fold B 0.965 -> 0.958 (OFFLINE re-score: benchmarks/gemm_model_check.py;
#: ties on the floor are broken by GPU time, so the config ranking is unchanged). Against the earlier
#: c1a7598 sweep, whose short calls ran 2-7x faster (square 1024's pick: 13 us), the floor costs a
#: little: library choice 0.936 -> 0.920 (fold A), 0.989 -> 0.971 (fold B). The wrapper's own Python
#: grew 13.6 -> 18.2 us per call on the 2-core dev CPU between the two; the rest of the gap is not
#: explained. The TMA kernel's own host cost: ``polyrec.perfmodel.gemm_tma.TMA_HOST_S``.
TRITON_GEMM_HOST_S = 50e-6
TRITON_PASS_HOST_S = 35e-6
#: Triton's main loop against the vendor library's at the same tile: torch.matmul time / best swept
#: Triton time, geomean over fold A of benchmarks/results/gemm_selection_nvidia-h200_2026-11-29.json
#: (19 shapes, shape names sorted, even positions): 0.90 (fold B: 0.81). The library is modelled at
#: the measured matmul ceiling (``hw calibrate`` times cuBLAS / hipBLASLt), Triton at this fraction.
TRITON_MAINLOOP_EFFICIENCY = 0.90



class TileConfig(Protocol):
    """What the model reads of a launch configuration (``polyrec.kernels.gemm_configs.GemmConfig``)."""

    block_m: int
    block_n: int
    block_k: int
    group_m: int
    split_k: int
    num_warps: int
    num_stages: int
    waves_per_eu: int
    matrix_instr_nonkdim: int
    kpack: int
    persistent_tma: bool  # the persistent TMA kernel: modelled by polyrec.perfmodel.gemm_tma
    epilogue_subtile: bool
    ctas_per_sm: int


@dataclass(frozen=True, kw_only=True, slots=True)
class GemmProblem:
    """One GEMM: C[m, n] = A[m, k] @ B[k, n] with an epilogue."""

    m: int
    n: int
    k: int
    dtype: str  # input dtype, one of GEMM_DTYPES (accumulation is fp32); "fp8" for the library's fp8 GEMMs only
    out_bytes: int = 0  # bytes per output element; 0 = same as the inputs
    epilogue: str = "none"  # a key of EPILOGUE_TENSORS
    # Whether each operand's loads vectorize: 16-byte aligned base, and its contiguous extent and
    # leading stride multiples of 16 elements (Triton's divisibility specialization). Otherwise the
    # loads are scalar and cannot be cp.async-pipelined (see ``operand_aligned``).
    a_aligned: bool = True
    b_aligned: bool = True
    # Whether B is stored K-major (B = Wᵀ of a row-major W [N, K]: the forward ``x @ Wᵀ``, layout
    # "NT"); False = N-major (row-major B [K, N]), the default.
    b_k_major: bool = False

    @property
    def in_bytes(self) -> int:
        return {"bf16": 2, "fp16": 2, "fp8": 1}.get(self.dtype, 4)

    @property
    def c_bytes(self) -> int:
        return self.out_bytes or self.in_bytes

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k

    @property
    def epilogue_bytes(self) -> int:
        """Bytes of the [M, N] tensors the epilogue moves, C's store included."""
        reads, writes, _ = EPILOGUE_TENSORS[self.epilogue]
        return self.m * self.n * self.c_bytes * (1 + reads + writes)


#: Triton 3.6 specializes an integer argument as "divisible by 16" (``tt.divisibility = 16``) and
#: only then proves 16-element runs for vector loads (``triton/runtime/jit.py``, specialization).
ALIGNMENT_ELEMENTS = 16


def operand_alignment(m: int, n: int, k: int, layout: str) -> tuple[bool, bool]:
    """(A aligned, B aligned) for contiguous operands in a layout "NN" / "NT" / "TN" / "TT" (first
    letter A, second B; "T" = stored transposed). An operand's contiguous extent is also its leading
    stride, so it alone decides: A is contiguous along K ("N") or M ("T"), B along N ("N") or K ("T")."""
    a_contig = k if layout[0] == "N" else m
    b_contig = n if layout[1] == "N" else k
    return a_contig % ALIGNMENT_ELEMENTS == 0, b_contig % ALIGNMENT_ELEMENTS == 0


@dataclass(frozen=True, kw_only=True, slots=True)
class GemmEstimate:
    """Predicted time of one GEMM with one config, and the parts it was built from (seconds)."""

    seconds: float  # inf when the config does not fit
    footprint: Footprint
    parts: dict[str, float]


def rate_dtype(dtype: str, spec: DeviceSpec) -> str:
    """The ceiling that bounds this dtype: tf32 runs as IEEE fp32 where the target has no TF32 dot in Triton
    (gfx950: ``TritonTarget.tf32_dot``) or the datasheet no TF32 rate."""
    if dtype == "tf32" and (spec.triton is None or not spec.triton.tf32_dot or not spec.peak_flops.get("tf32")):
        return "fp32"
    return dtype


def _step_cycles(cfg: TileConfig, p: GemmProblem, spec: DeviceSpec, fp: Footprint) -> tuple[float, float]:
    """(matrix-unit cycles, shared-memory cycles) of one main-loop step of one program on one CU."""
    peak = spec.peak_flops[rate_dtype(p.dtype, spec)]
    flops_per_cycle = peak / (spec.compute_units * spec.boost_clock_hz)  # per CU, datasheet
    if fp.instruction == "mma.sync" and spec.arch == "sm_90":
        flops_per_cycle *= MMA_SYNC_FRACTION_SM90
    mma = 2.0 * cfg.block_m * cfg.block_n * cfg.block_k / flops_per_cycle
    grid_m, grid_n = warp_grid(cfg, fp.instruction)
    reads = (grid_n * cfg.block_m + grid_m * cfg.block_n) * cfg.block_k * p.in_bytes
    writes = (cfg.block_m + cfg.block_n) * cfg.block_k * p.in_bytes
    smem = (reads + writes) / SMEM_BYTES_PER_CLOCK.get(spec.arch, 128)
    return mma, smem


def _operand_rereads(cfg: TileConfig, p: GemmProblem, spec: DeviceSpec, slots: int) -> tuple[float, float]:
    """How many times A and B are fetched into L2 (1 = once) under grouped ordering.

    Programs are numbered down ``g = min(group_m, tiles_m)`` rows, then along N. On AMD, program i
    goes to XCD ``i % xcds`` (round-robin dispatch, AMD ROCm docs "MI300X workload optimization"),
    each XCD with its own L2: an XCD sees ``g / gcd(g, xcds)`` rows of a group and ``gcd(g, xcds) /
    xcds`` of its columns, so A is fetched ``xcds / gcd`` times and B ``gcd`` times per group.
    An operand panel that does not stay resident is fetched again for every wave that needs it.
    """
    tiles_m = math.ceil(p.m / cfg.block_m)
    tiles_n = math.ceil(p.n / cfg.block_n)
    g = min(cfg.group_m, tiles_m)
    domains = max(1, spec.xcd_count)
    share = math.gcd(g, domains)
    l2 = spec.l2_bytes / domains * L2_USABLE_FRACTION
    k_bytes = p.k * p.in_bytes
    groups = math.ceil(tiles_m / g)
    reads_a, reads_b = domains / share, float(share) if domains > 1 else 1.0
    if p.n * k_bytes * share / domains > l2:  # B's panels seen by one L2 do not stay for the next group
        reads_b *= groups
    if (g / share) * cfg.block_m * k_bytes > l2:  # one group's A rows re-read for every wave
        reads_a *= max(1, math.ceil(g * tiles_n / max(1, slots)))
    return reads_a, reads_b


def _memory_seconds(cfg: TileConfig, p: GemmProblem, spec: DeviceSpec, ceil: Ceilings, slots: int) -> dict[str, float]:
    """Device-wide memory times: L2 fills (from HBM, or the Infinity Cache on AMD) and HBM."""
    reads_a, reads_b = _operand_rereads(cfg, p, spec, slots)
    unique = (p.m + p.n) * p.k * p.in_bytes
    fills = (p.m * reads_a + p.n * reads_b) * p.k * p.in_bytes
    epilogue = p.epilogue_bytes
    hbm = ceil.copy_bandwidth.value
    if spec.infinity_cache_bytes >= unique:
        return {"l2_fill": fills / MALL_BANDWIDTH, "hbm": (unique + epilogue) / hbm}
    return {"l2_fill": (fills + epilogue) / hbm, "hbm": (unique + epilogue) / hbm}


def _split_k_seconds(cfg: TileConfig, p: GemmProblem, spec: DeviceSpec, ceil: Ceilings) -> float:
    """The fp32 partials' round trip and the reduction kernel (epilogue moves there), which costs one
    more launch at the measured back-to-back launch latency (``hw calibrate``)."""
    if cfg.split_k == 1:
        return 0.0
    partials = cfg.split_k * p.m * p.n * 4
    rate = ceil.l2_bandwidth.value if 2 * partials <= spec.l2_bytes * L2_USABLE_FRACTION else ceil.copy_bandwidth.value
    return 2 * partials / rate + ceil.launch_latency.value  # a second launch, back to back


def _scalar_load_cycles(cfg: TileConfig, p: GemmProblem) -> float:
    """Cycles one program spends issuing a step's unvectorized operand loads (0 when aligned)."""
    rows = (0 if p.a_aligned else cfg.block_m) + (0 if p.b_aligned else cfg.block_n)
    return rows * cfg.block_k * p.in_bytes / SCALAR_LOAD_BYTES_PER_CLOCK


def _epilogue_round_seconds(cfg: TileConfig, p: GemmProblem, spec: DeviceSpec, ceil: Ceilings,
                            resident: int) -> tuple[float, float]:
    """(stores, loads) of one round's epilogue on one CU, at the CU's share of the copy bandwidth.
    Stores: the programs' C tiles and the epilogue's written tiles, after one memory latency (they
    drain while the next round starts: ``EPILOGUE_OVERLAP``). Loads: the epilogue's input tiles,
    issued after the last K step, one memory latency per dependent load phase (``EPILOGUE_TENSORS``):
    the store waits for them (``EPILOGUE_LOAD_OVERLAP``)."""
    reads, writes, phases = EPILOGUE_TENSORS[p.epilogue]
    tile_bytes = resident * cfg.block_m * cfg.block_n * p.c_bytes
    share = ceil.copy_bandwidth.value / spec.compute_units
    latency = MEMORY_LATENCY_S[spec.vendor]
    return latency + tile_bytes * (1 + writes) / share, phases * latency + tile_bytes * reads / share


def estimate(p: GemmProblem, cfg: TileConfig, spec: DeviceSpec, ceil: Ceilings, *,
             efficiency: float = TRITON_MAINLOOP_EFFICIENCY) -> GemmEstimate:
    """Predicted seconds of one ``matmul`` call of ``p`` with ``cfg`` on ``spec``: the longer of the
    GPU time (``parts["gpu"]``) and the host time of its launches (``parts["host"]``:
    ``TRITON_GEMM_HOST_S``, + ``TRITON_PASS_HOST_S`` for split-K's reduction); ``efficiency`` scales the main loop's matrix-unit rate against the
    measured library ceiling (1.0 models the vendor library). A persistent TMA config goes to
    ``polyrec.perfmodel.gemm_tma.estimate`` (its own efficiency and host cost)."""
    if cfg.persistent_tma:
        from polyrec.perfmodel import gemm_tma

        return gemm_tma.estimate(p, cfg, spec, ceil)
    fp = footprint(cfg, p.dtype, spec, p.epilogue, (p.a_aligned, p.b_aligned))
    if not fp.fits:
        return GemmEstimate(seconds=math.inf, footprint=fp, parts={})
    rate = ceil.matmul_flops[rate_dtype(p.dtype, spec)].value
    peak = spec.peak_flops[rate_dtype(p.dtype, spec)]
    clock = rate * (spec.boost_clock_hz / peak) * efficiency  # sustained clock implied by the ceiling (no overflow)
    mma, smem = _step_cycles(cfg, p, spec, fp)
    operand_bw = ceil.l2_bandwidth.value * L2_OPERAND_OVER_PROBE[spec.vendor]
    port = (cfg.block_m + cfg.block_n) * cfg.block_k * p.in_bytes / (operand_bw / spec.compute_units / clock)
    scalar = _scalar_load_cycles(cfg, p)
    step = max(mma, smem, port) + scalar + STEP_OVERHEAD_CYCLES
    tiles = math.ceil(p.m / cfg.block_m) * math.ceil(p.n / cfg.block_n)
    programs = tiles * cfg.split_k
    k_steps = math.ceil(math.ceil(p.k / cfg.split_k) / cfg.block_k)
    per_cu = math.ceil(programs / spec.compute_units)
    resident = min(fp.programs_per_cu, per_cu)
    rounds = math.ceil(per_cu / resident)
    latency = MEMORY_LATENCY_S[spec.vendor]
    held = WGMMA_HELD_BUFFERS if fp.instruction == "wgmma" else 0
    in_flight = max(1, cfg.num_stages - 1 - held) if not scalar else 1  # scalar loads: not pipelined
    step_s = max(resident * step / clock, latency / in_flight)
    main = k_steps * step_s + latency  # + pipeline fill
    stores, loads = _epilogue_round_seconds(cfg, p, spec, ceil, resident) if cfg.split_k == 1 else (0.0, 0.0)
    compute = rounds * (main + stores - EPILOGUE_OVERLAP * min(main, stores) + (1 - EPILOGUE_LOAD_OVERLAP) * loads)
    if p.b_k_major and cfg.block_n >= 256:
        compute *= KMAJOR_B_WIDE_TILE_FACTOR.get(spec.arch, 1.0)  # see the constant
    memory = _memory_seconds(cfg, p, spec, ceil, fp.programs_per_cu * spec.compute_units)
    split = _split_k_seconds(cfg, p, spec, ceil)
    gpu = max(compute, *memory.values()) + split + KERNEL_OVERHEAD_S
    host = TRITON_GEMM_HOST_S + (TRITON_PASS_HOST_S if cfg.split_k > 1 else 0.0)  # + the reduction's launch
    parts = {"compute": compute, "mma_cycles": mma, "smem_cycles": smem, "port_cycles": port,
             "scalar_cycles": scalar, "epilogue_stores": stores, "epilogue_loads": loads, "rounds": rounds, "resident": resident,
             "split_k": split, "gpu": gpu, "host": host} | memory
    return GemmEstimate(seconds=max(gpu, host), footprint=fp, parts=parts)


def roofline_seconds(p: GemmProblem, spec: DeviceSpec, ceil: Ceilings) -> float:
    """The floor: FLOPs at the measured matmul rate or compulsory bytes at the copy rate."""
    rate = ceil.matmul_flops[rate_dtype(p.dtype, spec)].value
    bytes_moved = (p.m + p.n) * p.k * p.in_bytes + p.epilogue_bytes
    return max(p.flops / rate, bytes_moved / ceil.copy_bandwidth.value)
