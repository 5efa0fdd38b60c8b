"""``polyrec train``: train a DLRM / DLRM-DCNv2 preset on synthetic, Criteo, MLPerf or MovieLens data."""

from __future__ import annotations

import contextlib
import re
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import torch
import typer
from rich.console import Console
from rich.table import Table

from polyrec.data import DataError
from polyrec.models import PRESETS
from polyrec.runtime import TrainConfig, Trainer, TrainResult
from polyrec.runtime.checkpoint import checkpoint_path
from polyrec.runtime.config import row_dtype_names
from polyrec.runtime.dist import DEFAULT_TIMEOUT_S, shutdown
from polyrec.runtime.trainer import RunWarning
from polyrec import jsontext
from polyrec.cli.pipes import CLOSED_PIPE_EXIT, quiet_stdout
from polyrec.startup import rank_prefix, reporting_rank, signal_ends_block, signal_exits, stopped_by

# One command with options and no subcommands: its usage line names no COMMAND (the app stays a
# group so that `polyrec train [OPTIONS]` is invoked as before).
app = typer.Typer(subcommand_metavar="")
err = Console(stderr=True)

#: Exit status of a rank whose peer failed first (torchrun): the code after bad input's 2.
PEER_FAILED_EXIT = 3
#: gloo raises a peer's failure (its connection closed or reset, a receive timed out waiting for it) as a
#: plain RuntimeError whose message starts with the gloo transport source file that raised it:
#: "[.../gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:39088. This is typically
#: caused by a remote worker crashing. ..." (torch 2.13, tests/test_dist_faults.py).
GLOO_TRANSPORT_ERROR = re.compile(r"\[[^\]]*gloo/transport/[^\]]*\]\s*(?P<reason>.*?)(\.\s|$)", re.MULTILINE)


def row_dtype_text(spec: str) -> str:
    """``--embedding-dtype`` in a few words: its one name, or the count of tables of each ("fp32 x20, fp16 x6")."""
    names = row_dtype_names(spec)
    counts = Counter(names)
    return names[0] if len(counts) == 1 else ", ".join(f"{name} x{n}" for name, n in counts.items())


def summary_table(result: TrainResult, trainer: Trainer) -> Table:
    table = Table(title=f"polyrec train: {trainer.cfg.preset} on {trainer.cfg.data}")
    table.add_column("what")
    table.add_column("value", justify="right")
    rows = [("status", result.status), ("steps", str(result.step)),
            ("device / precision", f"{trainer.rt.device} / {str(trainer.rt.compute_dtype).removeprefix('torch.')}"
                                   + (" (fp8 GEMMs)" if trainer.rt.dense_fp8 else "")),
            ("embeddings / dense", f"{trainer.rt.embedding_backend} ({row_dtype_text(trainer.cfg.embedding_dtype)} "
                                   f"rows) / {trainer.rt.dense_backend}"),
            ("cuda graphs", trainer.graphs.reason), ("samples/s", f"{result.samples_per_s:,.0f}")]
    if result.final_auc is not None:
        rows.append(("eval AUC", f"{result.final_auc:.4f}"))
    rows += [(f"ms/step {phase}", f"{ms:.2f}") for phase, ms in result.timing_ms.items()]
    if result.bad_rows:
        rows.append(("bad rows skipped", str(result.bad_rows)))
    if result.eval_bad_rows:
        rows.append(("eval bad rows skipped", str(result.eval_bad_rows)))
    if result.checkpoint:
        rows.append(("checkpoint", str(result.checkpoint)))
    for what, value in rows:
        table.add_row(what, value)
    return table


def _out_of_memory(exc: RuntimeError | MemoryError) -> bool:
    """Whether ``exc`` is an allocation failure: the GPU's OutOfMemoryError, the CPU allocator's, or
    numpy's MemoryError (a file source's batch buffer)."""
    return isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or "can't allocate memory" in str(exc)


@contextlib.contextmanager
def bad_input_exits() -> Iterator[None]:
    """Bad input of a training run (data, options, paths, a missing extra) and a batch that does not fit
    in memory end the command with their message on stderr and exit 2 (``train``, ``bench e2e``); a
    reader that closed stdout ends it quietly with CLOSED_PIPE_EXIT; other errors propagate."""
    try:
        yield
    except BrokenPipeError as exc:  # the reader is gone: not bad input, and nothing more can be printed
        quiet_stdout()
        raise typer.Exit(CLOSED_PIPE_EXIT) from exc
    except Exception as exc:
        message = bad_input_message(exc)
        if message is None:
            raise
        typer.echo(f"error: {rank_prefix()}{message}", err=True)
        raise typer.Exit(2) from exc


def bad_input_message(exc: Exception) -> str | None:
    """What ``bad_input_exits`` says of ``exc`` (None: not bad input): the message of bad data, options or paths
    (OSError: an unwritable --checkpoint-dir) or a missing extra, or an allocation failure with what to try."""
    if isinstance(exc, BrokenPipeError):
        return None
    if isinstance(exc, (DataError, ValueError, OSError, ImportError)):
        return str(exc)
    if isinstance(exc, (RuntimeError, MemoryError)) and _out_of_memory(exc):
        last = (str(exc).strip().splitlines() or [type(exc).__name__])[-1]  # a bare MemoryError says nothing
        return f"out of memory (try a smaller --batch-size or --row-cap): {last}"
    return None


@contextlib.contextmanager
def peer_failure_exits() -> Iterator[None]:
    """A collective that failed because a peer rank is gone or stopped answering (gloo) ends this rank with
    one line and PEER_FAILED_EXIT, not a traceback: the cause is in the failed rank's own message."""
    try:
        yield
    except RuntimeError as exc:
        found = GLOO_TRANSPORT_ERROR.search(str(exc))
        if found is None:
            raise
        typer.echo(f"error: {rank_prefix()}a peer rank failed or stopped answering "
                   f"(gloo: {found['reason']}); its own message says why", err=True)
        raise typer.Exit(PEER_FAILED_EXIT) from exc


@contextlib.contextmanager
def run_warnings_as_lines() -> Iterator[None]:
    """The trainer's ``RunWarning``s as ``warning: ...`` lines on stderr, as the command's other messages, where Python
    showed "FILE:LINE: RuntimeWarning: ..." and a source line; other warnings as Python shows them. Warning filters
    still apply (``-W error`` raises it)."""
    with warnings.catch_warnings():  # puts showwarning back after
        shown = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None) -> None:
            if issubclass(category, RunWarning):
                typer.echo(f"warning: {rank_prefix()}{message}", err=True)
            else:
                shown(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        yield


@app.callback(invoke_without_command=True)
def train(
    ctx: typer.Context,
    preset: str = typer.Option("dcnv2-small", help=f"Model preset: {', '.join(PRESETS)}."),
    data: str = typer.Option("synthetic", help="synthetic[:zipf|uniform] | criteo:PATH[,PATH] | mlperf:PATH (40-int32 "
                              "records) | mlperf:DIR/day_N_sparse_multi_hot.npz[,...] (MLPerf v3+ multi-hot days, "
                              "dense and labels .npy beside each) | movielens:PATH"),
    eval_data: str | None = typer.Option(None, help="Held-out data of the same kind (criteo:PATH / mlperf:PATH)."),
    steps: int = typer.Option(1000, help="Total optimizer steps."),
    batch_size: int = typer.Option(512, help="Samples per step."),
    lr: float = typer.Option(0.005, help="Dense learning rate (MLPerf reference: 0.005)."),
    embedding_lr: float | None = typer.Option(None, help="Embedding learning rate (default: --lr)."),
    dense_optimizer: str = typer.Option("adagrad", help="adagrad (MLPerf) or adam."),
    embedding_optimizer: str = typer.Option("rowwise_adagrad", help="sgd, rowwise_adagrad, adagrad or adam."),
    embedding_dtype: str = typer.Option("fp32", help="Embedding rows: fp32, fp16 or bf16 (stochastic rounding; "
                                        "polyrec's TBE only); or one per table, comma-separated, as a plan "
                                        "chooses them (one process)."),
    seed: int = typer.Option(0, help="Seed of model init, synthetic data and shuffles."),
    device: str = typer.Option("auto", help="auto, cpu or cuda[:N]."),
    precision: str = typer.Option("auto", help="Dense matmuls: auto (bf16 on GPU), bf16, fp32, or fp8 (GEMMs in fp8, "
                                   "activations bf16; polyrec dense backend)."),
    embedding_backend: str = typer.Option("auto", help="auto, torch or polyrec."),
    dense_backend: str = typer.Option("auto", help="auto, torch or polyrec."),
    row_cap: int | None = typer.Option(None, help="Cut every table to at most this many rows."),
    eval_every: int = typer.Option(0, help="Steps between evaluations (0: at the end only)."),
    eval_batches: int = typer.Option(8, help="Most batches per evaluation: it reads the eval data at most once, "
                                     "so a shorter file gives fewer. Synthetic data: exactly this many; "
                                     "MovieLens: its whole test split."),
    log_every: int = typer.Option(50, help="Steps between metric lines and NaN checks."),
    checkpoint_dir: str | None = typer.Option(None, help="Where checkpoint.pt and metrics.jsonl go."),
    checkpoint_every: int = typer.Option(0, help="Steps between checkpoints (0: at the end, and on SIGTERM or "
                                         "Ctrl-C)."),
    resume: bool = typer.Option(False, "--resume", help="Continue from CHECKPOINT_DIR/checkpoint.pt."),
    skip_bad_rows: bool = typer.Option(False, "--skip-bad-rows", help="Count and skip malformed rows."),
    prefetch: bool = typer.Option(True, "--prefetch/--no-prefetch",
                                  help="Read the next batch of criteo: or mlperf: files on a background thread "
                                       "while the step runs (the same batches, checkpoints and counts)."),
    pipeline: str = typer.Option("sync", help="sync, or semi-sync: each lookup reads the tables one update old "
                                 "and overlaps the dense layers (TorchRec's semi-synchronous pipeline)."),
    cuda_graphs: bool | None = typer.Option(None, "--cuda-graphs/--no-cuda-graphs", show_default="auto",
                                           help="CUDA-graph the dense forward+backward (GPU). Default: where the "
                                                "planner predicts the eager step host-bound."),
    precompile: bool = typer.Option(True, "--precompile/--no-precompile",
                                    help="Before the first step, compile its Triton kernels in parallel from a dry "
                                         "run (GPU, polyrec tables, one process, sync pipeline)."),
    cpu_threads: int = typer.Option(0, help="CPU intra-op threads (0: torch's default). 1 avoids OpenMP "
                                    "spin-waits when other jobs share the cores."),
    metrics: str | None = typer.Option(None, help="JSON-lines metrics file (default CHECKPOINT_DIR/metrics.jsonl)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON lines instead of a progress bar and table."),
    plan: str | None = typer.Option(None, help="Plan JSON from `polyrec plan`: its batch, dense dtype and optimizer, "
                                     "row dtype, embedding optimizer, table shardings and, for synthetic data, "
                                     "index distribution (options left at their defaults take the plan's; others "
                                     "must agree with it)."),
    collective_timeout: float = typer.Option(DEFAULT_TIMEOUT_S, help="Seconds a collective waits for the slowest "
                                             "rank before the job fails (torchrun, several ranks); above 0."),
) -> None:
    """Train a model preset.

    Exit codes: 0 done (or nothing left to train), or stopped by SIGTERM or Ctrl-C (SIGINT; a second Ctrl-C
    interrupts at once); 1 a non-finite loss; 2 bad input; 3 another rank failed (torchrun); 141 stdout closed
    by its reader (`polyrec train --json | head -1`).
    """
    cfg = TrainConfig(preset=preset, data=data, eval_data=eval_data, steps=steps, batch_size=batch_size, seed=seed,
                      device=device, precision=precision, embedding_backend=embedding_backend,
                      dense_backend=dense_backend, dense_optimizer=dense_optimizer, lr=lr,
                      embedding_optimizer=embedding_optimizer, embedding_lr=embedding_lr,
                      embedding_dtype=embedding_dtype, row_cap=row_cap,
                      eval_every=eval_every, eval_batches=eval_batches, log_every=log_every,
                      checkpoint_dir=checkpoint_dir, checkpoint_every=checkpoint_every, resume=resume,
                      skip_bad_rows=skip_bad_rows, prefetch=prefetch, pipeline=pipeline,
                      cuda_graphs="auto" if cuda_graphs is None else cuda_graphs, precompile=precompile,
                      cpu_threads=cpu_threads, collective_timeout_s=collective_timeout,
                      metrics_path=metrics, plan=plan)  # paths as typed: typer's Path makes "" "." (expand_paths)
    completed = False
    try:
        with peer_failure_exits(), bad_input_exits(), run_warnings_as_lines():
            result = _train_and_report(cfg, as_json, typed_options(ctx))
            completed = True
    finally:
        shutdown(completed=completed)
    if result.status == "nan":
        typer.echo(f"error: {rank_prefix()}{result.message}", err=True)
        raise typer.Exit(1)
    if result.status == "sigterm":
        typer.echo(result.message, err=True)


def typed_options(ctx: typer.Context) -> frozenset[str]:
    """The options given on the command line, a default typed among them (the ``Trainer``'s ``typed``: a plan
    refuses them where it chose otherwise); those left out are not."""
    return frozenset(name for name in ctx.params  # by name: the pinned typer (0.29) vendors click's enum, older
                     if getattr(ctx.get_parameter_source(name), "name", None) == "COMMANDLINE")  # ones import it


def _train_and_report(cfg: TrainConfig, as_json: bool, typed: frozenset[str]) -> TrainResult:
    """Train; one rank reports (with --json a ``result`` line however the run ends: its status, ``data_error``,
    ``peer_failed`` or ``bad_input`` where it raised, ``sigterm`` with no step where a stop signal came while it
    started). The trainer (and the process group its modules hold) is released on return, before ``shutdown``."""
    def last_record(signum: int) -> str | None:  # nothing trained or saved; --json still ends saying how the run ended
        return jsontext.result_line("sigterm", None, _stopped_starting(cfg, signum)) if as_json and reporting_rank() \
            else None

    with signal_exits(lambda signum: _stopped_starting(cfg, signum), last_record):  # then the loop handles them
        trainer = _started(cfg, as_json, typed)
    try:
        result = trainer.train()
    except Exception as exc:  # --json ends as ever, saying how the run ended
        raised = _raised_result(exc)
        if raised is not None:
            _report_stopped(trainer, as_json, *raised)
        raise
    if trainer.ctx.is_main:
        stopped_reporting: list[int] = []
        written: list[bool] = []  # the --json result line
        with signal_ends_block(lambda signum: _stopped_reporting(cfg, result, signum),
                               stopped_reporting):  # the loop's handlers of its stop signals are gone by now
            _report(result, trainer, as_json, written)
        if stopped_reporting and as_json and not written:  # --json readers learn how the run ended from it
            typer.echo(_finished_line(result))
    return result


def _started(cfg: TrainConfig, as_json: bool, typed: frozenset[str]) -> Trainer:
    """The run's trainer. With --json, bad input that stops the run before its first step (exit 2) ends the output
    with a ``result`` line of status ``bad_input`` and no step, as data that stops it later ends it with one."""
    try:
        return Trainer(cfg, echo_json=as_json, typed=typed)
    except Exception as exc:
        message = bad_input_message(exc)
        if as_json and message is not None and reporting_rank():
            typer.echo(jsontext.result_line("bad_input", None, message))
        raise


def _raised_result(exc: Exception) -> tuple[str, str] | None:
    """The --json result (status, message) of a run whose loop raised ``exc``: data that stopped it mid-way (its
    `stopped` event logged), a peer rank that failed (its own message says why), or bad input (an unwritable metrics
    log, memory); None for other errors, whose traceback says more."""
    if isinstance(exc, DataError):
        return "data_error", str(exc)
    if isinstance(exc, RuntimeError) and GLOO_TRANSPORT_ERROR.search(str(exc)):
        return "peer_failed", "a peer rank failed or stopped answering"
    message = bad_input_message(exc)
    return None if message is None else ("bad_input", message)


def _stopped_starting(cfg: TrainConfig, signum: int) -> str:
    """What SIGTERM or Ctrl-C while the trainer is built says: nothing trained or saved, a checkpoint to resume
    kept."""
    kept = (f"; {checkpoint_path(Path(cfg.checkpoint_dir).expanduser())} is kept as it was"
            if cfg.resume and cfg.checkpoint_dir else "")
    return (f"{rank_prefix()}{stopped_by(signum)} while starting, before the first step: nothing trained, nothing "
            f"saved{kept}")


def _stopped_reporting(cfg: TrainConfig, result: TrainResult, signum: int) -> str:
    """What a stop signal (SIGTERM, Ctrl-C) while a finished run reports says: the report cut short, the run's
    checkpoint (if any)."""
    path = checkpoint_path(Path(cfg.checkpoint_dir).expanduser()) if cfg.checkpoint_dir else None
    kept = f"; its checkpoint is {path}" if path is not None and path.is_file() else ""
    ended = (f"nothing to train: the checkpoint is at step {result.step}" if result.nothing_to_train
             else f"{result.status} at step {result.step}")
    return (f"{rank_prefix()}{stopped_by(signum)} while reporting, after the run ended ({ended}): the report is cut "
            f"short{kept}")


def _report_stopped(trainer: Trainer, as_json: bool, status: str, message: str) -> None:
    """With --json, the reporting rank ends its output with a ``result`` line of ``status`` for a run that
    raised; before, a peer's failure (bad rows dealt to rank 1 alone) left rank 0's output without one."""
    if as_json and trainer.ctx.is_main:
        typer.echo(jsontext.result_line(status, trainer.step, message))


def _finished_line(result: TrainResult) -> str:
    """The ``result`` record of a run that returned."""
    return jsontext.result_line(result.status, result.step, result.message, result.final_auc, result.samples_per_s)


def _report(result: TrainResult, trainer: Trainer, as_json: bool, written: list[bool]) -> None:
    """The result record (--json; ``True`` appended to ``written`` once it is) or the summary table; a run with
    nothing to train says so on stderr (and prints no table)."""
    if as_json:
        typer.echo(_finished_line(result))
        written.append(True)
    if result.nothing_to_train:
        typer.echo(result.message, err=True)
    elif not as_json:
        _print_summary(result, trainer)


def _print_summary(result: TrainResult, trainer: Trainer) -> None:
    Console().print(summary_table(result, trainer))
    if result.bad_row_examples:
        err.print(f"[yellow]skipped {result.bad_rows} bad rows[/], e.g. " + "; ".join(result.bad_row_examples))
    if result.eval_bad_row_examples:
        err.print(f"[yellow]skipped {result.eval_bad_rows} bad eval rows[/], e.g. "
                  + "; ".join(result.eval_bad_row_examples))
