"""Small interfaces of the migration assistant: rules, findings, scan results."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

#: Folders a tree walk leaves out (scan and hipify): tools' and environments' copies, not the project's sources.
SKIP_DIRS = frozenset({".git", ".venv", "venv", "node_modules", "__pycache__", ".mypy_cache", ".tox", "build"})


class Severity(str, Enum):
    """How sure we are that the code misbehaves on AMD. Values are SARIF ``level`` names."""

    ERROR = "error"  # fails to build or gives wrong results on AMD
    WARNING = "warning"  # misbehaves on some AMD devices or silently takes a slower/other path
    NOTE = "note"  # works after hipify with a ROCm library; worth a look

    @property
    def rank(self) -> int:
        return {"note": 0, "warning": 1, "error": 2}[self.value]


@dataclass(frozen=True, kw_only=True, slots=True)
class Rule:
    """One hazard in the catalog. ``id`` never changes once published; ``name`` is its slug."""

    id: str  # e.g. "PM102"
    name: str  # e.g. "lane-mask-32bit"
    severity: Severity
    languages: tuple[str, ...]  # "cuda" (.cu/.cuh/.cpp/.h) and/or "python"
    summary: str  # one line
    explanation: str  # why it breaks on AMD
    fix: str  # what to do instead
    sources: tuple[str, ...] = ()  # where the fact comes from (docs, real fixes)


@dataclass(frozen=True, kw_only=True, slots=True)
class Finding:
    """One occurrence of a rule in a file. Lines and columns are 1-based; columns count characters
    (``text_column``), as SARIF's ``unicodeCodePoints``."""

    rule: str  # Rule.id
    path: str  # as given to the scanner (relative where the scan root was a directory)
    line: int
    column: int
    message: str  # specific to this occurrence
    snippet: str = ""  # the source text that triggered it, one line


@dataclass(kw_only=True, slots=True)
class ScanResult:
    """Everything one scan produced."""

    findings: list[Finding] = field(default_factory=list)
    files_scanned: int = 0
    lines_scanned: int = 0
    not_scanned: dict[str, str] = field(default_factory=dict)  # path -> why (parser missing, syntax error)
    seconds: float = 0.0

    @property
    def complete(self) -> bool:
        return not self.not_scanned


def text_column(line: str, byte_offset: int) -> int:
    """The 1-based column, in characters, of UTF-8 byte ``byte_offset`` (0-based) of ``line``: ast's col_offset and
    tree-sitter's points count bytes, which pointed past a finding after non-ASCII text on its line."""
    return len(line.encode("utf-8", "surrogateescape")[:byte_offset].decode("utf-8", "replace")) + 1
