"""Portability harness: compile a Triton kernel for any catalog device's target without its GPU.

Triton 3.6 compiles on a CPU-only machine for ``GPUTarget("cuda", 80 | 90 | 100, 32)`` and
``GPUTarget("hip", "gfx942" | "gfx950", 64)``. From the result this module reads the shared memory /
LDS bytes, the registers (NVIDIA: ``cuobjdump --dump-resource-usage`` on the cubin; AMD: the
``.vgpr_count`` (unified VGPR+AGPR total) / ``.sgpr_count`` / spill counts in the AMDGCN assembly) and spills to memory, and checks them
against the device's limits. Kernel modules expose ``compile_jobs(spec) -> list[CompileJob]`` so that
every config they may select can be proven to fit every target.

Compilation needs real ``JITFunction`` objects: run this with ``TRITON_INTERPRET`` unset.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from polyrec.hardware.types import DeviceSpec

#: Options ``triton.compile`` accepts on the AMD backend only, and on the NVIDIA backend only.
AMD_ONLY_OPTIONS = frozenset({"waves_per_eu", "matrix_instr_nonkdim", "kpack"})
NVIDIA_ONLY_OPTIONS = frozenset({"maxnreg"})


class CompileHarnessError(RuntimeError):
    """The harness cannot compile (interpreter mode, a CPU spec, a missing tool)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CompileJob:
    """One kernel with one launch configuration, ready for ``triton.compile``."""

    label: str  # what the job is, e.g. "gemm bf16 BM128 BN128 BK64 w8 s3"
    kernel: Any  # a triton JITFunction
    signature: dict[str, str]  # argument name -> Triton type ("*fp32", "i32", "constexpr")
    constexprs: dict[str, Any] = field(default_factory=dict)  # values of the constexpr arguments
    num_warps: int = 4
    num_stages: int = 2
    options: dict[str, Any] = field(default_factory=dict)  # extra backend options (AMD: waves_per_eu...)
    # Arguments a real launch specializes as divisible by 16 (pointers 16-byte aligned, strides and
    # sizes multiples of 16): Triton's JIT passes this as ``tt.divisibility`` and only then
    # vectorizes and pipelines, so leaving it out understates shared memory and registers.
    divisible_by_16: tuple[str, ...] = ()
    # Why a spill is kept (NVIDIA: ptxas's stack frame; AMD: VGPRs to scratch): the measurement on that
    # target behind the config, and what of the build it did not time. Empty: a spill makes the job unfit.
    known_spill: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class CompileReport:
    """What one job compiled to on one device, and whether it fits."""

    label: str
    device: str
    target: str  # e.g. "cuda:90" or "hip:gfx942"
    shared_bytes: int  # static + dynamic shared memory / LDS per block
    registers: int  # per thread (NVIDIA) / VGPRs per lane (AMD: unified arch + acc total)
    scalar_registers: int  # SGPRs (AMD); 0 on NVIDIA
    spill_bytes: int  # spilled to memory: NVIDIA stack + local bytes per thread; AMD VGPRs spilled to scratch
    scalar_spills: int  # AMD: SGPRs spilled into VGPR lanes (no memory traffic, so no problem); 0 on NVIDIA
    scratch_bytes: int  # AMD: private (scratch) memory per work-item, spills or stack arrays; 0 on NVIDIA
    seconds: float  # compile time
    problems: tuple[str, ...]  # why it does not fit; empty when it fits
    known_spill: str = ""  # the job's measurement that kept its spill (``CompileJob.known_spill``)

    @property
    def fits(self) -> bool:
        return not self.problems


def _check_compilable(kernel: Any) -> None:
    from triton.runtime.jit import JITFunction

    if not isinstance(kernel, JITFunction):
        raise CompileHarnessError(
            f"{getattr(kernel, '__name__', kernel)!r} is not a JITFunction; compile-only checks need "
            "TRITON_INTERPRET unset (the interpreter replaces @triton.jit functions)"
        )


def _nvidia_resources(cubin: bytes) -> tuple[int, int]:
    """(registers per thread, local-memory bytes per thread) of the one function in a cubin. The local
    memory is the stack frame plus any other local allocation: Triton keeps no arrays on the stack, so its
    frame is the slots ptxas spills registers to (``ptxas -v`` prints the same count as "bytes stack frame"
    beside its spill stores and loads)."""
    import triton

    tool = triton.knobs.nvidia.cuobjdump.path
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        out = subprocess.run([tool, "--dump-resource-usage", str(path)], capture_output=True, text=True,
                             check=True).stdout
    # One line per function in the cubin (the kernel, and any function it did not inline): the
    # largest use is what the launch needs.
    found = re.findall(r"REG:(\d+)\s+STACK:(\d+)\s+SHARED:\d+\s+LOCAL:(\d+)", out)
    if not found:
        raise CompileHarnessError(f"cuobjdump printed no resource usage:\n{out}")
    return max(int(r) for r, _, _ in found), max(int(stack) + int(local) for _, stack, local in found)


def _amd_field(asm: str, name: str) -> int:
    match = re.search(rf"\.{name}:\s+(\d+)", asm)
    if match is None:
        raise CompileHarnessError(f"AMDGCN assembly has no .{name}")
    return int(match.group(1))


def _amd_resources(asm: str) -> tuple[int, int, int, int, int]:
    """(VGPRs, SGPRs, VGPRs spilled to scratch, SGPRs spilled, scratch bytes per work-item) from the
    AMDGCN metadata.

    On gfx90a and later ``.vgpr_count`` is already the unified total (architectural VGPRs aligned,
    plus AGPRs): the assembly's comments read e.g. NumVgprs 256, NumAgprs 192, TotalNumVgprs 448
    with ``.vgpr_count: 448``. SGPR spills are written into VGPR lanes (``v_writelane``), not memory:
    they cost instructions, not traffic, and do not make a config unfit.
    """
    return (_amd_field(asm, "vgpr_count"), _amd_field(asm, "sgpr_count"), _amd_field(asm, "vgpr_spill_count"),
            _amd_field(asm, "sgpr_spill_count"), _amd_field(asm, "private_segment_fixed_size"))


#: Threads one block / workgroup may have, per vendor: 1024 on every NVIDIA GPU since sm_20 (CUDA C++
#: Programming Guide, "Technical Specifications per Compute Capability",
#: https://docs.nvidia.com/cuda/cuda-c-programming-guide/#features-and-technical-specifications) and
#: 1024 on CDNA3 / CDNA4 (ROCm "GPU hardware specifications", max workgroup size,
#: https://rocm.docs.amd.com/en/latest/reference/gpu-specs.html). num_warps=32 is 1024 threads on
#: NVIDIA but 2048 work-items with wave64 on gfx942 / gfx950.
MAX_THREADS_PER_BLOCK = {"nvidia": 1024, "amd": 1024}


def _problems(spec: DeviceSpec, shared: int, registers: int, spills: int, num_warps: int,
              scratch: int = 0, known_spill: str = "") -> tuple[str, ...]:
    found = []
    threads, limit = num_warps * spec.warp_size, MAX_THREADS_PER_BLOCK.get(spec.vendor)
    if limit is not None and threads > limit:
        found.append(f"num_warps={num_warps} x {spec.warp_size} = {threads} threads > {limit} per block on {spec.name}")
    if shared > spec.smem_per_block:
        found.append(f"shared memory {shared} B > {spec.smem_per_block} B per block on {spec.name}")
    if registers > spec.max_registers_per_thread:
        found.append(f"{registers} registers > {spec.max_registers_per_thread} per thread on {spec.name}")
    if spills and not known_spill:
        found.append(f"spills {spills} (registers spilled to scratch/local memory)")
    elif scratch and not spills:
        found.append(f"scratch {scratch} B per work-item (private memory)")
    return tuple(found)


def compile_job(job: CompileJob, spec: DeviceSpec) -> Any:
    """``triton.compile`` of one job for one device's target: the compiled kernel (its ``asm`` holds the
    cubin or AMDGCN, its ``metadata`` the shared memory)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    if spec.triton is None:
        raise CompileHarnessError(f"{spec.name} has no Triton target")
    _check_compilable(job.kernel)
    target = GPUTarget(spec.triton.backend, spec.triton.arch, spec.triton.warp_size)
    options = {"num_warps": job.num_warps, "num_stages": job.num_stages}
    foreign = NVIDIA_ONLY_OPTIONS if spec.triton.backend == "hip" else AMD_ONLY_OPTIONS
    options |= {k: v for k, v in job.options.items() if k not in foreign}
    names = list(job.signature)
    if names != list(job.kernel.arg_names):  # Triton reads the types by position; a CUDA target never the names
        raise CompileHarnessError(f"{job.label}: signature names {names}, but {job.kernel.__name__} takes "
                                  f"{list(job.kernel.arg_names)}: name every argument, in order")
    unknown = set(job.divisible_by_16) - set(names)
    if unknown:
        raise CompileHarnessError(f"{job.label}: divisible_by_16 names unknown arguments {sorted(unknown)}")
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in job.divisible_by_16}
    src = ASTSource(job.kernel, signature=job.signature, constexprs=job.constexprs, attrs=attrs)
    return triton.compile(src, target=target, options=options)


def compile_for(job: CompileJob, spec: DeviceSpec) -> CompileReport:
    """Compile one job for one device's target and report its footprint and fit."""
    start = time.perf_counter()
    try:
        compiled = compile_job(job, spec)
    except CompileHarnessError:
        raise
    except Exception as exc:  # Triton's own error (an assertion, a bad signature type): named, not a traceback
        first = (str(exc).strip().splitlines() or [""])[-1]
        raise CompileHarnessError(f"{job.label} does not compile for {spec.name} ({spec.triton.backend}:"
                                  f"{spec.triton.arch}): {type(exc).__name__}: {first}") from exc
    seconds = time.perf_counter() - start
    shared = int(compiled.metadata.shared)
    if spec.triton.backend == "cuda":
        registers, spills = _nvidia_resources(compiled.asm["cubin"])
        scalar = scalar_spills = scratch = 0
    else:
        registers, scalar, spills, scalar_spills, scratch = _amd_resources(compiled.asm["amdgcn"])
    return CompileReport(
        label=job.label,
        device=spec.name,
        target=f"{spec.triton.backend}:{spec.triton.arch}",
        shared_bytes=shared,
        registers=registers,
        scalar_registers=scalar,
        spill_bytes=spills,
        scalar_spills=scalar_spills,
        scratch_bytes=scratch,
        seconds=seconds,
        problems=_problems(spec, shared, registers, spills, job.num_warps, scratch, job.known_spill),
        known_spill=job.known_spill if spills else "",
    )


def distinct_targets(specs: list[DeviceSpec]) -> list[DeviceSpec]:
    """One spec per distinct (Triton target, shared-memory limit), in the order given.

    H100 and H200 compile identically, so compiling for both would only double the time; devices
    with the same target but different limits stay separate.
    """
    seen: set[tuple[Any, ...]] = set()
    chosen = []
    for spec in specs:
        if spec.triton is None:
            continue
        key = (spec.triton.backend, spec.triton.arch, spec.smem_per_block, spec.max_registers_per_thread)
        if key not in seen:
            seen.add(key)
            chosen.append(spec)
    return chosen
