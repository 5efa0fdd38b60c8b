"""``polyrec hw``: the hardware catalog, detection, calibration and compile checks."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import os
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from polyrec.cli.pipes import StdoutConsole, closed_stdout_exits
from polyrec.hardware import catalog, get_device
from polyrec.hardware.catalog import CatalogError, UnknownDeviceError, device_files, same_name
from polyrec.hardware.detect import CPU_NAME
from polyrec.hardware.types import DeviceSpec

app = typer.Typer(no_args_is_help=True, help="Hardware: catalog, detection, calibration, compile checks.")
console = StdoutConsole()  # a reader that closed it ends the command with closed_stdout_exits
# messages quote user input: no ":x:" emoji, no markup (escape), no line breaks inside paths
err = Console(stderr=True, emoji=False, soft_wrap=True)

JSON_OPT = typer.Option(False, "--json", help="Print JSON instead of a table.")
#: The catalog table's columns after the name, each name over its unit (smem/LDS: shared memory a block may use;
#: fp8 "-": none in the datasheet).
CATALOG_COLUMNS = ("arch", "CUs", "HBM\nGB", "HBM\nTB/s", "bf16\nTFLOP/s", "fp8\nTFLOP/s", "smem/\nLDS\nKiB", "L2\nMiB",
                   "TDP\nW")
#: Why the ``cpu`` that ``hw detect`` names without a GPU is no device ``hw show`` or ``compile-check -d`` knows.
CPU_NOTE = (f"{CPU_NAME} is the host CPU, which `polyrec hw detect` names where torch sees no GPU; it is not a "
            "catalog device (`polyrec hw detect --json` prints its spec)")


def spec_dict(spec: DeviceSpec) -> dict[str, Any]:
    return dataclasses.asdict(spec)


def _print_json(obj: Any) -> None:
    typer.echo(json.dumps(obj, indent=1, default=str))


def _catalog_or_exit() -> dict[str, DeviceSpec]:
    """The catalog, or exit 2 naming the malformed data file and field (not a traceback)."""
    try:
        return catalog()
    except CatalogError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from exc


def _device_or_exit(name: str) -> DeviceSpec:
    try:
        return get_device(name)
    except (UnknownDeviceError, CatalogError) as exc:
        cpu = isinstance(exc, UnknownDeviceError) and same_name(exc.name, [CPU_NAME]) is not None
        err.print(f"[red]error:[/] {escape(str(exc))}" + (f". {escape(CPU_NOTE)}" if cpu else ""))
        raise typer.Exit(2) from exc


def _tb(x: float) -> str:
    return f"{x / 1e12:.2f}"


@app.command("list")
@closed_stdout_exits
def list_devices(as_json: bool = JSON_OPT) -> None:
    """List the catalog's devices."""
    specs = _catalog_or_exit()
    if as_json:
        _print_json([spec_dict(s) for s in specs.values()])
        return
    table = Table(title="polyrec hardware catalog (datasheet values)")
    table.add_column("name", no_wrap=True, min_width=6)
    for col in CATALOG_COLUMNS:  # units under the names: every value whole at 80 columns (make demo's output)
        table.add_column(col, justify="right", no_wrap=True)
    for s in specs.values():
        table.add_row(escape(s.name), escape(s.arch), str(s.compute_units), f"{s.hbm_bytes / 1e9:.0f}",
                      _tb(s.hbm_bandwidth), f"{s.peak_flops['bf16'] / 1e12:.0f}", _tflops_or_none(s.peak_flops["fp8"]),
                      f"{s.smem_per_block / 1024:.0f}", f"{s.l2_bytes / 2**20:.0f}", f"{s.tdp_watts:.0f}")
    console.print(table)


def _tflops_or_none(flops: float) -> str:
    """A peak rate in TFLOP/s, "-" where the datasheet gives none (the A100's fp8: 0)."""
    return f"{flops / 1e12:.0f}" if flops else "-"


def _device_with_files_or_exit(name: str, paths: list[Path]) -> DeviceSpec:
    """``name`` from the catalog with the extra data files ``paths`` (``--device-file``), or exit 2 naming the
    malformed file and field, or the unknown name."""
    try:
        with device_files(paths):
            return _device_or_exit(name)
    except CatalogError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from exc


@app.command()
@closed_stdout_exits
def show(name: str = typer.Argument(..., help="Device name, e.g. H200 or MI350X."),
         as_json: bool = JSON_OPT,
         device_file: list[Path] = typer.Option([], "--device-file", help="An extra device data file in the "
                                                "catalog's format (docs/hardware.md), checked as the catalog's are; "
                                                "repeat for several (also: $POLYREC_DEVICE_DIR, a folder of them).")
         ) -> None:
    """Show every field of one device with its source."""
    spec = _device_with_files_or_exit(name, device_file)
    if as_json:
        _print_json(spec_dict(spec))
        return
    table = Table(title=escape(spec.full_name))  # a data file's text, printed as written (no markup)
    table.add_column("field")
    table.add_column("value", justify="right")
    table.add_column("source")
    for f in dataclasses.fields(spec):
        if f.name in ("sources", "peak_flops"):
            continue
        source = spec.source_of(f.name) if f.name in spec.sources else ""
        table.add_row(f.name, escape(str(getattr(spec, f.name))), escape(source))
    for dtype, value in spec.peak_flops.items():
        table.add_row(f"peak_flops.{dtype}", f"{value / 1e12:.1f} T", escape(spec.source_of(f"peak_flops.{dtype}")))
    console.print(table)


@app.command()
@closed_stdout_exits
def detect(as_json: bool = JSON_OPT) -> None:
    """Name the present device (the CPU when there is no GPU)."""
    from polyrec.hardware.detect import detect as run_detect

    _catalog_or_exit()
    found = run_detect()
    if found.warning:
        err.print(f"[yellow]warning:[/] {escape(found.warning)}")
    if as_json:
        _print_json({"how": found.how, "props": dataclasses.asdict(found.props) if found.props else None,
                     "spec": spec_dict(found.spec), "warning": found.warning})
        return
    s = found.spec
    if found.how == "cpu":
        console.print(f"no GPU: torch sees no CUDA or ROCm device; the host CPU stands in: [bold]{escape(s.name)}[/] "
                      f"({escape(s.full_name)}), not a catalog device")
        return
    console.print(f"[bold]{escape(s.name)}[/] ({escape(s.full_name)}), matched by {found.how}")
    if found.props:
        p = found.props
        console.print(f"  torch reports: '{escape(p.name)}' {escape(p.gcn_arch_name) or f'sm_{p.major}{p.minor}'}, "
                      f"{p.multi_processor_count} SMs/CUs, {p.total_memory / 2**30:.1f} GiB, "
                      f"L2 {p.l2_cache_size / 2**20:.0f} MiB")


def _ceiling_rows(spec: DeviceSpec, measured: dict[str, Any] | None) -> list[dict[str, Any]]:
    from polyrec.hardware.calibrate import ceilings

    c = ceilings(spec, measured)
    rows = [{"ceiling": "copy bandwidth", "value": f"{c.copy_bandwidth.value / 1e12:.2f} TB/s",
             "origin": c.copy_bandwidth.origin},
            {"ceiling": "L2 bandwidth", "value": f"{c.l2_bandwidth.value / 1e12:.2f} TB/s",
             "origin": c.l2_bandwidth.origin}]
    rows += [{"ceiling": f"matmul {d}", "value": f"{v.value / 1e12:.0f} TFLOP/s", "origin": v.origin}
             for d, v in c.matmul_flops.items()]
    rows.append({"ceiling": "launch latency", "value": f"{c.launch_latency.value * 1e6:.1f} us",
                 "origin": c.launch_latency.origin})
    probe = (measured or {}).get("host_scale")
    if probe:
        fixed = f", {probe['fixed_ms']:.2f} ms per step" if "fixed_ms" in probe else ""
        rows.append({"ceiling": "host speed (planner launch costs x, fixed part)", "value": f"{probe['value']:.3f}{fixed}",
                     "origin": f"calibrated {probe['date']}: {probe['probe']}"})
    return rows


@app.command()
@closed_stdout_exits
def calibrate(as_json: bool = JSON_OPT,
              save: bool = typer.Option(True, help="Store the result in the user's cache directory."),
              host_probe: bool = typer.Option(True, help="Also time two host-bound training steps: this "
                                              "host's speed for the planner's host costs (~30 s).")) -> None:
    """Measure copy and L2 bandwidth, matmul rates and launch latency of the present GPU (<60 s), and
    this host's speed for the planner (two probe training steps)."""
    from rich.progress import Progress

    from polyrec.hardware.calibrate import calibrate as run_calibrate
    from polyrec.hardware.calibrate import calibration_steps
    from polyrec.hardware.detect import detect as run_detect

    _catalog_or_exit()
    found = run_detect()
    if found.how == "cpu":
        err.print("[red]error:[/] hw calibrate needs a CUDA or ROCm GPU; torch sees none")
        raise typer.Exit(2)
    with Progress(console=err, transient=True) as bar:
        task = bar.add_task("calibrating", total=len(calibration_steps(found.spec)) + host_probe)
        measured = run_calibrate(found.spec, progress=lambda step: bar.update(task, advance=1, description=step))
        if host_probe:
            from polyrec.runtime.host_probe import measure_host_scale

            bar.update(task, description="host probe steps")
            measured["host_scale"] = measure_host_scale(found.spec.name)
            bar.update(task, advance=1)
    path, unsaved = _saved(found.spec.name, measured) if save else (None, None)
    rows = _ceiling_rows(found.spec, measured)
    if as_json:
        _print_json({"measured": measured, "ceilings": rows, "saved_to": str(path) if path else None})
    else:
        table = Table(title=f"{found.spec.name} ceilings")
        for col in ("ceiling", "value", "origin"):
            table.add_column(col)
        for row in rows:
            table.add_row(*map(escape, row.values()))
        console.print(table)
        if path:
            console.print(f"saved to {path}")
    if unsaved:
        err.print(f"[red]error:[/] {escape(unsaved)}")
        raise typer.Exit(1)


def _saved(device: str, measured: dict[str, Any]) -> tuple[Path | None, str | None]:
    """(where the calibration was stored, None), or (None, why it could not be): the measurements are
    printed either way, not lost to a traceback after a minute of timing."""
    from polyrec.hardware.calibrate import calibration_path, save_calibration

    try:
        return save_calibration(device, measured), None
    except OSError as exc:
        return None, (f"could not store the calibration at {calibration_path(device)}: {exc.strerror or exc}; "
                      "set POLYREC_CACHE_DIR to a writable directory and run it again (the values are above)")


def _import_hint(module_name: str, exc: Exception) -> str:
    """Where a module not found is a file or package of the current folder, which the installed ``polyrec``
    command does not import from (``python -m`` does): how to make it importable."""
    top = module_name.split(".")[0]
    here = Path.cwd()
    if not isinstance(exc, ModuleNotFoundError) or not top or not (
            (here / f"{top}.py").is_file() or (here / top / "__init__.py").is_file()):
        return ""
    return (f" ({top} is in the current folder, which the polyrec command does not import from: run "
            "PYTHONPATH=. polyrec ...)")


def _load_jobs_fn(ref: str):
    """The compile-jobs function named by ``module:function`` (a --kernel), or exit 2 saying why not."""
    module_name, _, attr = ref.partition(":")
    try:
        fn = getattr(importlib.import_module(module_name), attr or "compile_jobs")
    except (ImportError, AttributeError, ValueError) as exc:  # ValueError: an empty module name
        err.print(f"[red]error:[/] --kernel {escape(ref)}: {escape(str(exc))}{_import_hint(module_name, exc)}")
        raise typer.Exit(2) from exc
    if not callable(fn):
        err.print(f"[red]error:[/] --kernel {escape(ref)}: {type(fn).__name__} is not a function")
        raise typer.Exit(2)
    try:
        inspect.signature(fn).bind(None)  # called with one DeviceSpec
    except TypeError as exc:
        err.print(f"[red]error:[/] --kernel {escape(ref)}: cannot be called with one DeviceSpec ({escape(str(exc))})")
        raise typer.Exit(2) from exc
    return fn


def _refuse_no_jobs(kernel: list[str], planned: list, specs: list[DeviceSpec]) -> None:
    """Exit 2 where a --kernel the user named gave no compile job for any device asked: its empty table and exit
    code 0 said nothing was wrong when nothing had been compiled."""
    given = {ref for ref, _, _ in planned}
    idle = [ref for ref in kernel if ref not in given]
    if idle:
        devices = ", ".join(spec.name for spec in specs)
        err.print(f"[red]error:[/] --kernel {escape(', '.join(idle))}: no compile job for {escape(devices)}: "
                  "nothing to check")
        raise typer.Exit(2)


def _jobs_of(ref: str, fn, spec: DeviceSpec) -> list:
    """The compile jobs ``fn`` (a --kernel ``ref``) gives for ``spec``, or exit 2 when it gives something else."""
    from polyrec.hardware.compile import CompileJob

    jobs = fn(spec)
    if isinstance(jobs, (list, tuple)):
        stray = next((job for job in jobs if not isinstance(job, CompileJob)), None)
        if stray is None:
            return list(jobs)
        what = f"a {type(jobs).__name__} holding a {type(stray).__name__}"
    else:
        what = type(jobs).__name__
    err.print(f"[red]error:[/] --kernel {escape(ref)}: returned {escape(what)}, not a list of CompileJob")
    raise typer.Exit(2)


def _fit_cell(report) -> str:
    """The table's "fits" cell: yes (with a kept spill said so), or NO and the problems."""
    if not report.fits:
        return "[red]NO: " + escape("; ".join(report.problems)) + "[/]"
    return "yes, spill kept: " + escape(report.known_spill) if report.known_spill else "yes"


@app.command("compile-check")
@closed_stdout_exits
def compile_check(
    device: list[str] = typer.Option([], "--device", "-d", help="Device(s) to compile for; default: every distinct target."),
    kernel: list[str] = typer.Option([], "--kernel", "-k",
                                     help="module:function returning compile jobs for a spec; default: polyrec's kernels."),
    as_json: bool = JSON_OPT,
) -> None:
    """Compile kernels for NVIDIA and AMD targets without a GPU; report shared memory, registers, spills."""
    from polyrec.hardware.compile import CompileHarnessError, compile_for, distinct_targets
    from polyrec.kernels.registry import KERNEL_MODULES

    if os.environ.get("TRITON_INTERPRET") == "1":
        err.print("[red]error:[/] compile-check needs TRITON_INTERPRET unset")
        raise typer.Exit(2)
    specs = [_device_or_exit(d) for d in device] if device else distinct_targets(list(_catalog_or_exit().values()))
    refs = kernel or [f"{m}:compile_jobs" for m in KERNEL_MODULES]
    if not refs:
        err.print("[yellow]no kernels registered in polyrec.kernels.registry; pass --kernel module:function[/]")
    jobs_fns = [(ref, _load_jobs_fn(ref)) for ref in refs]  # every --kernel resolved before any compile
    try:
        planned = [(ref, spec, job) for ref, fn in jobs_fns for spec in specs for job in _jobs_of(ref, fn, spec)]
        _refuse_no_jobs(kernel, planned, specs)
        reports = [compile_for(job, spec) for _, spec, job in planned]
    except CompileHarnessError as exc:  # a job the harness cannot compile: not a JITFunction, unknown argument names
        err.print(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from exc
    if as_json:
        _print_json([dataclasses.asdict(r) | {"fits": r.fits} for r in reports])
    else:
        table = Table(title="compile check")
        for col in ("kernel/config", "device", "target", "smem/LDS B", "regs", "spills", "fits"):
            table.add_column(col)
        for r in reports:
            table.add_row(escape(r.label), escape(r.device), escape(r.target), str(r.shared_bytes), str(r.registers),
                          str(r.spill_bytes), _fit_cell(r))
        console.print(table)
    if any(not r.fits for r in reports):
        raise typer.Exit(1)
