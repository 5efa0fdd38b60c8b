"""Output paths that must not replace an input: ``scan --sarif`` against the scanned files, ``port -o`` against
the kernel and the reference. Both write through ``polyrec.files`` (a temporary file renamed over the output),
so an output that is a link is replaced, not written through; what is left to refuse is an output whose place
is an input's."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path


def places(path: Path) -> set[Path]:
    """Where ``path`` is: its directory entry (the folder resolved, the name kept) and the file it leads to (every
    link followed). Two paths name the same file when their places meet (``a.cu``, ``./d/../a.cu``, a link to it)."""
    return {path.absolute().parent.resolve() / path.name, path.resolve()}


def refuse_overwrite(outputs: Iterable[Path], inputs: Iterable[Path], what: str, instead: str) -> None:
    """ValueError at the first of ``outputs`` whose place is one of ``inputs``': writing it would replace that
    input. ``what`` names the option that gave the outputs (``--sarif``), ``instead`` what to do."""
    taken = {place: source for source in inputs for place in places(source)}
    for out in outputs:
        hit = next((taken[place] for place in sorted(places(out)) if place in taken), None)
        if hit is not None:
            raise ValueError(f"{what}: writing {out} would overwrite the input {hit}; {instead}")
