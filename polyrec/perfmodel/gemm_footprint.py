"""Footprint of one classic Triton GEMM config on a DeviceSpec (no GPU, no torch): what one program holds
on an SM / CU, hence how many stay resident and whether the config fits at all. The matrix instruction
Triton emits, the pipeline buffers in shared memory / LDS, and the registers per thread (accumulator,
operand fragments, staged or prefetched tiles, the epilogue's tiles at the store; AMD: a fit to compiled
kernels). ``polyrec.perfmodel.gemm.estimate`` times a config on its footprint; a persistent TMA config
goes to ``polyrec.perfmodel.gemm_tma.footprint``. ``EPILOGUE_TENSORS``, which the time model reads too,
is here because the footprint needs it first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from polyrec.hardware.types import DeviceSpec

if TYPE_CHECKING:
    from polyrec.perfmodel.gemm import TileConfig

#: The [M, N] tensors each epilogue moves besides storing C, as (read, written, dependent load
#: phases), from the kernels' code (``polyrec.kernels.gemm_kernels._epilogue``): the cross update reads x0
#: and x (one phase: both loads issue together); the residual add reads x; the DCN-v2 CrossGrad reads
#: grad and x0, then (a second phase, after the bias-gradient column sums) reads and writes d_x0.
#: Bias vectors and the CrossGrad bias-gradient partials ([M / block_m, N] fp32) are left out here.
EPILOGUE_TENSORS: dict[str, tuple[int, int, int]] = {
    "none": (0, 0, 0), "bias": (0, 0, 0), "relu": (0, 0, 0), "bias_relu": (0, 0, 0),
    "cross": (2, 0, 1), "residual": (1, 0, 1), "cross_grad": (3, 1, 2),
}

#: Registers per thread besides accumulator and operands: pointers, offsets, masks, loop state.
#: *Estimate*, checked by the compile-fit test (registers and spills read from the compiled kernel).
BASE_REGISTERS = 40
#: AMD CDNA3/CDNA4: of the 512 registers per lane, 256 are architectural VGPRs; loads and arithmetic
#: (the epilogue's) use those, the other 256 (AGPRs) hold MFMA accumulators (AMD CDNA3 ISA guide).
AMD_ARCH_VGPRS = 256
#: Registers the cross epilogue adds per accumulator register: the x0 and x tiles as loaded (NVIDIA:
#: two 16-bit elements per register, each tile half a register per accumulator) and, on AMD, widened
#: to fp32 before the FMA. Checked against compiled kernels by benchmarks/gemm_compile_fit.py.
CROSS_EPILOGUE_REGISTERS_PER_ACC: dict[str, float] = {"nvidia": 1.0, "amd": 3.0}
#: AMD (Triton 3.6 stream pipeliner): VGPRs per register of one main-loop step's A + B tile per
#: thread (``(BM + BN) * BK * elem / (4 * threads)``): the global prefetch of the next step plus the
#: operand fragments read from LDS for the MFMAs of the current one. Registers are modelled as
#: accumulator + this x tile + ``AMD_BASE_REGISTERS``. Least-squares fit to the 68 spill-free gfx950
#: compiles ("none" epilogue, waves_per_eu 0) of the CPU compile-fit probe run on 2026-11-29 (factor
#: 7.53, base 32.3, largest under-prediction 23.9 VGPRs); gfx942 assumed the same until
#: ``benchmarks/gemm_compile_fit.py`` (which reproduces the fit per target) has run for it. The
#: compile test (tests/test_gemm_compile.py) checks every selected config on gfx942 and gfx950.
AMD_TILE_REGISTER_FACTOR: dict[str, float] = {"gfx942": 7.5, "gfx950": 7.5}
#: AMD registers besides accumulator and tile (pointers, offsets, loop state); same fit as above.
AMD_BASE_REGISTERS = 32
#: Registers kept free of the AMD estimate before a config counts as fitting: the largest
#: under-prediction of the fit above, so that a config predicted to fit compiles without spills.
AMD_REGISTER_MARGIN = 24
#: AMD VGPRs per lane of one SIMD (512 on CDNA3/CDNA4, AMD Instinct MI300 ISA guide, "VGPRs"): a
#: workgroup's waves are spread over the CU's 4 SIMDs, so with more than 4 waves each gets a share.
AMD_SIMDS_PER_CU = 4
#: Resident threads per SM (NVIDIA Hopper: 2048, CUDA C Programming Guide, compute capability 9.0)
#: and per CU (AMD CDNA3: 4 SIMDs x 8 waves x 64 lanes, AMD Instinct MI300 ISA guide).
MAX_THREADS_PER_CU = 2048
#: Programs per SM at most (CUDA C Programming Guide, compute capability 9.0: 32 blocks per SM).
MAX_PROGRAMS_PER_CU = 32


@dataclass(frozen=True, kw_only=True, slots=True)
class Footprint:
    """Per-program resources of one config on one device."""

    smem_bytes: int  # shared memory / LDS per program
    registers: int  # estimated 32-bit registers per thread (AMD: VGPRs incl. AGPRs)
    register_limit: int  # the most a thread may use without spilling
    programs_per_cu: int  # resident programs per SM / CU
    instruction: str  # "wgmma", "mma.sync", "mfma" or "fma"
    problems: tuple[str, ...]  # why it cannot run; empty when it fits

    @property
    def fits(self) -> bool:
        return not self.problems


def _instruction(cfg: TileConfig, dtype: str, spec: DeviceSpec) -> str:
    """The matrix instruction Triton 3.6 emits for this tile (TritonGPU AccelerateMatmul pass)."""
    if spec.vendor == "amd":
        return "mfma"
    if dtype == "fp32":
        return "fma"  # IEEE fp32 dot: no tensor-core path
    if spec.arch in ("sm_90", "sm_100") and cfg.num_warps % 4 == 0 and cfg.block_m % 64 == 0:
        return "wgmma"  # warpgroup MMA, operands from shared memory (tcgen05 on sm_100 alike)
    return "mma.sync"


def warp_grid(cfg: TileConfig, instruction: str) -> tuple[int, int]:
    """(groups along M, groups along N) of the units that issue MMAs: warpgroups for wgmma, warps
    otherwise; Triton places them along M first while each keeps at least one instruction's rows."""
    units = cfg.num_warps // 4 if instruction == "wgmma" else cfg.num_warps
    rows = {"wgmma": 64, "mfma": cfg.matrix_instr_nonkdim or 16}.get(instruction, 16)
    along_m = max(1, min(units, cfg.block_m // rows))
    return along_m, max(1, units // along_m)


def _smem_bytes(cfg: TileConfig, dtype: str, spec: DeviceSpec) -> int:
    """Pipeline buffers of the A and B tiles. NVIDIA (cp.async pipelining): ``num_stages`` buffers;
    AMD (stream pipeliner, global loads prefetched into registers): ``max(1, num_stages - 1)``.
    Checked against ``compiled.metadata.shared`` by the compile-fit test."""
    elem = 2 if dtype in ("bf16", "fp16") else 4
    buffers = max(1, cfg.num_stages - 1) if spec.vendor == "amd" else cfg.num_stages
    return buffers * (cfg.block_m + cfg.block_n) * cfg.block_k * elem


def _registers(cfg: TileConfig, dtype: str, spec: DeviceSpec, instruction: str,
               aligned: tuple[bool, bool] = (True, True)) -> int:
    threads = cfg.num_warps * spec.warp_size
    elem = 2 if dtype in ("bf16", "fp16") else 4
    accumulator = cfg.block_m * cfg.block_n // threads  # fp32, one register each
    if spec.vendor == "amd":
        factor = AMD_TILE_REGISTER_FACTOR.get(spec.arch, max(AMD_TILE_REGISTER_FACTOR.values()))
        tile = _tile_registers(cfg, dtype, spec, aligned, (False, False))
        return accumulator + math.ceil(factor * tile) + AMD_BASE_REGISTERS
    operands = 0
    if instruction != "wgmma":  # operand fragments of one K step held in registers
        grid_m, grid_n = warp_grid(cfg, instruction)
        per_unit = (cfg.block_m // grid_m + cfg.block_n // grid_n) * cfg.block_k * elem
        operands = per_unit // (4 * spec.warp_size)
    # Operands that cannot use cp.async are loaded into registers, then stored to shared memory.
    staged = _tile_registers(cfg, dtype, spec, aligned, aligned)
    return accumulator + operands + staged + BASE_REGISTERS


def _tile_registers(cfg: TileConfig, dtype: str, spec: DeviceSpec, aligned: tuple[bool, bool],
                    skip: tuple[bool, bool]) -> int:
    """32-bit registers per thread holding one step's A and B tiles as loaded from global memory
    (operands whose ``skip`` is True are left out): vector loads pack 16-bit elements two to a
    register, scalar (unaligned) loads take one register per element."""
    elem = 2 if dtype in ("bf16", "fp16") else 4
    threads = cfg.num_warps * spec.warp_size
    total = 0.0
    for rows, ok, left_out in ((cfg.block_m, aligned[0], skip[0]), (cfg.block_n, aligned[1], skip[1])):
        if not left_out:
            total += rows * cfg.block_k * (elem / 4 if ok else 1) / threads
    return math.ceil(total)


def _epilogue_registers(cfg: TileConfig, spec: DeviceSpec, epilogue: str) -> int:
    """Registers live at the store: the accumulator plus the [M, N] tiles the epilogue holds at once:
    two for the cross update (x0, x) and CrossGrad (grad and x0, then d_x0 and g), one for the
    residual (``CROSS_EPILOGUE_REGISTERS_PER_ACC`` is per two tiles)."""
    accumulator = cfg.block_m * cfg.block_n // (cfg.num_warps * spec.warp_size)
    tiles = min(2, EPILOGUE_TENSORS[epilogue][0])
    extra = int(CROSS_EPILOGUE_REGISTERS_PER_ACC[spec.vendor] * accumulator * tiles / 2)
    return accumulator + extra + BASE_REGISTERS


def footprint(cfg: TileConfig, dtype: str, spec: DeviceSpec, epilogue: str = "none",
              aligned: tuple[bool, bool] = (True, True)) -> Footprint:
    """Shared memory, registers and occupancy of one config, and whether it fits ``spec``;
    ``aligned``: whether the A and B loads vectorize (``GemmProblem.a_aligned``). A persistent TMA
    config goes to ``polyrec.perfmodel.gemm_tma.footprint`` (TMA loads need no alignment flag)."""
    if cfg.persistent_tma:
        from polyrec.perfmodel import gemm_tma

        return gemm_tma.footprint(cfg, dtype, spec, epilogue)
    instruction = _instruction(cfg, dtype, spec)
    smem = _smem_bytes(cfg, dtype, spec)
    regs = max(_registers(cfg, dtype, spec, instruction, aligned), _epilogue_registers(cfg, spec, epilogue))
    limit = spec.max_registers_per_thread
    if spec.vendor == "amd":
        waves_per_simd = max(cfg.waves_per_eu, math.ceil(cfg.num_warps / AMD_SIMDS_PER_CU))
        limit = spec.max_registers_per_thread // waves_per_simd - AMD_REGISTER_MARGIN
    threads = cfg.num_warps * spec.warp_size
    problems = []
    if smem > spec.smem_per_block:
        problems.append(f"shared memory {smem} B > {spec.smem_per_block} B per block")
    if regs > limit:
        problems.append(f"~{regs} registers per thread > {limit} (would spill)")
    if spec.vendor == "amd" and _epilogue_registers(cfg, spec, epilogue) > AMD_ARCH_VGPRS:
        problems.append(f"{epilogue} epilogue needs more than {AMD_ARCH_VGPRS} architectural VGPRs")
    if instruction == "wgmma" and cfg.block_n // warp_grid(cfg, instruction)[1] < 8:
        problems.append("wgmma needs at least 8 columns per warpgroup")
    by_smem = spec.smem_per_cu // smem if smem else MAX_PROGRAMS_PER_CU
    by_regs = spec.registers_per_cu // (max(regs, 1) * threads) if spec.registers_per_cu else 1
    programs = max(0, min(by_smem, by_regs, MAX_THREADS_PER_CU // threads, MAX_PROGRAMS_PER_CU))
    if spec.vendor == "amd" and cfg.waves_per_eu:  # waves per SIMD x 4 SIMDs, in programs
        programs = min(programs, max(1, cfg.waves_per_eu * 4 // cfg.num_warps))
    if programs == 0 and not problems:
        problems.append("no program fits one CU")
    return Footprint(smem_bytes=smem, registers=regs, register_limit=limit, programs_per_cu=programs,
                     instruction=instruction, problems=tuple(problems))
