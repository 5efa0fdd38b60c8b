"""The portability harness compiles for sm_90, gfx942 and gfx950 on this CPU-only machine."""

from __future__ import annotations

import dataclasses

import pytest

from polyrec.hardware import get_device
from polyrec.hardware.compile import CompileHarnessError, CompileJob, compile_for, distinct_targets
from polyrec.hardware.catalog import catalog

pytestmark = pytest.mark.compile

TARGETS = ("H200", "MI300X", "MI350X")


def _scale_job(block: int = 1024) -> CompileJob:
    from triton_kernels import scale_kernel

    return CompileJob(label=f"scale {block}", kernel=scale_kernel,
                      signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                      constexprs={"BLOCK": block}, num_warps=4)


def _dot_job(bk: int, stages: int) -> CompileJob:
    from triton_kernels import dot_kernel

    return CompileJob(label=f"dot 128x128x{bk} s{stages}", kernel=dot_kernel,
                      signature={"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*fp32", "K": "i32",
                                 "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"},
                      constexprs={"BM": 128, "BN": 128, "BK": bk}, num_warps=8, num_stages=stages)


@pytest.mark.parametrize("device", TARGETS)
def test_elementwise_kernel_compiles_and_fits(device):
    spec = get_device(device)
    report = compile_for(_scale_job(), spec)
    assert report.fits, report.problems
    assert report.target == f"{spec.triton.backend}:{spec.triton.arch}"
    assert 0 < report.registers <= spec.max_registers_per_thread
    assert report.spill_bytes == 0 and report.shared_bytes == 0


@pytest.mark.parametrize("device", TARGETS)
def test_dot_kernel_reports_shared_memory(device):
    report = compile_for(_dot_job(64, 2), get_device(device))
    assert report.fits, report.problems
    # Two bf16 operand tiles of 128x64 are 32 KiB: a pipelined tl.dot must stage at least one of each.
    assert report.shared_bytes >= 16 * 1024


def test_over_the_limit_is_reported():
    spec = get_device("MI300X")
    report = compile_for(_dot_job(64, 2), spec)
    small = dataclasses.replace(spec, smem_per_block=report.shared_bytes - 1, max_registers_per_thread=report.registers - 1)
    tight = compile_for(_dot_job(64, 2), small)
    assert not tight.fits
    assert any("shared memory" in p for p in tight.problems)
    assert any("registers" in p for p in tight.problems)


def test_spills_make_a_config_unfit():
    # 128x128x128 bf16 tiles with 8 waves exhaust gfx950's VGPRs (seen: 9-10 spilled registers).
    report = compile_for(_dot_job(128, 3), get_device("MI350X"))
    assert report.spill_bytes > 0 and not report.fits
    assert any("spills" in p for p in report.problems)


def test_nvidia_spills_are_read_from_the_stack_frame():
    """ptxas spills to the stack frame (cuobjdump's STACK; LOCAL stays 0): a 256x256 fp32 accumulator on
    4 warps (512 registers a thread) spills on sm_90, and the report says so and makes it unfit."""
    job = dataclasses.replace(_dot_job(64, 2), constexprs={"BM": 256, "BN": 256, "BK": 64}, num_warps=4)
    report = compile_for(job, get_device("H200"))
    assert report.registers == 255 and report.spill_bytes > 0 and not report.fits
    assert any("spills" in p for p in report.problems) and report.known_spill == ""


def test_a_known_spill_fits_and_is_reported():
    """A job that says why its spill is kept fits, still reports the bytes, and carries the reason; a job
    that does not spill carries no reason whatever it says."""
    big = dataclasses.replace(_dot_job(64, 2), constexprs={"BM": 256, "BN": 256, "BK": 64}, num_warps=4,
                              known_spill="timed so (results/x)")
    report = compile_for(big, get_device("H200"))
    assert report.fits and report.spill_bytes > 0 and report.known_spill == "timed so (results/x)"
    small = compile_for(dataclasses.replace(_scale_job(), known_spill="timed so (results/x)"), get_device("H200"))
    assert small.fits and small.spill_bytes == 0 and small.known_spill == ""


def test_interpreted_kernel_is_refused():
    from triton.runtime.interpreter import InterpretedFunction

    from triton_kernels import scale_kernel

    job = dataclasses.replace(_scale_job(), kernel=InterpretedFunction(scale_kernel.fn))
    with pytest.raises(CompileHarnessError, match="TRITON_INTERPRET"):
        compile_for(job, get_device("H200"))


def test_cpu_spec_is_refused():
    from polyrec.hardware.detect import cpu_spec

    with pytest.raises(CompileHarnessError, match="no Triton target"):
        compile_for(_scale_job(), cpu_spec())


def test_distinct_targets_dedupes_same_chip():
    specs = distinct_targets(list(catalog().values()))
    names = {s.name for s in specs}
    assert not {"H100", "H200"} <= names  # same sm_90 target and limits: compile once
    arches = {(s.triton.backend, s.triton.arch) for s in specs}
    assert {("cuda", 90), ("hip", "gfx942"), ("hip", "gfx950")} <= arches


@pytest.mark.parametrize("device", TARGETS)
def test_calibration_probe_compiles_everywhere(device):
    from polyrec.hardware.probes import compile_jobs

    spec = get_device(device)
    assert all(compile_for(job, spec).fits for job in compile_jobs(spec))
