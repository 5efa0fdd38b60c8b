"""SIGTERM while ``polyrec`` starts, before the training loop handles it
(``polyrec.runtime.train_loop.STOP_SIGNALS``): its default action ended the process with exit code 143 and no word.
Within ``sigterm_exits`` it ends it cleanly instead, with a message and exit code 0, as a signal's stop of the loop
does. Nothing is trained or saved by then:
there is nothing to checkpoint, and a checkpoint to resume from has only been read. After the loop, while a finished
run reports, ``sigterm_ends_block`` cuts the report short (a message) and the run keeps its own exit code.

Python runs a handler between bytecodes only: a call that blocks in C++ until the other ranks come (torch's
rendezvous) would hold the signal up to the collective timeout, so it runs under ``sigterm_default``.

Light on purpose (no torch): ``python -m polyrec`` enters ``sigterm_exits`` before importing the CLI.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator

#: How a stop by SIGTERM is named, as the training loop names a signal's stop ("stopped by signal 15 (SIGTERM) at
#: step N").
STOPPED = f"stopped by signal {int(signal.SIGTERM)} ({signal.SIGTERM.name})"


class _Stopped(BaseException):
    """SIGTERM, raised by ``_raise``: a BaseException, so that an ``except Exception`` on the way (the precompile's
    fallback) does not take it, as none takes KeyboardInterrupt."""


def _raise(signum: int, frame: object) -> None:
    raise _Stopped


def rank_prefix() -> str:
    """"rank R: " in a process of several (torchrun's RANK and WORLD_SIZE, set before any process group
    exists), so that each rank's message says whose it is; empty in one process."""
    world = os.environ.get("WORLD_SIZE", "1")
    return f"rank {os.environ.get('RANK', '?')}: " if world.isdecimal() and int(world) > 1 else ""


def _handles_sigterm() -> bool:
    """Whether this thread may set SIGTERM's handler and should: the main thread (Python runs handlers there only),
    SIGTERM not ignored (a parent that ignores it means it) nor handled from outside Python (no handler to restore)."""
    current = signal.getsignal(signal.SIGTERM)
    return threading.current_thread() is threading.main_thread() and current not in (signal.SIG_IGN, None)


@contextlib.contextmanager
def sigterm_ends_block(message: str, stopped: list[bool] | None = None) -> Iterator[None]:
    """Within the block, SIGTERM ends the block at once: ``message`` on stderr, ``True`` appended to ``stopped``,
    and the code after the block runs. The handler before is restored after."""
    if not _handles_sigterm():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    except _Stopped:
        signal.signal(signal.SIGTERM, previous)
        print(message, file=sys.stderr, flush=True)
        if stopped is not None:
            stopped.append(True)
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def sigterm_exits(message: str) -> Iterator[None]:
    """Within the block, SIGTERM ends the process at once: ``message`` on stderr, then SystemExit(0) (``finally``
    blocks on the way run). The handler before is restored after."""
    stopped: list[bool] = []
    with sigterm_ends_block(message, stopped):
        yield
    if stopped:
        raise SystemExit(0)


@contextlib.contextmanager
def sigterm_default() -> Iterator[None]:
    """Within the block, SIGTERM has its default action (the process ends at once), whatever handler is set."""
    if not _handles_sigterm():
        yield
        return
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
