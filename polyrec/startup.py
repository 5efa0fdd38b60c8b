"""SIGTERM or Ctrl-C while ``polyrec`` starts, before the training loop handles them (STOP_SIGNALS): SIGTERM's default
action ended the process with exit code 143 and no word, Ctrl-C's a KeyboardInterrupt (exit 130 from the CLI).
Within ``signal_exits`` either ends it cleanly instead, with a message and exit code 0, as a signal's stop of the
loop does. Nothing is trained or saved by then:
there is nothing to checkpoint, and a checkpoint to resume from has only been read. After the loop, while a finished
run reports, ``signal_ends_block`` cuts the report short (a message) at SIGTERM or Ctrl-C (SIGINT) and the run keeps
its own exit code.

Python runs a handler between bytecodes only: a call that blocks in C++ until the other ranks come (torch's
rendezvous) would hold the signal up to the collective timeout, so it runs under ``sigterm_default``.

Light on purpose (no torch): ``python -m polyrec`` enters ``signal_exits`` before importing the CLI.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator


#: Signals that stop a run after the step in flight, with a checkpoint: SIGTERM (a scheduler, torchrun
#: forwarding its own) and SIGINT (Ctrl-C; torchrun forwards it too, its workers being in sessions of
#: their own). A second SIGINT while stopping interrupts at once (KeyboardInterrupt), as Ctrl-C does
#: without the handler: a run stuck in its stop can still be ended (``polyrec.runtime.train_loop``). While the
#: run starts, either ends it at once, cleanly (``signal_exits``).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def stopped_by(signum: int) -> str:
    """How a stop by signal ``signum`` is named, as the training loop names a signal's stop ("stopped by signal 15
    (SIGTERM) at step N")."""
    return f"stopped by signal {int(signum)} ({signal.Signals(signum).name})"


class _Stopped(BaseException):
    """A stop signal (``args[0]``: its number), raised by ``_raise``: a BaseException, so that an ``except
    Exception`` on the way (the precompile's fallback) does not take it, as none takes KeyboardInterrupt."""


def _raise(signum: int, frame: object) -> None:
    raise _Stopped(signum)


def rank_prefix() -> str:
    """"rank R: " in a process of several (torchrun's RANK and WORLD_SIZE, set before any process group
    exists), so that each rank's message says whose it is; empty in one process."""
    world = os.environ.get("WORLD_SIZE", "1")
    return f"rank {os.environ.get('RANK', '?')}: " if world.isdecimal() and int(world) > 1 else ""


def reporting_rank() -> bool:
    """Whether this process is the one that reports a run (rank 0 under torchrun, or the only one), known before
    the process group is made."""
    return os.environ.get("RANK", "0") == "0"


def _handles(signum: int) -> bool:
    """Whether this thread may set ``signum``'s handler and should: the main thread (Python runs handlers there only),
    the signal not ignored (a parent that ignores it means it) nor handled from outside Python (no handler to
    restore)."""
    current = signal.getsignal(signum)
    return threading.current_thread() is threading.main_thread() and current not in (signal.SIG_IGN, None)


@contextlib.contextmanager
def signal_ends_block(message: Callable[[int], str], stopped: list[int] | None = None,
                      signals: tuple[int, ...] = STOP_SIGNALS) -> Iterator[None]:
    """Within the block, each of ``signals`` ends the block at once: ``message(signum)`` on stderr, the signal's
    number appended to ``stopped``, and the code after the block runs. The handlers before are restored after (first thing on a
    stop: the same signal again then acts as it did before the block, a second Ctrl-C interrupts)."""
    previous = {signum: signal.signal(signum, _raise) for signum in signals if _handles(signum)}
    try:
        yield
    except _Stopped as stop:
        _restore(previous)
        print(message(stop.args[0]), file=sys.stderr, flush=True)
        if stopped is not None:
            stopped.append(stop.args[0])
    finally:
        _restore(previous)


def _restore(handlers: dict[int, object]) -> None:
    """Set each signal's handler back to ``handlers``' (those ``signal.signal`` returned)."""
    for signum, handler in handlers.items():
        signal.signal(signum, handler)


@contextlib.contextmanager
def signal_exits(message: Callable[[int], str], output: Callable[[int], str | None] = lambda signum: None
                 ) -> Iterator[None]:
    """Within the block, SIGTERM and Ctrl-C (STOP_SIGNALS) end the process at once: ``message(signum)`` on stderr,
    ``output(signum)`` on stdout where it is not None (a ``--json`` run's last record), then SystemExit(0)
    (``finally`` blocks on the way run). The handlers before are restored after."""
    stopped: list[int] = []
    with signal_ends_block(message, stopped):
        yield
    if stopped:
        last = output(stopped[0])
        if last is not None:
            print(last, flush=True)
        raise SystemExit(0)


def trains_with_json(argv: list[str]) -> bool:
    """Whether the command line ``argv`` (the program's name left out) is ``polyrec train ... --json``, known before
    the CLI parses it: its output ends with a ``result`` record, however early the run ends."""
    given = argv[1:argv.index("--")] if "--" in argv else argv[1:]
    return argv[:1] == ["train"] and "--json" in given


@contextlib.contextmanager
def sigterm_default() -> Iterator[None]:
    """Within the block, SIGTERM has its default action (the process ends at once), whatever handler is set."""
    if not _handles(signal.SIGTERM):
        yield
        return
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
