"""Shared by the compile-only tests: every launch config a kernel module's selector can choose must
compile and fit each target device (sm_90, gfx942, gfx950)."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

#: Devices whose compile target each kernel module is checked on (one per distinct target).
COMPILE_DEVICES = ("H200", "MI300X", "MI350X")
INTERPRETING = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def compile_only(test: Callable) -> Callable:
    """Mark a test compile-only: the Makefile runs these with the interpreter off."""
    return pytest.mark.compile(pytest.mark.skipif(INTERPRETING, reason="compile-only checks need TRITON_INTERPRET "
                                                  "unset")(test))


def unfit_jobs(compile_jobs: Callable, name: str) -> list[str]:
    """'label: problems' of each job of ``compile_jobs(spec)`` that does not fit device ``name``."""
    from polyrec.hardware.catalog import catalog, get_device
    from polyrec.hardware.compile import compile_for

    if name not in catalog():
        pytest.skip(f"{name} data file not in the catalog yet")
    spec = get_device(name)
    return [f"{job.label}: {', '.join(report.problems)}" for job in compile_jobs(spec)
            if not (report := compile_for(job, spec)).fits]
