"""``python -m polyrec`` (torchrun's ``-m polyrec`` too): SIGTERM while the CLI's modules load (torch: seconds)
ends the process cleanly (``polyrec.startup``)."""

from polyrec.startup import STOPPED, rank_prefix, sigterm_exits

with sigterm_exits(f"{rank_prefix()}{STOPPED} while starting, before the command ran"):
    from polyrec.cli import main

main()
