"""Every GEMM config the selector picks for the DLRM suite compiles for H200 (cuda:90), MI300X
(gfx942) and MI350X (gfx950) on the CPU and fits shared memory / LDS and registers without spills."""

from __future__ import annotations

import os

import pytest

from polyrec.hardware.catalog import catalog, get_device

pytestmark = [pytest.mark.compile,
              pytest.mark.skipif(os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"),
                                 reason="compile-only checks need TRITON_INTERPRET unset")]


@pytest.mark.parametrize("name", ["H200", "MI300X", "MI350X"])
def test_selected_configs_compile_and_fit(name):
    from polyrec.hardware.compile import compile_for
    from polyrec.kernels.gemm_kernels import compile_job_for, reduce_compile_job
    from polyrec.kernels.gemm_configs import dlrm_suite
    from polyrec.kernels.gemm_select import select_gemm

    if name not in catalog():
        pytest.skip(f"{name} data file not in the catalog yet")
    spec = get_device(name)
    chosen = {}
    for s in dlrm_suite():
        config = select_gemm(s.m, s.n, s.k, "bf16", spec, epilogue=s.epilogue).config
        epilogue = s.epilogue if s.epilogue in ("none", "cross", "bias_relu") else "bias_relu"
        chosen.setdefault((config, epilogue), s.name)
    jobs = [compile_job_for(c, "bf16", spec, epilogue=e) for c, e in chosen]
    jobs.append(reduce_compile_job("bf16"))
    failures = []
    for job in jobs:
        report = compile_for(job, spec)
        if not report.fits:
            failures.append(f"{job.label}: {', '.join(report.problems)}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("name", ["H200", "MI300X", "MI350X"])
def test_fused_cross_backward_epilogues_compile_and_fit(name):
    """The cross network's backward epilogues (CrossGrad on the recompute GEMM, residual on the
    projection dgrad, and both in the split-K reduction) with the configs the selector picks."""
    from polyrec.hardware.compile import compile_for
    from polyrec.kernels.dcn import compile_jobs

    if name not in catalog():
        pytest.skip(f"{name} data file not in the catalog yet")
    spec = get_device(name)
    failures = []
    for job in compile_jobs(spec):
        report = compile_for(job, spec)
        if not report.fits:
            failures.append(f"{job.label}: {', '.join(report.problems)}")
    assert not failures, "\n".join(failures)
