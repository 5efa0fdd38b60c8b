"""``python -m polyrec`` (torchrun's ``-m polyrec`` too): SIGTERM or Ctrl-C while the CLI's modules load (torch:
seconds) ends the process cleanly (``polyrec.startup``); ``train --json``'s output still ends with its ``result``
record."""

import sys

from polyrec import jsontext
from polyrec.startup import rank_prefix, reporting_rank, signal_exits, stopped_by, trains_with_json


def _stopped(signum: int) -> str:
    return f"{rank_prefix()}{stopped_by(signum)} while starting, before the command ran"


def _result(signum: int) -> str | None:
    """``polyrec train --json``'s last record (its reporting rank's), as a stop while the trainer is built writes."""
    if trains_with_json(sys.argv[1:]) and reporting_rank():
        return jsontext.result_line("sigterm", None, _stopped(signum))
    return None


with signal_exits(_stopped, _result):
    from polyrec.cli import main

main()
