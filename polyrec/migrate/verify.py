"""``polyrec migrate verify``: checks a candidate Triton port cannot fool.

A candidate is a Python file defining ``run(*inputs) -> Tensor`` that launches ``@triton.jit`` kernels.
The reference is ``module:function`` in a module that also defines ``SHAPES`` (at least three
distinct shapes) and ``make_inputs(shape, generator) -> tuple``. Stages, all of which must pass:

1. static bans (AST; static.py): only torch / triton / math imports, no reach into other modules, no
   eval/exec/open, no autotune, nothing named after the reference, no kernel call of a triton.language builtin
   through a name bound at import (``from triton.language import dot``, ``mm = tl.dot``), which stage 2's
   interpreter cannot run though a GPU compiles it (``static.INTERPRETER_UNPATCHED``). Warned, not failed: a
   ``tl.dot`` left at Triton's default precision (``static.DOT_DEFAULT_PRECISION``), which stage 2's interpreter
   does not model;
2. numerics: every shape x at least one seed, fresh random inputs, outputs poisoned, against the reference in
   float64 (TOLERANCES), in a sandboxed subprocess (CPU seconds, memory and file-size limits, no network, no
   processes, no file writes outside its own folder, a Triton cache of its own in that folder, the reference
   module not importable) through the Triton interpreter on the CPU (GPUs hidden from the child, present or
   not: a GPU run needs Triton to start the C compiler and ldconfig, which the sandbox refuses). Rejected:
   outputs that alias an input, outputs not written by a Triton launch (already holding data when a launch
   first took them, changed between launches or after their last launch), inputs that run() wrote to, a store
   past either end of an input or of a tensor from the torch.empty / zeros / ones / full allocators, a load past
   an input's end (it reads the poison of a guard band: sandbox.GUARD_BYTES), a child that exits without
   results, a reference file changed. The shapes are the reference's ``SHAPES`` and, per
   seed, shapes derived from them within the dims it declares (off-by-one tails, size 1, one random size, one
   size above the largest per dim: cases.py), so a port right only on the declared sizes, or only up to the
   largest, fails. Fresh tensors are poisoned (sandbox.py: NaN,
   True, the integer maximum) and a case whose output still holds that value anywhere runs again with a second
   poison (the float maximum, False, the integer minimum): an element holding the first poison, then the
   second, was left unwritten, even where the first poison was the right value (a bool output has only two);
3. compile: exactly the launches recorded during the numerics run are compiled for sm_90, gfx942 and
   gfx950 and must fit (shared memory / LDS, registers, spills, threads per block).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import re
import resource
import secrets
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from polyrec.migrate.cases import Case, make_cases
from polyrec.migrate.interpreter_checks import interpreter_warnings
from polyrec.migrate.static import precision_warnings, static_check

REPO_ROOT = Path(__file__).resolve().parents[2]
#: Comparison tolerances per output dtype (atol, rtol) against the float64 reference. float16 and bfloat16:
#: about 10 and 4 units in the last place at 1.0 (ulp 2^-10, 2^-7). float32 is much wider than its ulp (2^-23
#: at 1.0: rtol 1e-4 is ~840 ulp), on purpose: a correct fp32 reduction drifts from the exact result as it
#: grows. A K-loop of 32-wide chunks into one fp32 accumulator (32x32 outputs, N(0, 1) inputs) is off by up
#: to 2.5e-5 at K=1024, 5.2e-5 at K=3456 and 2.5e-4 at K=16384, within a quarter of this bound, while
#: torch.testing's fp32 default (atol 1e-5, rtol 1.3e-6; https://pytorch.org/docs/stable/testing.html)
#: rejects it from K=2048, and torch's own fp32 matmul from K=1024. The bound still rejects an fp32 result of
#: magnitude ~1 rounded once to tf32 or float16 (10-bit mantissa, relative error up to 2^-11 = 4.9e-4) or to
#: bfloat16. tests/test_migrate_verify_coverage.py checks both sides. float64: 1e-10 (~4.5e5 ulp of 2^-52) is a loose
#: bound, not a measured one.
TOLERANCES = {"torch.float32": (1e-4, 1e-4), "torch.float16": (1e-2, 1e-2), "torch.bfloat16": (3e-2, 3e-2),
              "torch.float64": (1e-10, 1e-10)}

#: Base seeds a run draws from: each seed's generators are seeded seed * cases.CASES_PER_SEED + case index (< 2^63).
SEED_BASES = 2**31


def fresh_seeds(count: int, base: int | None = None) -> tuple[int, ...]:
    """``count`` consecutive seeds from ``base``, by default drawn at random: a candidate cannot know the
    inputs it is checked on (fixed seeds let one special-case them); the report says which ran."""
    base = secrets.randbelow(SEED_BASES) if base is None else base
    return tuple(range(base, base + count))


@dataclass(kw_only=True, slots=True)
class VerifyConfig:
    """How hard verification pushes a candidate."""

    seeds: tuple[int, ...] = field(default_factory=lambda: fresh_seeds(3))  # inputs per seed and shape
    timeout_s: float = 300.0  # wall-clock limit of each sandboxed subprocess, seconds
    cpu_s: int = 300  # RLIMIT_CPU of the subprocess, CPU seconds
    memory_bytes: int = 8 << 30  # RLIMIT_AS of the subprocess, bytes (torch + triton need ~3 GiB virtual)
    compile: bool = True  # run the compile stage (needs TRITON_INTERPRET unset in the child; ~10-60 s)


@dataclass(kw_only=True, slots=True)
class VerifyReport:
    """Verdict and the reasons; ``failures`` and, as advice, ``warnings`` are what a person or the LLM gets back."""

    candidate: str
    accepted: bool = False
    failures: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # risks the stages cannot check; they do not reject
    stages: dict[str, str] = field(default_factory=dict)  # stage -> "pass" | "fail" | "skipped: why"
    compile_reports: list[dict[str, Any]] = field(default_factory=list)
    seeds: tuple[int, ...] = ()  # the input seeds it was checked on (``--seed`` repeats them)

    def as_dict(self) -> dict[str, Any]:
        return {"candidate": self.candidate, "accepted": self.accepted, "failures": self.failures,
                "warnings": self.warnings, "stages": self.stages, "compile_reports": self.compile_reports,
                "seeds": list(self.seeds)}


def _limits(cpu_s: int, memory_bytes: int) -> Any:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 30, 1 << 30))
        os.setsid()
    return apply


def _sandbox_env(interpret: bool) -> dict[str, str]:
    # not TRITON_CACHE_DIR: the child keeps a cache of its own (sandbox.py), so no candidate can write
    # compiled kernels another candidate or the caller would load
    keep = ("PATH", "HOME", "LANG", "TMPDIR", "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env["PYTHONPATH"] = str(REPO_ROOT)
    if interpret:  # the Triton interpreter on the CPU, GPUs hidden: a GPU run would have Triton build its
        # launcher with the C compiler and find libcuda with ldconfig, new processes the sandbox refuses
        env.update(TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="", HIP_VISIBLE_DEVICES="")
    return env


def run_sandboxed(mode: str, candidate: Path, cases_file: Path, out_file: Path, blocked: str,
                  config: VerifyConfig, *, interpret: bool) -> str | None:
    """Run the sandbox child; None on success, else why it failed (stderr tail, timeout, limit)."""
    cmd = [sys.executable, "-m", "polyrec.migrate.sandbox", mode, str(candidate.resolve()), str(cases_file),
           str(out_file), blocked]
    finished = run_as_group(cmd, env=_sandbox_env(interpret), timeout_s=config.timeout_s,
                            preexec_fn=_limits(config.cpu_s, config.memory_bytes))
    if finished is None:
        return f"{mode}: timed out after {config.timeout_s:.0f} s"
    code, stderr = finished
    if code in (-signal.SIGKILL, -signal.SIGXCPU):  # RLIMIT_CPU's signals (SIGKILL where soft = hard): no stderr
        return (f"{mode}: killed by {signal.Signals(-code).name} past its CPU-time limit of {config.cpu_s} s "
                "(or by the out-of-memory killer)")
    if code != 0:
        return f"{mode}: exit code {code}: {stderr.strip()[-1500:]}"
    return None


def run_as_group(cmd: list[str], *, env: dict[str, str], timeout_s: float,
                 preexec_fn: Any) -> tuple[int, str] | None:
    """Run ``cmd`` (whose ``preexec_fn`` makes it a session leader: ``_limits``) in the temp directory; (exit
    code, stderr), or None past ``timeout_s``. Its whole process group is killed when it ends or times out: a
    process it started (the compile stage's ptxas) outlived a timeout."""
    with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          preexec_fn=preexec_fn, cwd=tempfile.gettempdir(), stdin=subprocess.DEVNULL) as proc:
        try:
            _, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None  # the group killed below; leaving the block closes the pipes and reaps the child
        finally:
            _kill_group(proc.pid)
    return proc.returncode, stderr


def _kill_group(pgid: int) -> None:
    """SIGKILL every process left in group ``pgid`` (none: nothing to do)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def load_reference(ref: str) -> tuple[Any, Any]:
    """(module, function) of 'package.module:function', checking the protocol verify needs."""
    module_name, _, func_name = ref.partition(":")
    if not func_name:
        raise ValueError(f"reference {ref!r}: expected MODULE:FUNCTION")
    if re.search(r"[/\\]|^\.|\.py$", module_name):  # a file's path: import would fail on it, saying nothing useful
        dotted = ".".join(p for p in re.split(r"[/\\]", module_name.removesuffix(".py")) if p not in ("", ".", ".."))
        raise ValueError(f"reference {ref!r}: MODULE is a module name as `import` takes it ({dotted}:{func_name}), "
                         "not a file path; run from the folder that holds it")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # a reference that fails to import (not found, SyntaxError, its own raise) is bad input
        raise ValueError(f"reference {ref!r}: importing {module_name} failed: {type(exc).__name__}: {exc}") from exc
    func = getattr(module, func_name, None)
    if not callable(func):
        raise ValueError(f"reference {ref!r}: {module_name} has no function {func_name}")
    shapes = getattr(module, "SHAPES", None)
    if not shapes or len({tuple(s) for s in shapes}) < 3 or not callable(getattr(module, "make_inputs", None)):
        raise ValueError(f"reference {ref!r}: {module_name} must define SHAPES (>= 3 distinct shapes) and "
                         "make_inputs(shape, generator)")
    return module, func


def compare(out: Any, inputs: tuple, func: Any, where: str) -> str | None:
    """Why ``out`` does not match the float64 reference of ``func(*inputs)``; None when it does."""
    import torch

    expected = func(*inputs)
    if out.shape != expected.shape or out.dtype != expected.dtype:
        return f"{where}: got {tuple(out.shape)} {out.dtype}, expected {tuple(expected.shape)} {expected.dtype}"
    to64 = tuple(x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs)
    ref = func(*to64).double() if expected.is_floating_point() else expected
    got = out.double() if expected.is_floating_point() else out
    if expected.is_floating_point() and torch.isnan(got).any() and not torch.isnan(ref).any():
        return f"{where}: NaN in output (poisoned output not fully written, or computed from a load outside an input)"
    atol, rtol = TOLERANCES.get(str(expected.dtype), (0.0, 0.0))
    if not torch.allclose(got, ref, atol=atol, rtol=rtol, equal_nan=True):
        err = (got - ref).abs().max().item() if expected.is_floating_point() else "n/a"
        return f"{where}: wrong values (max abs error {err}, atol {atol}, rtol {rtol}){_band_hint(got, ref, out.dtype)}"
    return None


def _band_hint(got: Any, ref: Any, dtype: Any) -> str:
    """Where ``got`` holds values of the dtype's largest magnitude (or inf) that the finite ``ref`` lacks: the second
    poison, which the inputs' guard bands hold in the first run (sandbox.py), so a load past an input's end."""
    import torch

    if not dtype.is_floating_point:
        return ""
    huge = torch.finfo(dtype).max / 2
    if bool((got.abs() >= huge).any()) and not bool((ref.abs() >= huge).any()):
        return ("; values near the dtype's maximum, the poison of the inputs' guard bands: computed from a load "
                "outside an input?")
    return ""


def verify(candidate: Path, reference: str, config: VerifyConfig | None = None) -> VerifyReport:
    """All stages on one candidate file."""
    import torch

    config = config or VerifyConfig()
    if len(config.seeds) < 1:
        raise ValueError("verify: at least one seed is needed (--seeds >= 1)")
    report = VerifyReport(candidate=str(candidate), seeds=tuple(config.seeds))
    module, func = load_reference(reference)
    ref_digest = _digest(module)
    module_name, _, func_name = reference.partition(":")
    source = _read_source(candidate)
    problems = static_check(source, module_name, func_name)
    report.warnings = [f"static: {w}" for w in precision_warnings(source) + interpreter_warnings(source)]
    report.stages["static"] = "fail" if problems else "pass"
    report.failures += [f"static: {p}" for p in problems]
    if problems:
        return report
    cases = make_cases(module, config.seeds)
    top = module_name.split(".")[0]
    blocked = ",".join({module_name} | ({top} if top != "polyrec" else set()))
    with tempfile.TemporaryDirectory(prefix="polyrec-verify-") as tmp:
        cases_file, out_file = Path(tmp) / "cases.pt", Path(tmp) / "out.pt"
        torch.save([case.inputs for case in cases], cases_file)
        error = run_sandboxed("run", candidate, cases_file, out_file, blocked, config, interpret=True)
        if not error and not out_file.is_file():
            error = "run: the sandbox exited without results (exit() / SystemExit in the candidate?)"
        result = None if error else torch.load(out_file, weights_only=True)
        report.failures += ([f"numerics: {error}"] if error
                            else _check_outputs(result, cases, func))
        if _digest(module) != ref_digest:
            report.failures.append(f"numerics: the reference file {module.__file__} changed during verification")
        report.stages["numerics"] = "fail" if report.failures else "pass"
        if not config.compile:
            report.stages["compile"] = "skipped: disabled"
        elif result is None:
            report.stages["compile"] = "skipped: no launches recorded (numerics failed)"
        else:
            _compile_stage(report, candidate, result["launches"], Path(tmp), blocked, config)
    report.accepted = not report.failures and all(v in ("pass", "skipped: disabled") for v in report.stages.values())
    return report


def _read_source(candidate: Path) -> str:
    """The candidate's text as Python reads it (UTF-8, or the encoding a coding cookie names); ValueError naming the
    file when it is not a ``.py`` file or not Python text (latin-1 without a cookie, UTF-16...)."""
    _require_python_file(candidate)
    try:
        return importlib.util.decode_source(candidate.read_bytes())
    except (SyntaxError, UnicodeDecodeError, LookupError) as exc:
        raise ValueError(f"verify: {candidate} is not Python source text ({exc}); save it as UTF-8") from exc


def _require_python_file(candidate: Path) -> None:
    """ValueError unless ``candidate`` ends in ``.py``: the sandbox imports it as a module (importlib's file loader
    takes no other suffix), and a ``.cu`` read as Python failed with a "syntax error" at some line."""
    if candidate.suffix != ".py":
        suffix = f"suffix {candidate.suffix!r}" if candidate.suffix else "no suffix"
        raise ValueError(f"verify: {candidate} is not a Python file ({suffix}, expected '.py'): verify checks a "
                         "Triton port written in Python; port CUDA/C++ source with `polyrec migrate port` or "
                         "translate it with `polyrec migrate hipify`")


def _digest(module: Any) -> str | None:
    """sha256 of the reference module's file (None when it has none)."""
    path = getattr(module, "__file__", None)
    return hashlib.sha256(Path(path).read_bytes()).hexdigest() if path and Path(path).is_file() else None


def _check_outputs(result: dict[str, Any], cases: list[Case], func: Any) -> list[str]:
    failures = []
    for i, (case, out, aliased, unwritten, clobbered, second_poison) in enumerate(zip(
            cases, result["outputs"], result["aliased"], result["unwritten"], result["clobbered"],
            result["second_poison"], strict=True)):
        where = case.label(i)
        if aliased:
            failures.append(f"numerics: {where}: output shares memory with an input")
            continue
        if unwritten:
            failures.append(f"numerics: {where}: {unwritten}")
            continue
        if clobbered:
            failures.append(f"numerics: {where}: run() wrote to its input(s) {clobbered} (outputs only)")
            continue
        problem = compare(out, case.inputs, func, where)
        if problem:
            failures.append(f"numerics: {problem}")
        elif second_poison:
            failures.append(f"numerics: {where}: elements of the output were left unwritten ({second_poison}); "
                            "the first poison (NaN, True or the integer maximum) matched the reference there")
    return failures


def _compile_stage(report: VerifyReport, candidate: Path, launches: list[dict[str, Any]], tmp: Path, blocked: str,
                   config: VerifyConfig) -> None:
    """Compile exactly the launches the numerics run recorded."""
    launches_file, out_file = tmp / "launches.json", tmp / "compile.json"
    launches_file.write_text(json.dumps(launches))
    error = run_sandboxed("compile", candidate, launches_file, out_file, blocked, config, interpret=False)
    if not error and not out_file.is_file():
        error = "compile: the sandbox exited without results (exit() / SystemExit in the candidate?)"
    if error:
        report.failures.append(f"compile: {error}")
        report.stages["compile"] = "fail"
        return
    report.compile_reports = json.loads(out_file.read_text())
    bad = [f"compile: {r['device']} {r.get('label', '')}: {r.get('error') or '; '.join(r['problems'])}"
           for r in report.compile_reports if r.get("error") or r.get("problems")]
    if not launches:
        bad.append("compile: run() launched no Triton kernel")
    report.failures += bad
    report.stages["compile"] = "fail" if bad else "pass"
