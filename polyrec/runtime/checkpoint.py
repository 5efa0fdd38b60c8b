"""Checkpoints: written atomically (temp file in the same directory, then ``os.replace``), read with
``torch.load(weights_only=True)``, so a crash mid-write leaves the previous checkpoint intact and a
checkpoint cannot run code when loaded."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch

CHECKPOINT_NAME = "checkpoint.pt"
FORMAT_VERSION = 1


def checkpoint_path(directory: Path) -> Path:
    return Path(directory) / CHECKPOINT_NAME


def save_checkpoint(directory: Path, state: dict[str, Any]) -> Path:
    """Write ``state`` to ``directory/checkpoint.pt`` atomically; return the path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    final = checkpoint_path(directory)
    fd, tmp = tempfile.mkstemp(prefix=".checkpoint-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save({"format": FORMAT_VERSION, **state}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return final


def load_checkpoint(directory: Path, map_location: torch.device | str = "cpu") -> dict[str, Any]:
    """Read ``directory/checkpoint.pt`` (tensors and plain containers only)."""
    path = checkpoint_path(directory)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint to resume from: {path} does not exist")
    state = torch.load(path, map_location=map_location, weights_only=True)
    if state.get("format") != FORMAT_VERSION:
        raise ValueError(f"{path}: checkpoint format {state.get('format')!r}, this polyrec reads {FORMAT_VERSION}")
    return state


def rng_state(device: torch.device) -> dict[str, Any]:
    state: dict[str, Any] = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["cpu"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)
