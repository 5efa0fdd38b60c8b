"""The files under a folder, for scan and hipify: sorted, ``SKIP_DIRS`` left out, and each folder whose files the walk
misses named: one that cannot be listed (pathlib's ``rglob`` skips it without a word, so a locked folder's files
went unreported) and a symbolic link to a folder, which is not followed (a cycle, or a walk out of the tree)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from polyrec.migrate.types import SKIP_DIRS


def tree_files(root: Path, missed: dict[str, str], *, also_walked: Iterable[Path] = ()) -> list[Path]:
    """Every non-folder entry under ``root`` (files, links to files, dangling links...), sorted. Into ``missed`` (its
    path, as under ``root``, -> why) goes each folder that cannot be listed, and each link to a folder whose files
    are not walked anyway: under ``root`` or one of ``also_walked`` (the other roots of the same scan)."""
    def refused(exc: OSError) -> None:
        missed[str(exc.filename)] = f"cannot list the folder: {exc.strerror or exc}"

    walked = [top.resolve() for top in (root, *also_walked)]
    found = []
    for folder, dirs, names in os.walk(root, onerror=refused):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        for link in (Path(folder, d) for d in dirs if os.path.islink(os.path.join(folder, d))):
            if not any(_walks_into(link.resolve(), top) for top in walked):
                missed[str(link)] = _unfollowed(link)
        found += [Path(folder, name) for name in names]
    return sorted(found)


def _walks_into(folder: Path, top: Path) -> bool:
    """Whether a walk of ``top`` (a resolved path) lists the real folder ``folder``: it is under ``top``, not
    under one of ``SKIP_DIRS``."""
    return folder.is_relative_to(top) and not SKIP_DIRS.intersection(folder.relative_to(top).parts)


def _unfollowed(link: Path) -> str:
    """Why a link to a folder was not walked, with where it points (as written, and resolved where that differs)."""
    target, real = os.readlink(link), link.resolve()
    where = target if Path(target) == real else f"{target} = {real}"
    return f"symbolic link to the folder {where}, not followed: give that folder itself to include its files"


def not_a_file(path: Path) -> str | None:
    """Why a walked entry is not read: a dangling symbolic link (to where), or another non-file (a socket, a FIFO);
    None for a file or a link to one."""
    if path.is_file():
        return None
    if path.is_symlink() and not path.exists():
        return f"dangling symbolic link to {os.readlink(path)}"
    return "not a regular file"
