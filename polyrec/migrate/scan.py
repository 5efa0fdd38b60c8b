"""``polyrec migrate scan``: walk files, run the Python and CUDA rules, collect a ScanResult."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from polyrec.migrate.imports import ModuleIndex, PythonModule, follow_imports, python_module
from polyrec.migrate.rules import RULES
from polyrec.migrate.scan_cuda import ParserMissing, scan_cuda
from polyrec.migrate.scan_python import parse_python, scan_parsed, scan_python
from polyrec.migrate.types import Finding, ScanResult, Severity
from polyrec.migrate.walk import not_a_file, tree_files
from polyrec.migrate.wrappers import num_warps_wrappers

PYTHON_SUFFIXES = frozenset({".py"})
CUDA_SUFFIXES = frozenset({".cu", ".cuh", ".cpp", ".cc", ".cxx", ".h", ".hpp"})
_T = TypeVar("_T")


class UnsupportedFile(ValueError):
    """A file named on the command line whose suffix no scanner reads."""


def iter_sources(paths: Iterable[Path], unlisted: dict[str, str] | None = None) -> list[tuple[Path, str]]:
    """(file, display path) for every scannable file under the given files/directories, sorted per root; what the
    walk misses (folders that cannot be listed, links to folders outside the paths, dangling links) goes into
    ``unlisted`` (display path -> why) when given. A file
    reached under several names (named twice, ``scan d d/a.cu``, or through a link) is listed once (its findings
    and lines were counted twice), under the name that passes through the fewest links, the first of those: the
    file's own name, not a link's that sorted first (``link.cu`` before ``reduce.cu``)."""
    chosen: dict[Path, tuple[Path, str]] = {}  # the real file -> the name it is scanned under
    unlisted = {} if unlisted is None else unlisted
    paths = list(paths)
    for root in paths:
        if not root.exists():
            raise FileNotFoundError(f"scan: {root} does not exist")
        for file, shown in [(root, str(root))] if root.is_file() else _tree(root, unlisted, paths):
            real = file.resolve()
            if real not in chosen or _links_on_the_way(file) < _links_on_the_way(chosen[real][0]):
                chosen[real] = (file, shown)
    return list(chosen.values())


def _links_on_the_way(file: Path) -> int:
    """How many symbolic links ``file``'s name passes through: its folders' and its own."""
    parts = file.absolute().parts
    return sum(Path(*parts[:i]).is_symlink() for i in range(2, len(parts) + 1))


def _tree(root: Path, unlisted: dict[str, str], roots: list[Path]) -> Iterable[tuple[Path, str]]:
    """(file, display path) of the scannable files under directory ``root``, sorted, ``SKIP_DIRS`` left out; what
    the walk misses goes into ``unlisted``: folders that cannot be listed, links to folders not under one of
    ``roots`` (the scan's paths), and dangling links or other non-files named like a source."""
    def shown(path: Path) -> str:
        return str(path) if str(root) != "." else str(path.relative_to(root))

    found: dict[str, str] = {}
    for file in tree_files(root, found, also_walked=roots):
        if file.suffix not in PYTHON_SUFFIXES | CUDA_SUFFIXES:
            continue
        if (why := not_a_file(file)) is None:
            yield file, shown(file)
        else:
            unlisted[shown(file)] = why
    unlisted.update({shown(Path(folder)): why for folder, why in found.items()})


def scan_file(path: str, data: bytes) -> list[Finding]:
    """Findings in one file's bytes; the language comes from the suffix.

    Raises ParserMissing for a CUDA file without tree-sitter-cuda, SyntaxError for bad Python and
    UnsupportedFile for another suffix.
    """
    suffix = Path(path).suffix
    if suffix in PYTHON_SUFFIXES:
        return scan_python(path, data)
    if suffix in CUDA_SUFFIXES:
        return scan_cuda(path, data)
    read = ", ".join(sorted(PYTHON_SUFFIXES | CUDA_SUFFIXES))
    raise UnsupportedFile(f"unsupported file type {suffix!r} (expected {read})")


def scan_paths(paths: Iterable[Path], *, rules: set[str] | None = None,
               min_severity: Severity = Severity.NOTE) -> ScanResult:
    """Scan files and directories. ``rules`` keeps only those IDs; ``min_severity`` drops milder ones. A Python file
    that imports a num_warps wrapper from another file of the scan is scanned again once all are read."""
    unknown = (rules or set()) - set(RULES)
    if unknown:
        raise KeyError(f"scan: unknown rule id(s) {sorted(unknown)}; known: {', '.join(RULES)}")
    start = time.perf_counter()
    result = ScanResult()
    paths = list(paths)
    sources = iter_sources(paths, result.not_scanned)
    index = ModuleIndex(paths, [(file, shown) for file, shown in sources if file.suffix in PYTHON_SUFFIXES])
    scanned: dict[str, tuple[int, list[Finding]]] = {}  # display path -> its lines, its findings
    modules = []
    for file, shown in sources:
        if (data := _read(file, shown, result.not_scanned)) is None:
            continue
        if file.suffix not in PYTHON_SUFFIXES:
            found = _attempt(shown, result.not_scanned, scan_file, shown, data)
        elif (read := _attempt(shown, result.not_scanned, _read_python, shown, data, index)) is not None:
            modules.append(read[0])
            found = read[1]
        else:
            continue
        if found is not None:
            scanned[shown] = (len(data.splitlines()), found)  # lines end at LF, CR LF or a lone CR (old Mac files)
    for shown, (parsed, wrappers) in follow_imports(modules, index).items():  # again, imported wrappers known
        lines, _ = scanned.pop(shown)
        if (found := _attempt(shown, result.not_scanned, scan_parsed, parsed, wrappers)) is not None:
            scanned[shown] = (lines, found)
    result.files_scanned = len(scanned)
    result.lines_scanned = sum(lines for lines, _ in scanned.values())
    result.findings = sorted((f for _, found in scanned.values() for f in found if (rules is None or f.rule in rules)
                              and RULES[f.rule].severity.rank >= min_severity.rank),
                             key=lambda f: (f.path, f.line, f.column, f.rule))
    result.seconds = time.perf_counter() - start
    return result


def _read_python(shown: str, data: bytes, index: ModuleIndex) -> tuple[PythonModule, list[Finding]]:
    """A Python file parsed once: what the cross-file pass keeps of it, and its findings with its own wrappers."""
    parsed = parse_python(shown, data)
    wrappers = num_warps_wrappers(parsed.tree)
    return python_module(parsed, data, wrappers, index), scan_parsed(parsed, wrappers)


def _read(file: Path, shown: str, not_scanned: dict[str, str]) -> bytes | None:
    """A file's bytes; None, and why in ``not_scanned``, for one that cannot be read or is not text."""
    try:
        data = file.read_bytes()
    except OSError as exc:  # unreadable (permissions), or gone since the walk
        not_scanned[shown] = f"cannot read: {exc.strerror or exc}"
        return None
    if b"\0" in data:  # UTF-16 / UTF-32 text or a binary: read as UTF-8 bytes it looked clean (hipify skips it)
        not_scanned[shown] = ("NUL bytes: a binary file, or text that is not UTF-8 (UTF-16?); save it as UTF-8 to "
                              "scan it")
        return None
    return data


def _attempt(shown: str, not_scanned: dict[str, str], step: Callable[..., _T], *args: object) -> _T | None:
    """What ``step(*args)`` returns for file ``shown``; None, and why in ``not_scanned``, where it raises."""
    try:
        return step(*args)
    except Exception as exc:  # noqa: BLE001 - one odd file must not abort the scan of a whole tree
        not_scanned[shown] = _why_not_scanned(exc)
        return None


def _why_not_scanned(exc: Exception) -> str:
    """What ScanResult.not_scanned says of a file whose scan raised ``exc``."""
    if isinstance(exc, (ParserMissing, UnsupportedFile)):
        return str(exc)
    if isinstance(exc, SyntaxError):
        return f"Python syntax error line {exc.lineno}: {exc.msg}"
    if isinstance(exc, (RecursionError, MemoryError)):
        return f"nested too deeply for the scanner ({type(exc).__name__}); scan it by hand or split the expression"
    return f"scanner error: {type(exc).__name__}: {exc}"


def exit_code(result: ScanResult, fail_on: Severity) -> int:
    """0: clean; 1: a finding at or above ``fail_on``; 2: some files could not be scanned."""
    if not result.complete:
        return 2
    return int(any(RULES[f.rule].severity.rank >= fail_on.rank for f in result.findings))
