"""Rule PM111: Triton configs that do not fit an AMD target, found by compiling them.

A user names functions that return the compile jobs of their kernels (``MODULE:FUNC``, called with a
DeviceSpec, returning ``polyrec.hardware.compile.CompileJob``s — the same protocol polyrec's own
kernels follow); every job is compiled for each AMD target with ``polyrec.hardware.compile`` on this
machine (no GPU needed) and each one whose LDS, registers or spills do not fit becomes a finding at
the kernel's definition. Importing the module runs the user's code, so it is opt-in
(``polyrec migrate scan --compile-jobs``), never implied by scanning a directory.
"""

from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import Iterable

from polyrec.hardware import get_device
from polyrec.hardware.compile import compile_for
from polyrec.migrate.types import Finding

#: AMD targets the check compiles for: CDNA3 (64 KiB LDS) and CDNA4 (160 KiB LDS).
AMD_TARGETS: tuple[str, ...] = ("MI300X", "MI350X")


def _jobs_function(ref: str):
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--compile-jobs takes MODULE:FUNC, got {ref!r}")
    return getattr(importlib.import_module(module_name), attr)


def _where(kernel) -> tuple[str, int]:
    fn = getattr(kernel, "fn", kernel)
    try:
        return inspect.getsourcefile(fn) or "<unknown>", inspect.getsourcelines(fn)[1]
    except (OSError, TypeError):
        return "<unknown>", 1


def compile_fit_findings(refs: Iterable[str], targets: Iterable[str] = AMD_TARGETS) -> list[Finding]:
    """PM111 findings for every compile job of ``refs`` that does not fit one of ``targets``."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise ValueError("--compile-jobs compiles for GPU targets: run with TRITON_INTERPRET unset")
    findings = []
    for ref in refs:
        jobs_for = _jobs_function(ref)
        for name in targets:
            spec = get_device(name)
            for job in jobs_for(spec):
                report = compile_for(job, spec)
                if report.fits:
                    continue
                path, line = _where(job.kernel)
                findings.append(Finding(rule="PM111", path=path, line=line, column=1,
                                        message=f"{job.label} on {spec.name} ({report.target}): "
                                                + "; ".join(report.problems),
                                        snippet=f"LDS {report.shared_bytes} B, {report.registers} VGPRs"))
    return findings
