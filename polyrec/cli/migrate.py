"""``polyrec migrate``: scan for AMD hazards, hipify, port with a propose/verify loop, verify."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:
    from polyrec.migrate.verify import VerifyConfig

app = typer.Typer(no_args_is_help=True, help="Migrate CUDA code to AMD: scan, hipify, port, verify.")
# Paths and messages quote user input: no ":x:" emoji, and markup escaped where they are printed.
console = Console(emoji=False)
err = Console(stderr=True, emoji=False, soft_wrap=True)  # no line breaks inside quoted paths


def _fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"[red]error:[/] {escape(message)}")
    return typer.Exit(code)


def _message(exc: Exception) -> str:
    """``exc``'s message; a KeyError's without the quotes ``str`` adds."""
    return str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)


def _os_error(what: str, exc: OSError) -> typer.Exit:
    """The error of option ``what`` whose path the system refused; a folder to make where a file is, named so
    ("File exists" read as a refusal to overwrite)."""
    if isinstance(exc, FileExistsError) and exc.filename and Path(exc.filename).is_file():
        return _fail(f"{what} {exc.filename} is a file, not a folder: give a folder for the outputs")
    return _fail(f"{what} {exc.filename}: {exc.strerror}" if exc.filename else f"{what}: {exc}")


def _check_jobs_ref(ref: str) -> None:
    """A --compile-jobs MODULE:FUNC that imports and takes one DeviceSpec, or ValueError naming it."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--compile-jobs takes MODULE:FUNC, got {ref!r}")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"--compile-jobs {ref}: {exc}") from exc
    if not callable(fn):
        raise ValueError(f"--compile-jobs {ref}: {type(fn).__name__} is not a function")
    try:
        inspect.signature(fn).bind(None)  # called with one DeviceSpec
    except TypeError as exc:
        raise ValueError(f"--compile-jobs {ref}: cannot be called with one DeviceSpec ({exc})") from exc
    except ValueError:  # a builtin without a signature: its call says what is wrong
        pass


@app.command()
def scan(
    paths: list[Path] = typer.Argument(..., help="Files or directories (.py .cu .cuh .cpp .cc .cxx .h .hpp)."),
    as_json: bool = typer.Option(False, "--json", help="Print findings as JSON."),
    sarif: Path | None = typer.Option(None, "--sarif", help="Also write SARIF 2.1.0 to this file (-: to stdout, "
                                                         "the table to stderr)."),
    rule: list[str] = typer.Option([], "--rule", "-r", help="Only these rule IDs (repeatable)."),
    fail_on: str = typer.Option("warning", help="Exit 1 when a finding is at least: note | warning | error."),
    compile_jobs: list[str] = typer.Option([], "--compile-jobs",
                                           help="MODULE:FUNC returning Triton compile jobs for a DeviceSpec: "
                                                "compile them for gfx942/gfx950 (rule PM111; imports the module)."),
) -> None:
    """Find what breaks on AMD. Exit 0 clean, 1 findings at --fail-on or above, 2 files not scanned."""
    from polyrec.files import atomic_write_text
    from polyrec.migrate.outputs import refuse_overwrite
    from polyrec.migrate.rules import RULES
    from polyrec.migrate.sarif import to_sarif
    from polyrec.migrate.scan import CUDA_SUFFIXES, PYTHON_SUFFIXES, exit_code, iter_sources, scan_paths
    from polyrec.migrate.types import Severity

    severities = [s.value for s in Severity]
    if fail_on not in severities:
        raise _fail(f"--fail-on must be one of {', '.join(severities)}, got {fail_on!r}")
    sarif_out = sarif is not None and str(sarif) == "-"  # stdout, as tools take "-"
    if sarif_out and as_json:
        raise _fail("--sarif - and --json both print to stdout: give one, or write SARIF to a file")
    try:
        threshold = Severity(fail_on)
        if sarif is not None and not sarif_out:
            refuse_overwrite([sarif], [file for file, _ in iter_sources(paths)], "--sarif", "give another file")
        result = scan_paths(paths, rules=set(rule) if rule else None)
        if compile_jobs and (not rule or "PM111" in rule):
            from polyrec.migrate.compile_fit import compile_fit_findings

            for ref in compile_jobs:
                _check_jobs_ref(ref)
            result.findings += compile_fit_findings(compile_jobs)
    except (ValueError, KeyError, FileNotFoundError, ImportError, AttributeError) as exc:
        raise _fail(_message(exc)) from exc
    if not result.files_scanned and not result.not_scanned:  # an empty table and exit 0 read as a clean tree
        suffixes = " ".join(sorted(PYTHON_SUFFIXES | CUDA_SUFFIXES))
        raise _fail(f"scan: no source file under {', '.join(map(str, paths))} ({suffixes})")
    if sarif_out:  # stdout holds the SARIF document alone; the table goes to stderr
        typer.echo(json.dumps(to_sarif(result), indent=1))
        _print_table(result, err)
        raise typer.Exit(exit_code(result, threshold))
    if sarif is not None:
        try:
            atomic_write_text(sarif, json.dumps(to_sarif(result), indent=1) + "\n")
        except OSError as exc:  # its filename may be the temporary file's: name the one asked for
            raise _fail(f"--sarif {sarif}: {exc.strerror or exc}") from exc
    if as_json:
        typer.echo(json.dumps({"findings": [dataclasses.asdict(f) | {"severity": RULES[f.rule].severity.value,
                                                                     "name": RULES[f.rule].name}
                                            for f in result.findings],
                               "not_scanned": result.not_scanned, "files": result.files_scanned,
                               "lines": result.lines_scanned}, indent=1))
    else:
        _print_table(result, console)
    raise typer.Exit(exit_code(result, threshold))


def _print_table(result, out: Console) -> None:
    """The findings as a table with each rule's fix on ``out``; files not scanned on stderr."""
    from polyrec.migrate.rules import RULES

    table = Table(title=f"AMD hazards: {len(result.findings)} in {result.files_scanned} files "
                        f"({result.lines_scanned} lines, {result.seconds:.2f} s)")
    for col in ("location", "rule", "severity", "finding"):
        table.add_column(col, overflow="fold")
    colors = {"error": "red", "warning": "yellow", "note": "cyan"}
    for f in result.findings:
        r = RULES[f.rule]
        table.add_row(escape(f"{f.path}:{f.line}"), f"{r.id} {r.name}",
                      f"[{colors[r.severity.value]}]{r.severity.value}[/]", escape(f.message))
    out.print(table)
    for rule_id in sorted({f.rule for f in result.findings}):
        out.print(f"[bold]{rule_id}[/] fix: {RULES[rule_id].fix}")
    for path, why in result.not_scanned.items():
        err.print(f"[red]not scanned:[/] {escape(f'{path}: {why}')}")


@app.command()
def rules(as_json: bool = typer.Option(False, "--json", help="Print the rules as JSON.")) -> None:
    """List the rule catalog (IDs are stable)."""
    from polyrec.migrate.rules import RULES

    if as_json:
        typer.echo(json.dumps([dataclasses.asdict(r) for r in RULES.values()], indent=1, default=str))
        return
    table = Table(title="polyrec migrate rules")
    for col in ("id", "name", "severity", "languages", "summary"):
        table.add_column(col, overflow="fold")
    for r in RULES.values():
        table.add_row(r.id, r.name, r.severity.value, ",".join(r.languages), r.summary)
    console.print(table)


@app.command()
def hipify(
    path: Path = typer.Argument(..., help="A CUDA file or a directory."),
    out: Path = typer.Option(..., "--out", "-o", help="Output directory (same relative file names)."),
    launch_ggl: bool = typer.Option(False, "--launch-ggl",
                                    help="Rewrite <<<>>> to hipLaunchKernelGGL (hipify-clang --hip-kernel-execution-syntax)."),
    pytorch_extension: bool = typer.Option(False, help="Also apply torch's PyTorch/c10-specific names."),
    target: str | None = typer.Option(None, help="The AMD target the output is for (gfx942 or gfx950): fp8 types "
                                      "of CUDA's OCP formats are renamed only where the target has them (default: "
                                      "none, left to the scan's PM112)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report (hipify-report.json) instead of a table."),
) -> None:
    """Translate CUDA to HIP; write the files, hipify.diff and hipify-report.json into OUT."""
    from polyrec.files import atomic_write_text
    from polyrec.migrate.hipify import hipify_tree
    from polyrec.migrate.scan import scan_paths

    if path.exists() and out.resolve() == (path if path.is_dir() else path.parent).resolve():
        raise _fail(f"--out {out} is where the sources are: hipify would overwrite them; give another directory")
    skipped: dict[str, str] = {}
    try:
        reports, diff = hipify_tree(path, out, launch_ggl=launch_ggl, pytorch_extension=pytorch_extension,
                                    target=target, skipped=skipped)
        out.mkdir(parents=True, exist_ok=True)  # no file translated (all skipped) made none
        atomic_write_text(out / "hipify.diff", diff)
    except (FileNotFoundError, ValueError) as exc:
        raise _fail(str(exc)) from exc
    except OSError as exc:  # an --out that is a file, or under one
        raise _os_error("--out", exc) from exc
    remaining = scan_paths([out / r.path for r in reports])
    doc = {"files": [dataclasses.asdict(r) for r in reports], "skipped": skipped,
           "left": [dataclasses.asdict(f) for f in remaining.findings], "not_scanned": remaining.not_scanned}
    atomic_write_text(out / "hipify-report.json", json.dumps(doc, indent=1) + "\n")
    if as_json:
        typer.echo(json.dumps(doc, indent=1))
        return
    table = Table(title=escape(f"hipify {path} -> {out}"))
    for col in ("file", "renamed", "headers", "launches", "fixes", "unmapped", "hazards left"):
        table.add_column(col, overflow="fold")
    for r in reports:
        left = [f"{f.rule}:{f.line}" for f in remaining.findings if f.path == str(out / r.path)]
        table.add_row(escape(r.path), str(len(r.renamed)), str(len(r.headers)), str(r.launches_rewritten),
                      escape("\n".join(r.fixes)) or "-", escape(", ".join(r.unmapped)) or "-", ", ".join(left) or "-")
    console.print(table)
    for rel, why in skipped.items():
        console.print(escape(f"skipped {rel}: {why}"))
    console.print(escape(f"diff: {out / 'hipify.diff'}  report: {out / 'hipify-report.json'}"))


# verify's options that port passes on to verify (one definition each: the two commands mean the same by them)
_SEEDS = typer.Option(3, help="Random seeds per shape.")
_SEED = typer.Option(None, help="First seed (the report's 'seeds' repeat a run); default: drawn at random, so a "
                     "candidate cannot special-case known inputs.")
_TIMEOUT = typer.Option(300.0, help="Seconds per sandboxed subprocess, wall clock and CPU time.")


def _verify_config(seeds: int, seed: int | None, timeout: float, compile_: bool) -> VerifyConfig:
    """The VerifyConfig of ``--seeds``, ``--seed``, ``--timeout`` and ``--compile`` (verify's and port's), or the
    CLI error (exit 2) naming the bad one."""
    from polyrec.migrate.verify import SEED_BASES, VerifyConfig, fresh_seeds

    if not math.isfinite(timeout) or timeout <= 0:
        raise _fail(f"--timeout must be a positive number of seconds, got {timeout}")
    if seeds < 1:
        raise _fail(f"--seeds must be at least 1, got {seeds}")
    if seed is not None and not 0 <= seed < SEED_BASES:
        raise _fail(f"--seed must be in [0, {SEED_BASES}), got {seed}")
    return VerifyConfig(seeds=fresh_seeds(seeds, seed), timeout_s=timeout, cpu_s=math.ceil(timeout),
                        compile=compile_)


@app.command()
def verify(
    candidate: Path = typer.Argument(..., help="Python file with @triton.jit kernels and run(*inputs)."),
    reference: str = typer.Option(..., "--reference", help="MODULE:FUNC (module defines SHAPES, make_inputs)."),
    seeds: int = _SEEDS,
    seed: int | None = _SEED,
    compile_: bool = typer.Option(True, "--compile/--no-compile", help="Compile for sm_90, gfx942, gfx950."),
    timeout: float = _TIMEOUT,
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON instead of the verdict line."),
) -> None:
    """Verify a hand-written kernel. Exit 0 accepted, 1 rejected, 2 bad input."""
    from polyrec.migrate.verify import verify as run_verify

    if not candidate.is_file():
        raise _fail(f"{candidate}: " + ("a directory, not a Python file" if candidate.is_dir() else "no such file"))
    config = _verify_config(seeds, seed, timeout, compile_)
    sys.path.insert(0, str(Path.cwd()))
    try:
        report = run_verify(candidate, reference, config)
    except (ImportError, ValueError) as exc:
        raise _fail(str(exc)) from exc
    if as_json:
        typer.echo(json.dumps(report.as_dict(), indent=1))
    else:
        verdict = "[green]ACCEPTED[/]" if report.accepted else "[red]REJECTED[/]"
        console.print(escape(f"{candidate}: ") + verdict + "  "
                      + escape("  ".join(f"{k}={v}" for k, v in report.stages.items())))
        for failure in report.failures:
            console.print(escape(f"  - {failure}"))
        for warning in report.warnings:
            console.print("  [yellow]warning:[/] " + escape(warning))
    raise typer.Exit(0 if report.accepted else 1)


@app.command()
def port(
    kernel: Path = typer.Argument(..., help="CUDA kernel or Python op source to port."),
    reference: str = typer.Option(..., "--reference", help="MODULE:FUNC the port must match."),
    out: Path = typer.Option(Path("port-out"), "--out", "-o", help="Work directory (attempts, transcript)."),
    url: str | None = typer.Option(None, help="OpenAI-compatible base URL (else $POLYREC_LLM_URL)."),
    model: str | None = typer.Option(None, help="Model name (else $POLYREC_LLM_MODEL)."),
    api_key: str | None = typer.Option(None, help="API key (else $POLYREC_LLM_API_KEY); never logged."),
    rounds: int = typer.Option(4, help="Propose/verify rounds at most."),
    seeds: int = _SEEDS,
    seed: int | None = _SEED,
    compile_: bool = typer.Option(True, "--compile/--no-compile", help="Compile stage of verification."),
    timeout: float = _TIMEOUT,
    as_json: bool = typer.Option(False, "--json", help="Print the report (port-report.json) instead of text."),
) -> None:
    """Port a kernel to portable Triton with a propose/verify loop; each round's steps on stderr. Exit 0 ported,
    1 not (yet), 2 bad input."""
    from polyrec.migrate.port import port as run_port
    from polyrec.migrate.providers import OpenAICompatibleProvider, ProviderError

    if rounds < 1:
        raise _fail(f"--rounds must be at least 1, got {rounds}")
    config = _verify_config(seeds, seed, timeout, compile_)
    sys.path.insert(0, str(Path.cwd()))
    try:
        provider = OpenAICompatibleProvider.from_env(url, model, api_key)
        report = run_port(kernel, reference, provider, work_dir=out, rounds=rounds, config=config,
                          progress=lambda line: err.print(escape(line), highlight=False))
    except (ProviderError, ImportError, ValueError, FileNotFoundError) as exc:
        raise _fail(str(exc)) from exc
    except OSError as exc:  # an --out that is a file, or under one
        raise _os_error("--out", exc) from exc
    if as_json:
        typer.echo(json.dumps(report.as_dict(), indent=1))
        raise typer.Exit(0 if report.accepted else 1)
    status = "[green]ported[/]" if report.accepted else "[yellow]not ported[/]"
    console.print(escape(f"{kernel}: ") + status
                  + escape(f" (provider: {report.provider or 'none'}, rounds: {report.rounds_used})"))
    for item in (report.result_path, report.hipified_path, report.transcript_path):
        if item:
            console.print(escape(f"  wrote {item}"))
    for item in report.left:
        console.print(escape(f"  left: {item}"))
    raise typer.Exit(0 if report.accepted else 1)
