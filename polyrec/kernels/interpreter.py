"""Running the kernels on the CPU through Triton's interpreter (``TRITON_INTERPRET=1``).

Triton 3.6's interpreter runs an ``associative_scan`` with a combine function of its own (not a
plain sum or product) one element at a time: a Python call of the combine per element of the
scanned block (``ScanOps.generic_scan``). The TBE's segmented sum scans [TILE, BLOCK_D] blocks, so
that loop was ~90% of an interpreted training step (profile of a dcnv2-small step, 2026-12-01).
``scan_by_slices`` computes the same scan with one combine call per position along the scanned axis,
on the whole slice across the other axes: the same combines in the same order, element by element,
so the results are bitwise those of the interpreter's loop (``tests/test_interpreter.py``).
"""

from __future__ import annotations

import os

import numpy as np


def interpreting() -> bool:
    """Whether the Triton CPU interpreter runs kernels (``TRITON_INTERPRET`` set)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def scan_by_slices(self, inputs):
    """``ScanOps.generic_scan`` (same arguments and result) with the combine applied to whole slices
    across the axes other than the scanned one: out[k] = combine(out[k - 1], in[k])."""
    import triton.language as tl

    data = [arg.handle.data for arg in inputs]
    out = [np.empty_like(x) for x in data]

    def at(array, k):  # position k along the scanned axis, kept as an axis of 1 (a view, also in 1-D)
        return array[(slice(None),) * self.axis + (slice(k, k + 1),)]

    def tensor(array, j):
        return self.to_tensor(np.array(array, dtype=data[j].dtype), inputs[j].dtype)

    for j, x in enumerate(data):
        at(out[j], 0)[...] = at(x, 0)
    for k in range(1, data[0].shape[self.axis]):
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
