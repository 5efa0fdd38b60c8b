"""``python -m polyrec`` (torchrun's ``-m polyrec`` too): SIGTERM or Ctrl-C while the CLI's modules load (torch:
seconds) ends the process cleanly (``polyrec.startup``)."""

from polyrec.startup import rank_prefix, signal_exits, stopped_by

with signal_exits(lambda signum: f"{rank_prefix()}{stopped_by(signum)} while starting, before the command ran"):
    from polyrec.cli import main

main()
