"""``polyrec migrate scan``: walk files, run the Python and CUDA rules, collect a ScanResult."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

from polyrec.migrate.rules import RULES
from polyrec.migrate.scan_cuda import ParserMissing, scan_cuda
from polyrec.migrate.scan_python import scan_python
from polyrec.migrate.types import Finding, ScanResult, Severity
from polyrec.migrate.walk import not_a_file, tree_files

PYTHON_SUFFIXES = frozenset({".py"})
CUDA_SUFFIXES = frozenset({".cu", ".cuh", ".cpp", ".cc", ".cxx", ".h", ".hpp"})


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
    """Scan files and directories. ``rules`` keeps only those IDs; ``min_severity`` drops milder ones."""
    unknown = (rules or set()) - set(RULES)
    if unknown:
        raise KeyError(f"scan: unknown rule id(s) {sorted(unknown)}; known: {', '.join(RULES)}")
    start = time.perf_counter()
    result = ScanResult()
    for file, shown in iter_sources(paths, result.not_scanned):
        try:
            data = file.read_bytes()
        except OSError as exc:  # unreadable (permissions), or gone since the walk
            result.not_scanned[shown] = f"cannot read: {exc.strerror or exc}"
            continue
        if b"\0" in data:  # UTF-16 / UTF-32 text or a binary: read as UTF-8 bytes it looked clean (hipify skips it)
            result.not_scanned[shown] = ("NUL bytes: a binary file, or text that is not UTF-8 (UTF-16?); save it "
                                         "as UTF-8 to scan it")
            continue
        try:
            found = scan_file(shown, data)
        except (ParserMissing, UnsupportedFile) as exc:
            result.not_scanned[shown] = str(exc)
            continue
        except SyntaxError as exc:
            result.not_scanned[shown] = f"Python syntax error line {exc.lineno}: {exc.msg}"
            continue
        except (RecursionError, MemoryError) as exc:
            result.not_scanned[shown] = (f"nested too deeply for the scanner ({type(exc).__name__}); "
                                         "scan it by hand or split the expression")
            continue
        except Exception as exc:  # noqa: BLE001 - one odd file must not abort the scan of a whole tree
            result.not_scanned[shown] = f"scanner error: {type(exc).__name__}: {exc}"
            continue
        result.files_scanned += 1
        result.lines_scanned += len(data.splitlines())  # lines end at LF, CR LF or a lone CR (old Mac files)
        result.findings += [f for f in found if (rules is None or f.rule in rules)
                            and RULES[f.rule].severity.rank >= min_severity.rank]
    result.findings.sort(key=lambda f: (f.path, f.line, f.column, f.rule))
    result.seconds = time.perf_counter() - start
    return result


def exit_code(result: ScanResult, fail_on: Severity) -> int:
    """0: clean; 1: a finding at or above ``fail_on``; 2: some files could not be scanned."""
    if not result.complete:
        return 2
    return int(any(RULES[f.rule].severity.rank >= fail_on.rank for f in result.findings))
