"""The resume check GPU trainer tests share: a run checkpointed after 4 steps and resumed to 8 repeats the losses of
8 steps straight, bit for bit."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def assert_resume_repeats_losses(run: Callable[..., object], tmp_path: Path) -> None:
    """``run(directory, steps, resume=False)``: a trainer's ``train()`` result (``losses``, ``step``)."""
    straight = run(tmp_path / "a", 8)
    first = run(tmp_path / "b", 4)
    resumed = run(tmp_path / "b", 8, resume=True)
    assert first.losses == straight.losses[:4]
    assert resumed.losses == straight.losses[4:] and resumed.step == 8
