"""Every config the embedding selector can choose compiles for cuda:90, gfx942 and gfx950 and fits."""

from __future__ import annotations

import re

import pytest

from polyrec.hardware.catalog import get_device
from polyrec.hardware.compile import compile_for


def _memory_spills_amd(job, spec) -> tuple[int, int]:
    """(VGPR spills, scratch bytes) of an AMD compile (a cache hit after compile_for)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    target = GPUTarget(spec.triton.backend, spec.triton.arch, spec.triton.warp_size)
    asm = triton.compile(ASTSource(job.kernel, signature=job.signature, constexprs=job.constexprs), target=target,
                         options={"num_warps": job.num_warps, "num_stages": job.num_stages}).asm["amdgcn"]
    vgpr = sum(int(x) for x in re.findall(r"\.vgpr_spill_count:\s+(\d+)", asm))
    scratch = sum(int(x) for x in re.findall(r"\.private_segment_fixed_size:\s+(\d+)", asm))
    return vgpr, scratch


@pytest.mark.compile
@pytest.mark.parametrize("device", ["H200", "MI300X", "MI350X"])
def test_tbe_configs_fit(device):
    from polyrec.kernels.tbe_compile import compile_jobs

    spec = get_device(device)
    for job in compile_jobs(spec):
        report = compile_for(job, spec)
        if report.fits:
            continue
        # AMD: SGPR spills go to VGPR lanes (no memory traffic); anything else is a failure.
        assert spec.vendor == "amd" and all(p.startswith("spills") for p in report.problems), (job.label, report)
        assert _memory_spills_amd(job, spec) == (0, 0), (job.label, report)
