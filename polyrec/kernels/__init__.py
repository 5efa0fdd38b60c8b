"""Triton kernels: each with a thin launcher, a torch reference, a config space and compile jobs.

A kernel gets its launch configuration only from its selector, which asks ``polyrec.perfmodel``.
Under Triton's CPU interpreter, importing this package swaps the interpreter's element-by-element
scan for ``interpreter.scan_by_slices`` (bitwise the same results, ~100x fewer Python calls) and has
each launch patch ``triton.language`` once (``interpreter.install_patch_once``).
"""

from polyrec.kernels.interpreter import install_patch_once, install_scan_by_slices, interpreting

if interpreting():
    install_scan_by_slices()
    install_patch_once()
