"""The files under a folder, for scan and hipify: sorted, ``SKIP_DIRS`` left out, folders that cannot be listed
named (pathlib's ``rglob`` skips them without a word, so a locked folder's files went unreported)."""

from __future__ import annotations

import os
from pathlib import Path

from polyrec.migrate.types import SKIP_DIRS


def tree_files(root: Path, unlisted: dict[str, str]) -> list[Path]:
    """Every non-folder entry under ``root`` (files, links to files, dangling links...), sorted; links to folders are
    not followed. A folder that cannot be listed goes into ``unlisted`` (its path, as under ``root``, -> why)."""
    def refused(exc: OSError) -> None:
        unlisted[str(exc.filename)] = f"cannot list the folder: {exc.strerror or exc}"

    found = []
    for folder, dirs, names in os.walk(root, onerror=refused):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        found += [Path(folder, name) for name in names]
    return sorted(found)
