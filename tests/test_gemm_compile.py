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
    """``gemm_configs.compile_jobs``: the selector's config for every suite shape with its epilogue
    and B layout (on the H200 the persistent TMA kernel's where it is picked), and the reduction."""
    from polyrec.hardware.compile import compile_for
    from polyrec.kernels.gemm_configs import compile_jobs

    if name not in catalog():
        pytest.skip(f"{name} data file not in the catalog yet")
    spec = get_device(name)
    failures = []
    for job in compile_jobs(spec):
        report = compile_for(job, spec)
        if not report.fits:
            failures.append(f"{job.label}: {', '.join(report.problems)}")
    assert not failures, "\n".join(failures)


def test_every_tma_config_compiles_for_sm90_with_each_epilogue_it_is_offered_for():
    """Each TMA config of the H200 space fits sm_90 (shared memory, registers, no spills) with the
    largest epilogue the footprint model lets the selector offer it for, within the model's shared
    memory; two programs per SM fit together."""
    from polyrec.hardware.compile import compile_for
    from polyrec.kernels.gemm_configs import config_space
    from polyrec.kernels.gemm_kernels import compile_job_for
    from polyrec.perfmodel.gemm_footprint import footprint

    spec = get_device("H200")
    failures = []
    for config in (c for c in config_space(spec, "bf16") if c.persistent_tma):
        # the largest epilogue the model offers it for: cross (most shared memory and registers)
        epilogue = "cross" if footprint(config, "bf16", spec, "cross").fits else "bias_relu"
        fp = footprint(config, "bf16", spec, epilogue)
        if fp.fits:
            report = compile_for(compile_job_for(config, "bf16", spec, epilogue=epilogue, trans_b=True), spec)
            if not report.fits:
                failures.append(f"{config.label} {epilogue}: {', '.join(report.problems)}")
            elif report.shared_bytes > fp.smem_bytes:
                failures.append(f"{config.label} {epilogue}: {report.shared_bytes} B shared > model {fp.smem_bytes}")
            elif fp.programs_per_cu >= config.ctas_per_sm and config.ctas_per_sm * report.shared_bytes > spec.smem_per_cu:
                failures.append(f"{config.label} {epilogue}: {config.ctas_per_sm} programs do not fit one SM")
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


@pytest.mark.parametrize("name, precision, mfma", [("H200", "tf32", None), ("MI300X", "tf32", "xf32"),
                                                   ("MI350X", "ieee", None)])
def test_a_tf32_gemm_takes_the_targets_tf32_dot(name, precision, mfma):
    """A tf32 GEMM ran IEEE fp32 on every AMD target (a quarter of MI300X's XF32 rate, while the model priced
    it at the fp32 rate); Triton 3.6 has XF32 on gfx942 (its ``v_mfma_*_xf32``) and none on gfx950."""
    from polyrec.hardware.compile import compile_job
    from polyrec.kernels.gemm_configs import config_space
    from polyrec.kernels.gemm_kernels import compile_job_for, input_precision
    from polyrec.perfmodel.gemm import rate_dtype

    spec = get_device(name)
    assert input_precision("tf32", spec.triton) == precision and input_precision("fp32", spec.triton) == "ieee"
    assert rate_dtype("tf32", spec) == ("tf32" if precision == "tf32" else "fp32")
    if mfma is not None:
        config = next(c for c in config_space(spec, "tf32") if not c.persistent_tma and c.split_k == 1)
        assembly = compile_job(compile_job_for(config, "tf32", spec, epilogue="none"), spec).asm["amdgcn"]
        assert f"_{mfma}" in assembly
