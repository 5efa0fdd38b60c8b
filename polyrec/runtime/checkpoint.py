"""Checkpoints: written atomically (temp file in the same directory, then ``os.replace``), read with
``torch.load(weights_only=True)``, so a crash mid-write leaves the previous checkpoint intact and a
checkpoint cannot run code when loaded."""

from __future__ import annotations

import errno
import fcntl
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import torch

from polyrec.files import TEMP_SUFFIX, atomic_write

CHECKPOINT_NAME = "checkpoint.pt"
#: The metrics log a run writes in its checkpoint directory where ``--metrics`` names no other file.
METRICS_NAME = "metrics.jsonl"
FORMAT_VERSION = 1
TEMP_PREFIX = ".checkpoint-"
#: Locked (``fcntl.lockf``) by the run that writes a checkpoint directory; it holds that run's process id.
LOCK_NAME = ".polyrec-run.lock"
#: The errors of ``lockf(LOCK_NB)`` on a file that another process has locked (POSIX allows either).
HELD_ERRNOS = (errno.EACCES, errno.EAGAIN)
#: How a file torch.save wrote begins: a zip archive (its default since torch 1.6; PKWARE's APPNOTE, local file
#: header signature) or a pickle of protocol 2 (``_use_new_zipfile_serialization=False``; pickle's PROTO opcode).
TORCH_SAVE_MAGIC = (b"PK\x03\x04", b"\x80")
#: Leading bytes an error shows of a file that begins otherwise.
SHOWN_BYTES = 16


def checkpoint_path(directory: Path) -> Path:
    return Path(directory) / CHECKPOINT_NAME


def prepare_checkpoint_dir(directory: Path) -> None:
    """Create ``directory`` and write a probe file there, so that a path that is a file or cannot be
    written is found before training rather than at the first save. Raises OSError naming it."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise NotADirectoryError(f"--checkpoint-dir {directory} cannot be used: it is a file, not a directory")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(prefix=".write-probe-", dir=directory):
            pass
    except OSError as exc:
        raise OSError(f"--checkpoint-dir {directory} cannot be used: {exc.strerror or exc}") from exc


def hold_checkpoint_dir(directory: Path) -> BinaryIO | None:
    """Lock ``directory`` for this run until the returned file is closed or the process ends; ValueError naming
    the run that holds it already: two runs on one directory overwrote each other's checkpoint, and one's save
    removed the other's temp file mid-write. None (no lock) on a file system without locks."""
    file = open(Path(directory) / LOCK_NAME, "a+b")  # noqa: SIM115 - the caller closes it
    try:
        fcntl.lockf(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        file.seek(0)
        holder = file.read().decode(errors="replace").strip() or "unknown"
        file.close()
        if exc.errno not in HELD_ERRNOS:
            return None
        raise ValueError(f"--checkpoint-dir {directory} is in use by another run (process {holder}): wait for it "
                         "to end, or choose another --checkpoint-dir") from exc
    file.truncate(0)
    file.write(f"{os.getpid()}\n".encode())
    file.flush()
    return file


def refuse_held(directory: Path) -> None:
    """ValueError where another run holds ``directory`` (``hold_checkpoint_dir``), found before this run writes
    anything there: a refused ``--resume`` had appended its settings' records to the holder's metrics log."""
    probe = hold_checkpoint_dir(directory)
    if probe is not None:
        probe.close()


def refuse_another_run(directory: Path, *, metrics_here: bool) -> None:
    """Before a fresh run (no ``--resume``): ValueError naming the file where ``directory`` holds another run's
    checkpoint, which the run would overwrite, or (``metrics_here``: its metrics log goes to the directory) a
    non-empty METRICS_NAME, which it would append its records to, mixing two runs in one log."""
    existing = checkpoint_path(directory)
    if existing.exists():
        raise ValueError(f"{existing} exists: pass --resume to continue that run, or choose another --checkpoint-dir")
    log = Path(directory) / METRICS_NAME
    if metrics_here and log.is_file() and log.stat().st_size > 0:
        raise ValueError(f"{log} holds another run's metrics (that run saved no checkpoint to resume): a new run "
                         "would append to them; remove it, or choose another --checkpoint-dir")


def save_checkpoint(directory: Path, state: dict[str, Any]) -> Path:
    """Write ``state`` to ``directory/checkpoint.pt`` atomically (mode 0o666 less the umask); return the
    path. Temp files left older than this writer's own (a writer killed mid-write) are removed."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    final = checkpoint_path(directory)
    atomic_save({"format": FORMAT_VERSION, **state}, final, prefix=TEMP_PREFIX,
                on_temp=lambda own: _remove_stale_temps(directory, own))
    return final


def atomic_save(obj: Any, final: Path, *, prefix: str = "", on_temp: Callable[[Path], None] | None = None) -> None:
    """``torch.save(obj)`` to ``final`` atomically (``atomic_write``)."""
    atomic_write(final, lambda f: torch.save(obj, f), prefix=prefix, on_temp=on_temp)


def _remove_stale_temps(directory: Path, own: Path) -> None:
    """Remove ``.checkpoint-*.tmp`` files in ``directory`` last written before ``own`` was created."""
    created = own.stat().st_mtime
    for path in directory.glob(f"{TEMP_PREFIX}*{TEMP_SUFFIX}"):
        try:
            if path != own and path.stat().st_mtime < created:
                path.unlink()
        except FileNotFoundError:  # another writer finished or removed it meanwhile
            continue


def load_checkpoint(directory: Path, map_location: torch.device | str = "cpu",
                    required: tuple[str, ...] = ()) -> dict[str, Any]:
    """Read ``directory/checkpoint.pt`` (tensors and plain containers only). A file that does not load,
    is not a dict or lacks a ``required`` key raises ValueError naming it."""
    path = checkpoint_path(directory)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint to resume from: {path} does not exist" if not path.exists()
                                else f"no checkpoint to resume from: {path} is not a file")
    damaged = f"{path} is damaged or not a polyrec checkpoint"
    state = load_torch_file(path, damaged, map_location)
    if not isinstance(state, dict):
        raise ValueError(f"{damaged} (it holds a {type(state).__name__}, not a dict)")
    missing = [key for key in ("format", *required) if key not in state]
    if missing:
        raise ValueError(f"{damaged} (it lacks {', '.join(missing)})")
    if state["format"] != FORMAT_VERSION:
        raise ValueError(f"{path}: checkpoint format {state['format']!r}, this polyrec reads {FORMAT_VERSION}")
    return state


def load_torch_file(path: Path, damaged: str, map_location: torch.device | str = "cpu") -> Any:
    """``torch.load(path, weights_only=True)``; a file that does not load raises ValueError ``damaged (why)``, the
    why in words (``load_failure``), not torch's unpickling error alone. A file that is not there raises as it is."""
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as exc:  # truncated, random bytes, empty, other pickles: torch raises many kinds
        raise ValueError(f"{damaged} ({load_failure(path, exc)})") from exc


def load_failure(path: Path, exc: Exception) -> str:
    """Why ``torch.load`` of ``path`` raised ``exc``: for a file torch.save did not write (not starting with
    TORCH_SAVE_MAGIC: text, another program's data), what it starts with (torch said "KeyError: 101" of text);
    else (a truncated or damaged torch file, one that cannot be read) torch's error."""
    if not isinstance(exc, OSError):
        with open(path, "rb") as f:
            head = f.read(SHOWN_BYTES)
        if not head.startswith(TORCH_SAVE_MAGIC):
            return f"not a file written by torch.save: {f'it starts with {head!r}' if head else 'it is empty'}"
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else "unreadable"
    return f"{type(exc).__name__}: {reason}"


def rng_state(device: torch.device) -> dict[str, Any]:
    state: dict[str, Any] = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["cpu"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)
