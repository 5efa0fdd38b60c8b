"""A reader that closes stdout (`polyrec plan --json | head -1`, `polyrec hw list | head -1`) ends a command quietly
with CLOSED_PIPE_EXIT, as polyrec train and bench end: rich's own answer is exit 1, which `polyrec plan` means "does
not fit" and `polyrec hw compile-check` "a config does not fit"."""

from __future__ import annotations

import errno
import functools
import os
import sys

import typer
from rich.console import Console

#: Exit status when the reader of stdout closes it (`polyrec train --json | head -1`): 128 + SIGPIPE (13),
#: what a shell reports for a Unix tool that SIGPIPE ended.
CLOSED_PIPE_EXIT = 141


def quiet_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's flush at exit does not hit the closed pipe
    again ("Exception ignored ... BrokenPipeError"), as Python's signal docs advise."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test runner's buffer): nothing to flush
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


class StdoutConsole(Console):
    """stdout's console: a reader that closed stdout raises BrokenPipeError, for ``closed_stdout_exits``."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))


def closed_stdout_exits(command):
    """``command`` ending quietly with CLOSED_PIPE_EXIT where the reader of stdout closed it: before, it said
    "error: [Errno 32] Broken pipe" with exit 2 (bad input), or exited 1 (rich's answer), or printed a traceback
    (``typer.echo``)."""
    @functools.wraps(command)
    def run(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except BrokenPipeError as exc:
            quiet_stdout()
            raise typer.Exit(CLOSED_PIPE_EXIT) from exc
    return run
