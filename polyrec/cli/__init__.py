"""The ``polyrec`` command: one typer app, one sub-app per module of ``polyrec/cli/``."""

from __future__ import annotations

import typer

from polyrec.cli import hw
from polyrec.cli import train
from polyrec.cli import bench
from polyrec.cli import migrate
from polyrec.cli import plan

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Train recommendation models fast on NVIDIA and AMD GPUs from one code base.")
app.add_typer(hw.app, name="hw")
app.add_typer(train.app, name="train")
app.add_typer(bench.app, name="bench")
app.add_typer(migrate.app, name="migrate")
app.add_typer(plan.app, name="plan")


def main() -> None:
    app()
