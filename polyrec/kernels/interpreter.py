"""Running the kernels on the CPU through Triton's interpreter (``TRITON_INTERPRET=1``).

Triton 3.6's interpreter runs an ``associative_scan`` with a combine function of its own (not a
plain sum or product) one element at a time: a Python call of the combine per element of the
scanned block (``ScanOps.generic_scan``). The TBE's segmented sum scans [TILE, BLOCK_D] blocks, so
that loop was ~90% of an interpreted training step (profile of a dcnv2-small step, 2026-12-01).
``scan_by_slices`` computes the same scan with one combine call per position along the scanned axis,
on the whole slice across the other axes: the same combines in the same order, element by element,
so the results are bitwise those of the interpreter's loop (``tests/test_interpreter.py``).
Each call of a ``@triton.jit`` function inside a kernel re-patches ``triton.language`` for the
interpreter (``interpreter._patch_lang``: an ``inspect.getmembers`` walk over four modules, ~1 ms), though
the launch running it has patched the same modules already and restores them when it ends;
``install_patch_once`` lets a launch patch once (a third of an interpreted training step).
A combine with a numpy form (``numpy_combine``) is applied as that form, on the slices' arrays, where every
input is 32-bit: the same elementwise operations without the interpreter's per-call type checks and
broadcasts (the TBE's ``segment_add``). A dcnv2-small training step interpreted: 2.2 s -> 1.0 with the numpy
``segment_add``, -> 0.7 with one patch per launch (2026-12-04, dev CPU).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

#: numpy forms of scan combine functions, by the Triton function's Python function (``numpy_combine``).
NUMPY_COMBINES: dict[Callable, Callable] = {}


def numpy_combine(jit_fn, numpy_fn: Callable) -> None:
    """Scan by slices with ``numpy_fn`` (numpy arrays in, a tuple of arrays out, in the Triton combine
    ``jit_fn``'s order) where ``jit_fn`` combines 32-bit inputs: it must compute what the interpreter
    computes for ``jit_fn``, element by element (a test in ``tests/test_interpreter.py`` for each)."""
    NUMPY_COMBINES[jit_fn.fn] = numpy_fn


def interpreting() -> bool:
    """Whether the Triton CPU interpreter runs kernels (``TRITON_INTERPRET`` set)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def scan_by_slices(self, inputs):
    """``ScanOps.generic_scan`` (same arguments and result) with the combine applied to whole slices
    across the axes other than the scanned one: out[k] = combine(out[k - 1], in[k])."""
    import triton.language as tl

    data = [arg.handle.data for arg in inputs]
    out = [np.empty_like(x) for x in data]
    twin = NUMPY_COMBINES.get(getattr(self.combine_fn, "fn", None))
    if twin is not None and not all(x.dtype in (np.float32, np.int32) for x in data):
        twin = None  # half-precision data: the interpreter's own arithmetic, through the Triton combine

    def at(array, k):  # position k along the scanned axis, kept as an axis of 1 (a view, also in 1-D)
        return array[(slice(None),) * self.axis + (slice(k, k + 1),)]

    def tensor(array, j):
        return self.to_tensor(np.array(array, dtype=data[j].dtype), inputs[j].dtype)

    for j, x in enumerate(data):
        at(out[j], 0)[...] = at(x, 0)
    for k in range(1, data[0].shape[self.axis]):
        if twin is not None:
            for j, value in enumerate(twin(*(at(o, k - 1) for o in out), *(at(x, k) for x in data))):
                at(out[j], k)[...] = value
            continue
        combined = self.combine_fn.fn(*(tensor(at(o, k - 1), j) for j, o in enumerate(out)),
                                      *(tensor(at(x, k), j) for j, x in enumerate(data)))
        combined = combined if isinstance(combined, tuple) else (combined,)
        for j, value in enumerate(combined):
            at(out[j], k)[...] = value.handle.data if isinstance(value, tl.core.tensor) else value
    return [self.to_tensor(o, inputs[j].dtype) for j, o in enumerate(out)]


def install_scan_by_slices() -> bool:
    """Replace the interpreter's element-by-element generic scan with ``scan_by_slices``, kept as
    ``ScanOps.generic_scan_by_elements``; returns whether it is in place (False when this Triton has no
    ``ScanOps.generic_scan`` to replace)."""
    from triton.runtime import interpreter

    scan_ops = getattr(interpreter, "ScanOps", None)
    if scan_ops is None or not hasattr(scan_ops, "generic_scan"):
        return False
    if scan_ops.generic_scan is not scan_by_slices:
        scan_ops.generic_scan_by_elements = scan_ops.generic_scan
        scan_ops.generic_scan = scan_by_slices
    return True


#: The launch running now (``GridExecutor.__call__``, one at a time: the interpreter runs a grid in turn):
#: "langs", the language modules its patches cover so far (None before its first).
_LAUNCH: dict[str, frozenset | None] = {}


def _language_modules(fn) -> frozenset:
    """The modules ``interpreter._patch_lang`` patches for ``fn``: triton.language / triton.language.core
    where ``fn``'s globals name them."""
    import triton.language as tl

    return frozenset(id(v) for v in fn.__globals__.values() if v is tl or v is tl.core)


def install_patch_once() -> bool:
    """Make the interpreter patch each language module once per launch: a ``@triton.jit`` function called
    inside a kernel skips ``_patch_lang`` where the launch's patches cover its language modules (the
    patch it would apply is the one in place: the kernel's own, or that of an earlier call naming
    ``triton.language.core``, as Triton's own functions do); outside a launch, as before.
    Returns whether it is in place (False when this Triton lacks the pieces it wraps)."""
    from triton.runtime import interpreter

    grid = getattr(interpreter, "GridExecutor", None)
    patch = getattr(interpreter, "_patch_lang", None)
    scope = getattr(interpreter, "_LangPatchScope", None)
    if grid is None or patch is None or scope is None:
        return False
    if hasattr(patch, "each_call"):
        return True
    launch_call = grid.__call__

    def patch_once(fn):
        langs = _language_modules(fn)
        covered = _LAUNCH.get("langs")
        if covered is not None and langs <= covered:
            return scope()  # nothing patched, nothing to restore
        patched = patch_once.each_call(fn)
        if "langs" in _LAUNCH:  # in place until the launch ends (a nested call's patch is never undone)
            _LAUNCH["langs"] = langs | (covered or frozenset())
        return patched

    def launch(self, *args, **kwargs):
        _LAUNCH["langs"] = None
        try:
            return launch_call(self, *args, **kwargs)
        finally:
            _LAUNCH.clear()

    patch_once.each_call = patch  # the interpreter's own (an attribute: tests count its calls)
    interpreter._patch_lang = patch_once
    grid.__call__ = launch
    return True
