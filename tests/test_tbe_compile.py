"""Every config the embedding selector can choose compiles for cuda:90, gfx942 and gfx950 and fits.

One test per (device, job): cold, the 267 compiles take ~1 s each, and as three tests of ~90 s they kept
one of CI's two workers busy long after the other had finished."""

from __future__ import annotations

import pytest

from polyrec.hardware.catalog import get_device
from polyrec.hardware.compile import compile_for
from polyrec.kernels.tbe_compile import compile_jobs

DEVICES = ("H200", "MI300X", "MI350X")


def _jobs() -> list:
    return [pytest.param(device, job, id=f"{device}-{job.label}")
            for device in DEVICES for job in compile_jobs(get_device(device))]


@pytest.mark.compile
@pytest.mark.parametrize("device, job", _jobs())
def test_tbe_config_fits(device, job):
    report = compile_for(job, get_device(device))
    assert report.fits, (job.label, report)  # SGPR spills (AMD) go to VGPR lanes: not a problem
