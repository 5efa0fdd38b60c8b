"""Files written atomically and durably: a temporary file beside the final one, synced, renamed over it,
the directory synced. A crash or a full disk leaves the previous file whole (or none), never part of
one. Torch-free, so every layer can use it (checkpoints, calibrations, results files)."""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

TEMP_SUFFIX = ".tmp"


def sync_directory(directory: Path) -> None:
    """Put ``directory``'s entries on disk (POSIX: a renamed file's new name is durable once its directory is
    synced). A file system that cannot sync a directory (EINVAL) has nothing more to do."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(final: Path, write: Callable[[BinaryIO], None], *, prefix: str = "",
                 on_temp: Callable[[Path], None] | None = None) -> None:
    """``write`` a file to ``final`` atomically and durably: a temp file beside it (``prefix``), synced,
    given mode 0o666 less the umask, renamed into place, the directory synced (the rename itself on disk);
    the temp file removed if anything fails. ``on_temp`` is called with its path once it exists."""
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=TEMP_SUFFIX, dir=final.parent)
    try:
        if on_temp is not None:
            on_temp(Path(tmp))
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, final)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    sync_directory(final.parent)


def atomic_write_bytes(final: Path, data: bytes) -> None:
    """``atomic_write`` of ``data``, the temp file hidden (``.NAME.*.tmp``). A ``final`` that is a symbolic
    link is replaced by the file, never written through."""
    atomic_write(final, lambda f: f.write(data), prefix=f".{final.name}.")


def atomic_write_text(final: Path, text: str) -> None:
    """``atomic_write_bytes`` of ``text`` in UTF-8."""
    atomic_write_bytes(final, text.encode("utf-8"))
