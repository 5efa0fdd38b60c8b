"""``polyrec plan``: a training plan for a model on a fleet, co-design, and the fleet what-if report."""

from __future__ import annotations

import dataclasses
import json
import math
import shlex
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from polyrec.cli.pipes import StdoutConsole, closed_stdout_exits
from polyrec.cli.plan_tables import is_one_hot, model_label, print_plan
from polyrec.hardware.catalog import UnknownDeviceError, device_files, get_device
from polyrec.planner.codesign import CodesignResult, codesign
from polyrec.planner.propose import NoFitError, make_plan
from polyrec.planner.report import COLUMNS, format_cell, what_if, write_report
from polyrec.planner.serialize import no_fit_to_json, plan_to_json
from polyrec.planner.types import (
    FLEET_SYNTAX,
    ConstraintError,
    INDEX_DISTRIBUTIONS,
    TRAINABLE_DENSE_DTYPES,
    Fleet,
    FleetError,
    ModelSpec,
    Plan,
    PlanConstraints,
    first_repeat,
    model_config_fields,
    model_spec_from_config,
    parse_fleet,
)

if TYPE_CHECKING:
    from polyrec.models.config import ModelConfig

#: The fleet planned for when --fleet is not given.
DEFAULT_FLEET = "H200x1"
#: The largest batch per GPU the planner chooses unless --max-batch-per-gpu says (PlanConstraints' default).
DEFAULT_MAX_BATCH = PlanConstraints().max_batch_per_gpu
#: Where ``--compare`` writes its report unless --out-dir says.
REPORT_DIR = Path("plan_report")
#: The index distribution priced where neither --distribution nor --data synthetic:D names one.
DEFAULT_DISTRIBUTION = "uniform"
#: The options that are comma-separated lists of names (each a PlanConstraints field of tuples).
NAME_LIST_OPTIONS = ("weight_dtypes", "optimizers")
#: Exit code where the model does not fit the fleet, and where --codesign finds no design for a fleet (even the
#: smallest misses the target or does not fit): the answer is "no", not bad input (2).
NO_FIT_EXIT = 1

app = typer.Typer(help="Plan placement, sharding, precision and batch of a model on a fleet.")
# messages quote user input: no ":x:" emoji, no markup (escape), no line breaks inside paths
err = Console(stderr=True, emoji=False, soft_wrap=True)
out = StdoutConsole()  # a reader that closed it ends the command with closed_stdout_exits


def _csv(text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in text.split(",") if p.strip())


def plan_constraints(*, allow_host_cache: bool, **typed: str | int | None) -> PlanConstraints:
    """The constraints of the options as the user ``typed`` them, keyed by the field each sets (``batch_per_gpu``:
    typer's ``--batch-per-gpu``; None: not given, the field's default). One the planner refuses is named by its option
    and what was typed (``--batch-per-gpu 0: must be an integer >= 1``): the planner's message names its field
    (``constraint batch_per_gpu ...``), which the user never typed."""
    fields = {name: _csv(value) if name in NAME_LIST_OPTIONS else value
              for name, value in typed.items() if value is not None}
    try:
        return PlanConstraints(allow_host_cache=allow_host_cache, **fields)
    except ConstraintError as refused:
        option = "--" + refused.field.replace("_", "-")
        raise FleetError(f"{option} {shlex.quote(str(typed[refused.field]))}: {refused.problem}") from None


def host_memory_bytes(gb: float | None) -> int | None:
    """Bytes of ``--host-memory-gb`` (GB of 10^9 bytes); None (not given) stays None."""
    if gb is None:
        return None
    size = gb * 1e9
    if not math.isfinite(size) or round(size) < 1:
        raise FleetError(f"--host-memory-gb must be a positive, finite number of GB (10^9 bytes) per host, got {gb}")
    return round(size)


def fleet_with_host_memory(text: str, host_memory_gb: float | None) -> Fleet:
    """The fleet of ``text`` (``FLEET_SYNTAX``), its hosts' memory from ``--host-memory-gb``."""
    return dataclasses.replace(parse_fleet(text), host_memory_bytes=host_memory_bytes(host_memory_gb))


def compare_kinds(compare: str) -> list[str]:
    """The device kinds ``--compare`` names, as the catalog spells them, each once; an entry that is a fleet
    (``H200x8``) is refused naming its kind (--compare finds each kind's fleet itself), an unknown one naming
    --compare and the valid devices, as --fleet's errors name them."""
    kinds = [_compare_kind(entry, compare) for entry in _csv(compare)]
    twice = first_repeat(kinds)
    if twice is not None:
        raise FleetError(f"--compare {compare}: {twice} is listed twice")
    return kinds


def _compare_kind(entry: str, compare: str) -> str:
    """The device kind of ``entry``, one of ``--compare``'s (see ``compare_kinds``)."""
    try:
        return get_device(entry).name
    except UnknownDeviceError as unknown:
        try:
            fleet = parse_fleet(entry)
        except FleetError:
            if not entry.isascii():  # parse_fleet's error names what in it is not ASCII (a count in other digits)
                raise
            fleet = None
        if fleet is None or len(fleet.groups) != 1:
            raise FleetError(f"--compare {compare}: {unknown}") from None
        kind = fleet.groups[0].device
        raise FleetError(f"--compare names device kinds, not fleets: {entry!r} is a fleet of {fleet.world_size} "
                         f"{kind}; give {kind} (--compare finds each kind's smallest fleet; with --codesign, "
                         "--fleet gives the shape)") from None


def codesign_fleets(fleet: str, compare: str | None) -> list[str]:
    """The fleets --codesign designs for: ``fleet``, or each kind of ``compare`` in its shape (as many per
    host, as many hosts)."""
    if not compare:
        return [fleet]
    shape = parse_fleet(fleet)
    hosts = f"@{shape.hosts}" if shape.hosts > 1 else ""
    return [f"{kind}x{shape.per_host}{hosts}" for kind in compare_kinds(compare)]


def load_model(name: str, distribution: str | None, one_hot: bool = False, row_cap: int | None = None,
               data: str | None = None) -> ModelSpec:
    """The preset ``name``'s model of the index distribution ``priced_distribution`` gives; ``one_hot``: every feature
    one lookup per sample (Criteo TSV, MLPerf binary records); ``row_cap``: every table cut to at most that many rows,
    as ``polyrec train --row-cap`` cuts them (its plan must have the run's rows); ``data``: the lookups per sample that
    data makes (``shaped_by``)."""
    from polyrec.models.config import preset

    if row_cap is not None and row_cap < 1:  # as polyrec train refuses it
        raise FleetError(f"--row-cap must be at least 1 (or left out), got {row_cap}")
    if one_hot and data is not None:
        raise FleetError("--one-hot and --data both set the lookups per sample: give one")
    try:
        config = preset(name)
    except ValueError as unknown:
        raise FleetError(f"--model/--preset {name}: {unknown}") from None
    if one_hot:
        config = config.replace(multi_hot=(1,) * config.num_tables)
    if row_cap is not None:
        config = config.with_capped_rows(row_cap)
    if data is not None:
        config = shaped_by(config, data)  # first: a distribution synthetic data does not know is the source's error
    return model_spec_from_config(config, index_distribution=priced_distribution(distribution, data))


def priced_distribution(distribution: str | None, data: str | None) -> str:
    """The index distribution a plan prices: ``--distribution``, else the one ``--data synthetic:D`` draws, else
    DEFAULT_DISTRIBUTION. One the planner does not know is refused naming ``--distribution`` (ModelSpec's error named
    its field, ``index_distribution``); one that synthetic data of ``data`` does not draw too: ``polyrec train --plan``
    refuses the plan with that data (``plan_apply.plan_data``); before, ``--data synthetic:zipf`` planned uniform ids
    and the trainer refused the plan."""
    from polyrec.data.sources import parse_spec
    from polyrec.data.synthetic import DISTRIBUTIONS

    if distribution is not None and distribution not in INDEX_DISTRIBUTIONS:
        raise FleetError(f"--distribution {shlex.quote(distribution)}: not one of {', '.join(INDEX_DISTRIBUTIONS)}")
    kind, arg = parse_spec(data) if data is not None else (None, "")
    drawn = arg if kind == "synthetic" else ""
    if distribution is None:
        return drawn or DEFAULT_DISTRIBUTION
    draws = (drawn,) if drawn else DISTRIBUTIONS if kind == "synthetic" else (distribution,)
    if distribution not in draws:
        raise FleetError(f"--distribution {distribution}: --data {data} draws {' or '.join(draws)} ids, and polyrec "
                         "train --plan refuses a plan of others with it; leave --distribution out or change one")
    return distribution


def shaped_by(config: ModelConfig, data: str) -> ModelConfig:
    """``config`` as ``polyrec train --data DATA`` builds it (``Source.adapt``): one lookup per feature for Criteo TSV
    and MLPerf binary records, each feature's width for MLPerf multi-hot days, the preset's for synthetic data.
    MovieLens, which builds tables of its own, is refused: a plan prices a preset's tables."""
    import torch

    from polyrec.data import open_source
    from polyrec.data.sources import parse_spec

    if parse_spec(data)[0] == "movielens":
        raise FleetError(f"--data {data}: MovieLens builds tables of its own (users, items), not the preset's; "
                         "polyrec plan prices a preset's tables")
    with open_source(data, config, batch_size=1, seed=0, device=torch.device("cpu")) as source:
        return source.adapt(config)


def _compare(model: ModelSpec, devices: tuple[str, ...], c: PlanConstraints, out_dir: Path, as_json: bool,
             host_memory: int | None) -> None:
    rows = what_if(model, list(devices), c, host_memory_bytes=host_memory)
    title = f"{model_label(model)}: the same model on each accelerator"
    stem = f"whatif_{model.name}" + ("_one-hot" if is_one_hot(model) else "")  # not the multi-hot report's files
    png, page = write_report(rows, out_dir, title=title, stem=stem)
    if as_json:
        print(json.dumps({"rows": [{"fits": r.fits} | {k: getattr(r, k) for k, _ in COLUMNS} for r in rows],
                          "png": str(png), "html": str(page)}, indent=1), flush=True)
        return
    t = Table(title=title)
    shown = [c for c in COLUMNS if c[0] not in ("notes", "origin")]
    for _, label in shown:
        t.add_column(label)
    for r in rows:
        t.add_row(*(format_cell(getattr(r, k)) for k, _ in shown))
    out.print(t)
    for r in rows:  # a kind that fits no fleet has no plan: its notes say why, and no numbers have an origin
        line = r.notes if r.fleet is None else f"{r.notes or '-'}; numbers from: {r.origin}"
        out.print(escape(f"{r.device}: {line}"))
    out.print(f"wrote {png} and {page}")


def peak_gb_per_gpu(plan: Plan) -> float:
    """The predicted allocator peak of the plan's busiest GPU, GB."""
    return max(m.used for m in plan.memory) / 1e9


def _codesign(model: ModelSpec, fleets: list[Fleet], target: float, c: PlanConstraints, as_json: bool) -> None:
    """Print the design of each fleet; exit ``NO_FIT_EXIT`` where a fleet has none."""
    results = [codesign(model, f, target, c) for f in fleets]
    _print_designs(model, results, target, as_json)
    missed = [r for r in results if not r.fits]
    for r in missed:
        err.print(f"[red]no design:[/red] {escape(r.fleet.text)}: {escape(r.reason)}")
    if missed:
        raise typer.Exit(NO_FIT_EXIT)


def _print_designs(model: ModelSpec, results: list[CodesignResult], target: float, as_json: bool) -> None:
    """The designs as JSON (one object per fleet, each with ``fits``) or as a table."""
    if as_json:
        print(json.dumps([{"fits": r.fits, "fleet": r.fleet.text, "params": r.params if r.fits else None,
                           "reason": r.reason,
                           "model": model_config_fields(r.model) if r.model else None,
                           "samples_per_s": r.plan.samples_per_s if r.plan else None,
                           "peak_gb_per_gpu": peak_gb_per_gpu(r.plan) if r.plan else None}
                          for r in results], indent=1), flush=True)
        return
    t = Table(title=f"co-design of {model_label(model)} for >= {target:,.0f} samples/s")
    for col in ("fleet", "params (B)", "table rows (M)", "emb dim", "DCN rank x layers", "bottom MLP", "top MLP",
                "samples/s", "peak GB/GPU"):
        t.add_column(col)
    for r in results:
        if r.model is None:
            t.add_row(r.fleet.text, "-", "-", "-", "-", "-", "-", "-", r.reason)
            continue
        d = r.model.dense
        t.add_row(r.fleet.text, f"{r.params / 1e9:.2f}", f"{r.model.total_rows / 1e6:.0f}", str(r.model.embedding_dim),
                  f"{d.dcn_rank} x {d.dcn_layers}", "-".join(map(str, d.bottom_mlp)), "-".join(map(str, d.top_mlp)),
                  f"{r.plan.samples_per_s:,.0f}", f"{peak_gb_per_gpu(r.plan):.1f}")
    out.print(t)


def _note_if_untrainable(plan: Plan, output: Path) -> None:
    """A note on stderr where ``polyrec train --plan OUTPUT`` would refuse the plan just written, with the trainer's
    reason (``plan_apply.plan_fields``: host-cached tables, several embedding optimizers, the overlap 'pipeline' on
    several ranks, ...): before, the refusal came at the run's start."""
    from polyrec.runtime.plan_apply import plan_fields

    try:
        plan_fields(plan, output)
    except ValueError as refusal:
        err.print(f"[yellow]note:[/yellow] polyrec train --plan would refuse it: {escape(str(refusal))}")


def _check_modes(compare: str | None, codesign_: bool, target: float, output: Path | None, fleet: str | None,
                 out_dir: Path | None, row_cap: int | None) -> None:
    """Options that only one mode reads are refused in the others, not ignored."""
    if row_cap is not None and (codesign_ or compare is not None):  # co-design sizes the tables itself
        raise FleetError("--row-cap cuts the tables of a plan for `polyrec train --row-cap`; --codesign and --compare "
                         "make none: leave it out or run a plain plan")
    if compare is not None and not _csv(compare):
        raise FleetError(f"--compare {compare!r} names no device kind; e.g. --compare H100,H200,MI350X")
    if compare is not None and not codesign_ and fleet is not None:
        raise FleetError("--compare finds the smallest fleet of each device kind itself, and reads no --fleet; "
                         "leave --fleet out, or plan that fleet without --compare")
    if not math.isfinite(target) or target < 0:
        raise FleetError(f"--target-samples-per-s must be a finite number of samples/s, 0 or more, got {target}")
    if target and not codesign_:
        raise FleetError("--target-samples-per-s is the target of --codesign; add --codesign or leave it out")
    if output is not None and (codesign_ or compare is not None):
        mode = "--codesign prints its designs" if codesign_ else "--compare writes its report to --out-dir"
        raise FleetError(f"-o/--output writes one plan, and {mode}; leave -o out or run a plain plan")
    if out_dir is not None and (compare is None or codesign_):
        raise FleetError("--out-dir is where --compare (without --codesign) writes its report; use -o/--output "
                         "for a plan's JSON")


def _check_batch(batch_per_gpu: int | None, max_batch_per_gpu: int | None) -> None:
    """A fixed batch above a --max-batch-per-gpu the user gave is refused (the fixed batch won in silence);
    above the default bound it stands (that bound is the planner's choice, not the user's)."""
    if batch_per_gpu is not None and max_batch_per_gpu is not None and batch_per_gpu > max_batch_per_gpu:
        raise FleetError(f"--batch-per-gpu {batch_per_gpu} is above --max-batch-per-gpu {max_batch_per_gpu}; "
                         "raise the bound or leave one of them out")


def _check_dense_dtype(dense_dtype: str) -> None:
    """A dense dtype the trainer does not run is refused in every mode: its plan was written, exit 0, and then
    refused by ``polyrec train --plan``."""
    if dense_dtype not in TRAINABLE_DENSE_DTYPES:
        raise FleetError(f"--dense-dtype {dense_dtype}: polyrec train runs dense layers in "
                         f"{', '.join(TRAINABLE_DENSE_DTYPES[:-1])} or {TRAINABLE_DENSE_DTYPES[-1]} (its --precision), "
                         "and polyrec plan plans only what it runs")


@app.callback(invoke_without_command=True)
@closed_stdout_exits
def plan(
    model: str = typer.Option("mlperf-dcnv2", "--model", "--preset",
                              help="model preset (polyrec.models presets); --preset as in polyrec train"),
    fleet: str | None = typer.Option(None, "--fleet", help=f"devices: {FLEET_SYNTAX} (default: {DEFAULT_FLEET}; "
                                                         "--compare without --codesign finds each kind's fleet)"),
    weight_dtypes: str = typer.Option("fp32,fp16", help="embedding weight precisions allowed, preferred first"),
    optimizers: str = typer.Option("rowwise_adagrad", help="embedding optimizers allowed, preferred first"),
    batch_per_gpu: int | None = typer.Option(None, help="fix the batch per GPU (default: the planner chooses)"),
    max_batch_per_gpu: int | None = typer.Option(None, help="largest batch per GPU the planner may choose "
                                                 f"(default: {DEFAULT_MAX_BATCH})"),
    no_host_cache: bool = typer.Option(False, "--no-host-cache", help="never place tables in host memory"),
    host_memory_gb: float | None = typer.Option(None, help="memory of each host in GB (10^9 bytes) that host-cached "
                                                "tables may take, e.g. 2000 for a DGX H200 (default: not known; "
                                                "the planner takes an upper bound, two sockets of 6 TiB)"),
    overlap: str = typer.Option("ddp", help="what the runtime overlaps: none, ddp or pipeline"),
    dense_dtype: str = typer.Option("bf16", help="dense matmul inputs: bf16, fp32, or fp8 (fp8 GEMMs where the sizes "
                                                 "allow, bf16 activations: polyrec train --precision fp8); the "
                                                 "dtypes polyrec train runs"),
    distribution: str | None = typer.Option(None, help=f"index distribution: {', '.join(INDEX_DISTRIBUTIONS)} "
                                            f"(default: what --data synthetic:D draws, else {DEFAULT_DISTRIBUTION})"),
    one_hot: bool = typer.Option(False, "--one-hot", help="every feature one lookup per sample, as Criteo TSV and "
                                 "MLPerf binary files make it (default: the preset's multi-hot sizes, as synthetic "
                                 "data)"),
    data: str | None = typer.Option(None, "--data", help="price the lookups per sample this data makes, as polyrec "
                                    "train --data takes it (e.g. mlperf:DIR/day_0_sparse_multi_hot.npz: its "
                                    "widths); the files are opened, not read through"),
    row_cap: int | None = typer.Option(None, help="cut every table to at most this many rows, as polyrec train "
                                       "--row-cap does (a capped run takes only a plan of its rows); a plain plan "
                                       "only"),
    compare: str | None = typer.Option(None, help="device kinds to compare, e.g. H100,H200,B200,MI300X,MI350X,MI355X "
                                                  "(with --codesign: co-design on each, in the shape of --fleet: as "
                                                  "many per host, as many hosts)"),
    codesign_: bool = typer.Option(False, "--codesign", help="search model dimensions for the largest model that fits"),
    target_samples_per_s: float = typer.Option(0.0, help="throughput target of --codesign, samples/s"),
    out_dir: Path | None = typer.Option(None, help=f"where --compare writes its PNG and HTML (default: {REPORT_DIR})"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of tables"),
    output: Path | None = typer.Option(None, "-o", "--output", help="write the plan JSON here (for polyrec train --plan)"),
    device_file: list[Path] = typer.Option([], "--device-file", help="an extra device data file in the catalog's "
                                           "format (docs/hardware.md), for a device the catalog lacks; repeat for "
                                           "several (also: $POLYREC_DEVICE_DIR, a folder of them)"),
) -> None:
    """Plan MODEL on FLEET; or --compare device kinds; or --codesign for a throughput target.

    Exit codes: 0 a plan (with --json, {"fits": true, ...the plan}); 1 the model does not fit FLEET (with --json,
    stdout has {"fits": false, "model", "fleet", "reason"}), or --codesign found no design for a fleet (each
    design in the JSON says "fits"); 2 bad input. --compare exits 0 with a kind that fits no fleet: its row
    ("fits": false) is part of the report.
    """
    try:
        with device_files(device_file):
            _check_modes(compare, codesign_, target_samples_per_s, output, fleet, out_dir, row_cap)
            _check_batch(batch_per_gpu, max_batch_per_gpu)
            _check_dense_dtype(dense_dtype)
            if no_host_cache and host_memory_gb is not None:  # it sizes host caches only: it would be ignored
                raise FleetError("--host-memory-gb sizes host caches, which --no-host-cache turns off; leave one out")
            fleet = DEFAULT_FLEET if fleet is None else fleet  # an empty --fleet is refused, not the default
            spec = load_model(model, distribution, one_hot, row_cap, data)
            c = plan_constraints(weight_dtypes=weight_dtypes, optimizers=optimizers, batch_per_gpu=batch_per_gpu,
                                 max_batch_per_gpu=max_batch_per_gpu, overlap=overlap, dense_dtype=dense_dtype,
                                 allow_host_cache=not no_host_cache)
            if codesign_:
                fleets = [fleet_with_host_memory(f, host_memory_gb) for f in codesign_fleets(fleet, compare)]
                _codesign(spec, fleets, target_samples_per_s, c, as_json)
                return
            if compare:
                _compare(spec, tuple(compare_kinds(compare)), c, out_dir or REPORT_DIR, as_json,
                         host_memory_bytes(host_memory_gb))
                return
            start = time.perf_counter()
            result = make_plan(spec, fleet_with_host_memory(fleet, host_memory_gb), c)
            elapsed = time.perf_counter() - start
            if output is not None:
                output.write_text(plan_to_json(result))
                _note_if_untrainable(result, output)
    except BrokenPipeError:  # a reader that closed stdout: not a path (closed_stdout_exits)
        raise
    except OSError as exc:  # a path of --output or --out-dir that cannot be written
        where = f"{exc.filename}: {exc.strerror}" if exc.filename else str(exc)
        err.print(f"[red]error:[/red] {escape(where)}")
        raise typer.Exit(2) from exc
    except (FleetError, UnknownDeviceError) as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from exc
    except NoFitError as exc:
        err.print(f"[red]does not fit:[/red] {escape(str(exc))}")
        if as_json:
            print(no_fit_to_json(exc.model, exc.fleet, str(exc)), flush=True)
        raise typer.Exit(NO_FIT_EXIT) from exc
    except ValueError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from exc
    if as_json:
        print(plan_to_json(result), flush=True)
        return
    print_plan(result, out)
    out.print(f"planned in {elapsed:.2f} s" + (f"; wrote {output}" if output else ""))
