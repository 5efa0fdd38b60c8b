"""Compile a run's Triton kernels in parallel before they first launch.

Triton compiles a kernel when it is first launched, and each launch waits for its own compile: a cold
first training step compiles its ~35 kernels one after another (15.8 s of the first 5 steps on the H200 for
full-size MLPerf DLRM-DCNv2 in fp8, ``benchmarks/results/cold_start_2026-12-04/``). Which kernels a step launches, with
which specializations (argument dtypes, 16-byte alignment, constexprs, warps), is known only by running
it. So a caller runs the step once under :func:`recording_launches`, where no Triton kernel compiles or
runs and each launch of a kernel not yet compiled is recorded, then hands the records to
:func:`compile_recorded`, which compiles them on a thread pool (Triton's ``AsyncCompileMode``) into the
kernels' own JIT caches and builds their launchers: the real step's launches then find them compiled.

Everything a recorded step computes is garbage (no Triton kernel wrote its outputs): the caller must
put back any state the step's torch ops changed (``polyrec.runtime.cold_start``).

This reaches into Triton 3.6's ``JITFunction`` (its ``run``, ``_do_compile`` and ``device_caches``) and its
driver's ``launcher_cls``: :func:`supported` says whether the installed Triton's ``_do_compile`` is the one
this module expects; a Triton that differs elsewhere fails :func:`compile_recorded`, and the trainer reports
that and goes on without the precompile.
"""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

#: ``JITFunction._do_compile``'s parameters in Triton 3.6 (triton/runtime/jit.py), which a record replays.
DO_COMPILE_PARAMETERS = ("self", "key", "signature", "device", "constexprs", "options", "attrs", "warmup")


@dataclass(frozen=True, slots=True)
class RecordedCompile:
    """One compile a launch asked for: ``JITFunction._do_compile``'s arguments."""

    kernel: Any  # the JITFunction
    key: str  # its JIT cache key (specialization and options)
    signature: dict
    device: int
    constexprs: dict
    options: Any  # the backend's options object
    attrs: dict

    @property
    def name(self) -> str:
        return self.kernel.fn.__qualname__


def supported() -> bool:
    """Whether Triton's JIT is the one this module drives (not the interpreter, ``_do_compile`` as in 3.6)."""
    from triton.runtime.jit import JITFunction

    do_compile = getattr(JITFunction, "_do_compile", None)
    if do_compile is None or tuple(inspect.signature(do_compile).parameters) != DO_COMPILE_PARAMETERS:
        return False
    try:
        from triton.runtime._async_compile import AsyncCompileMode  # noqa: F401
    except ImportError:
        return False
    return os.environ.get("TRITON_INTERPRET", "0") in ("", "0")


@contextmanager
def recording_launches() -> Iterator[list[RecordedCompile]]:
    """Within: every Triton launch neither compiles nor runs; a launch of a kernel whose specialization is
    not compiled yet appends its compile to the yielded list (once per kernel and key)."""
    from triton.runtime.jit import JITFunction

    if not supported():
        raise RuntimeError("recording_launches needs Triton 3.6's JIT (not the interpreter)")
    records: list[RecordedCompile] = []
    seen: set[tuple[int, str]] = set()
    run, do_compile = JITFunction.run, JITFunction._do_compile

    def record(self, key, signature, device, constexprs, options, attrs, warmup):
        if (id(self), key) not in seen:
            seen.add((id(self), key))
            records.append(RecordedCompile(kernel=self, key=key, signature=signature, device=device,
                                           constexprs=constexprs, options=options, attrs=attrs))
        return None  # run() returns at once for a kernel it has no compile of

    def compile_only(self, *args, grid, warmup, **kwargs):
        return run(self, *args, grid=grid, warmup=True, **kwargs)  # a compiled kernel is found, not launched

    JITFunction.run, JITFunction._do_compile = compile_only, record
    try:
        yield records
    finally:
        JITFunction.run, JITFunction._do_compile = run, do_compile


def compile_recorded(records: list[RecordedCompile], *, threads: int | None = None) -> float:
    """Compile ``records`` on ``threads`` (default: one per CPU core) into their kernels' JIT caches, then
    build their launchers (:func:`build_launcher`, one per :func:`launcher_key`) on the same threads; returns
    the wall seconds. A failing compile or build raises here, as the launch would have."""
    from triton.runtime._async_compile import AsyncCompileMode

    start = time.perf_counter()
    if records:
        workers = max(1, min(threads or os.cpu_count() or 1, len(records)))
        with ThreadPoolExecutor(workers) as pool:
            with AsyncCompileMode(pool):
                for r in records:
                    r.kernel._do_compile(r.key, r.signature, r.device, r.constexprs, r.options, r.attrs, True)
            by_launcher = {launcher_key(k): k for k in (compiled(r) for r in records)}
            list(pool.map(build_launcher, by_launcher.values()))
    return time.perf_counter() - start


def compiled(record: RecordedCompile) -> Any:
    """The ``CompiledKernel`` a replayed record left in its kernel's JIT cache (Triton 3.6's
    ``JITFunction.device_caches[device]``: the kernel cache first)."""
    return record.kernel.device_caches[record.device][0][record.key]


def launcher_key(kernel: Any) -> tuple:
    """What a ``CompiledKernel``'s launcher source is made of in Triton 3.6 (``make_launcher`` of the NVIDIA
    and AMD drivers): its argument types in order, its tensor descriptors' metadata and, on AMD, the warp
    size; not the constexprs' values. Kernels alike in these share one launcher, so it is built once
    (full-size MLPerf's fp8 step compiles 35 kernels with 20 lists of argument types,
    benchmarks/results/cold_start_2026-12-04/launchers/). A key finer than the source would cost a repeated
    build; a coarser one, a build at the first launch (``tests/gpu/test_cold_start_gpu.py`` counts those)."""
    metadata = kernel.metadata
    return (tuple(kernel.src.signature.values()), repr(getattr(metadata, "tensordesc_meta", None)),
            getattr(metadata, "warp_size", None))


def build_launcher(kernel: Any) -> None:
    """Build the host launcher of a ``CompiledKernel`` into Triton's cache. Triton 3.6 builds it at the
    kernel's first launch (``CompiledKernel._init_handles``: ``driver.active.launcher_cls``), a C module per
    argument signature compiled by the host's C compiler when its cache has none, one after another: after
    the parallel compiles alone, full-size MLPerf's first eager step took 4.10 s; with the launchers built
    here, 0.04 s (benchmarks/results/cold_start_2026-12-04/). The first launch then loads the cached module."""
    from triton.runtime.driver import driver

    driver.active.launcher_cls(kernel.src, kernel.metadata)
