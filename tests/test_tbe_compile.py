"""Every config the embedding selector can choose compiles for cuda:90, gfx942 and gfx950 and fits."""

from __future__ import annotations

import pytest

from polyrec.hardware.catalog import get_device
from polyrec.hardware.compile import compile_for


@pytest.mark.compile
@pytest.mark.parametrize("device", ["H200", "MI300X", "MI350X"])
def test_tbe_configs_fit(device):
    from polyrec.kernels.tbe_compile import compile_jobs

    spec = get_device(device)
    for job in compile_jobs(spec):
        report = compile_for(job, spec)
        assert report.fits, (job.label, report)  # SGPR spills (AMD) go to VGPR lanes: not a problem
