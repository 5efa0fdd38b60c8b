"""``polyrec bench``: end-to-end training throughput, the direct port against polyrec's path."""

from __future__ import annotations


import typer
from rich.console import Console
from rich.table import Table

from polyrec.models import PRESETS
from polyrec.runtime import TrainConfig
from polyrec import jsontext

app = typer.Typer(no_args_is_help=True, help="Benchmarks.")

COLUMNS = ("path", "cuda_graphs", "samples_per_s", "ms_per_step", "first_steps_s", "peak_gb")
PHASE_COLUMNS = ("path", "data_ms", "emb_fwd_ms", "dense_ms", "emb_bwd_ms", "optimizer_ms")


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.0f}" if value >= 1000 else f"{value:.3g}"
    return str(value)


@app.command("e2e")
def e2e_command(
    preset: str = typer.Option("dcnv2-small", help=f"Model preset: {', '.join(PRESETS)}."),
    data: str = typer.Option("synthetic", help="Data spec, as for polyrec train."),
    batch_size: int = typer.Option(512, help="Samples per step."),
    steps: int = typer.Option(20, help="Timed steps per path."),
    warmup: int = typer.Option(5, help="Untimed first steps per path (their wall time is reported)."),
    row_cap: int | None = typer.Option(None, help="Cut every table to at most this many rows."),
    device: str = typer.Option("auto", help="auto, cpu or cuda[:N]."),
    cuda_graphs: bool | None = typer.Option(None, "--cuda-graphs/--no-cuda-graphs", show_default="auto",
                                           help="polyrec's path with CUDA graphs (GPU); default as polyrec train."),
    pipeline: str = typer.Option("sync", help="polyrec's path: sync or semi-sync (see polyrec train --help)."),
    synthetic_pool: int | None = typer.Option(
        None, show_default="warmup + steps (synthetic data)",
        help="Synthetic batches generated once and cycled (0: a new one per step). The default makes as many as "
             "the run takes: a model memorises a few cycled batches and then steps faster than on new data."),
    seed: int = typer.Option(0, help="Seed of model init, synthetic data and shuffles (the same for both paths)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Train the direct port and polyrec's path on the same model and data; print samples/s and the ratio."""
    from polyrec.cli.train import bad_input_exits, run_warnings_as_lines
    from polyrec.runtime.bench import e2e
    from polyrec.runtime.config import resolve

    if steps < 1 or warmup < 0:
        typer.echo(f"error: --steps must be at least 1 and --warmup 0 or more, got --steps {steps} --warmup {warmup}",
                   err=True)
        raise typer.Exit(2)
    if synthetic_pool is None:  # file data reads its file: no pool
        synthetic_pool = warmup + steps if data.startswith("synthetic") else 0
    if synthetic_pool < 0:
        typer.echo(f"error: --synthetic-pool must be 0 or more, got {synthetic_pool}", err=True)
        raise typer.Exit(2)
    base = TrainConfig(preset=preset, data=data, batch_size=batch_size, steps=warmup + steps, row_cap=row_cap,
                       device=device, cuda_graphs="auto" if cuda_graphs is None else cuda_graphs, seed=seed,
                       synthetic_pool=synthetic_pool, pipeline=pipeline)
    with bad_input_exits(), run_warnings_as_lines():  # the report too: a closed stdout ends it with CLOSED_PIPE_EXIT
        resolve(base)  # polyrec's path checked before the direct port's run, not after it
        out = e2e(base, warmup=warmup, steps=steps)
        _report(out, preset, batch_size, steps, as_json)


def _report(out: dict, preset: str, batch_size: int, steps: int, as_json: bool) -> None:
    """``e2e``'s result as JSON, or its tables and the ratio."""
    if as_json:  # strict JSON, as polyrec train --json: a diverged run's NaN loss is null
        typer.echo(jsontext.dumps(out, indent=1))
        return
    console = Console()
    for title, cols in ((f"polyrec bench e2e: {preset}, batch {batch_size}, {steps} timed steps", COLUMNS),
                        ("ms per step by phase", PHASE_COLUMNS)):
        table = Table(title=title)
        for col in cols:
            table.add_column(col, justify="left" if col == "path" else "right")
        for row in out["rows"]:
            table.add_row(*(_cell(row.get(c)) for c in cols))
        console.print(table)
    for row in out["rows"]:
        console.print(f"{row['path']}: embeddings {row['embeddings']} ({row['embedding_optimizer']}), "
                      f"dense {row['dense']} in {row['dtype']}")
    console.print(f"polyrec / direct port: [bold]{out['speedup']:.2f}x[/] samples/s")
    if not out["polyrec_kernels"]:
        console.print("note: polyrec's path ran no polyrec kernel (torch embeddings and dense, as on a CPU): the "
                      "ratio compares two plain-torch configurations (row-wise against full Adagrad, its dense "
                      "settings), not polyrec's kernels; run on a GPU for those")
