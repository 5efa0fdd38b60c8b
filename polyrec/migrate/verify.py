"""``polyrec migrate verify``: checks a candidate Triton port cannot fool.

A candidate is a Python file defining ``run(*inputs) -> Tensor`` that launches ``@triton.jit`` kernels.
The reference is ``module:function`` in a module that also defines ``SHAPES`` (at least three
distinct shapes) and ``make_inputs(shape, generator) -> tuple``. Stages, all of which must pass:

1. static bans (AST): only torch / triton / math imports; in kernels no torch and no try/except; no
   ``_private`` or ``__dunder__`` attribute or dunder name, no attribute that is (or a chain that reaches)
   a module outside torch / triton / math such as ``torch.sys`` or ``torch.os``, nor a risky torch
   module (hub, serialization, cpp_extension...); a module only as ``module.attr`` (never bound to another
   name, passed, stored or returned, which would hide what is reached through it); no assignment to
   attributes of torch / triton / the kernels; no eval/exec/open/globals/exit; no autotune; nothing
   named after the reference;
2. numerics: every shape x at least one seed, fresh random inputs, outputs poisoned, against the reference in
   float64 (TOLERANCES), in a sandboxed subprocess (CPU seconds, memory and file-size limits, no network, no
   processes, no file writes outside its own folder, a Triton cache of its own in that folder, the reference
   module not importable) through the Triton interpreter on the CPU (GPUs hidden from the child, present or
   not: a GPU run needs Triton to start the C compiler and ldconfig, which the sandbox refuses). Rejected:
   outputs that alias an input, outputs not written by a Triton launch (already holding data when a launch
   first took them, changed between launches or after their last launch), inputs that run() wrote to, a child
   that exits without results, a reference file changed. The shapes are the reference's ``SHAPES`` and, per
   seed, shapes derived from them within the dims it declares (off-by-one tails, size 1, one random size:
   cases.py), so a port right only on the declared sizes fails. Fresh tensors are poisoned (sandbox.py: NaN,
   True, the integer maximum) and a case whose output still holds that value anywhere runs again with a second
   poison (the float maximum, False, the integer minimum): an element holding the first poison, then the
   second, was left unwritten, even where the first poison was the right value (a bool output has only two);
3. compile: exactly the launches recorded during the numerics run are compiled for sm_90, gfx942 and
   gfx950 and must fit (shared memory / LDS, registers, spills, threads per block).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib
import json
import os
import resource
import secrets
import signal
import subprocess
import sys
import tempfile
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from polyrec.migrate.cases import Case, make_cases

ALLOWED_IMPORTS = frozenset({"torch", "triton", "math", "typing", "__future__"})
BANNED_CALLS = frozenset({"eval", "exec", "compile", "open", "globals", "locals", "vars", "__import__",
                          "getattr", "setattr", "delattr", "breakpoint", "input", "exit", "quit", "help"})
#: Attribute names refused on anything: modules a candidate could reach through torch / triton
#: (``torch.sys``, ``torch.os``) and what they lead to.
BANNED_ATTRS = frozenset({"os", "sys", "subprocess", "builtins", "importlib", "ctypes", "shutil", "socket", "pathlib",
                          "io", "inspect", "gc", "pickle", "marshal", "posix", "signal", "threading",
                          "multiprocessing", "runpy", "pty", "tempfile", "glob", "urllib", "http", "resource",
                          "platform", "sysconfig", "site", "codecs", "weakref", "traceback", "linecache", "autotune",
                          "modules", "popen", "system"})
#: Roots of modules a candidate may reach; and torch parts that load code or files, or reach the network.
ALLOWED_MODULE_ROOTS = frozenset({"torch", "triton", "math", "typing"})
RISKY_MODULES = ("torch.hub", "torch.serialization", "torch.utils.cpp_extension", "torch.package", "torch.jit",
                 "torch.multiprocessing", "torch.distributed", "torch.ops", "torch.classes", "torch.library",
                 "torch.compiler", "torch.utils.data", "torch.fx", "torch.export", "torch.onnx", "torch.backends",
                 "triton.runtime", "triton.compiler", "triton.backends", "triton.knobs", "triton.tools")
RISKY_OBJECTS = frozenset({"torch.load", "torch.save", "torch.compile", "torch.from_file"})
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
    """Verdict and the reasons; ``failures`` is what a person or the LLM gets back."""

    candidate: str
    accepted: bool = False
    failures: list[str] = field(default_factory=list)
    stages: dict[str, str] = field(default_factory=dict)  # stage -> "pass" | "fail" | "skipped: why"
    compile_reports: list[dict[str, Any]] = field(default_factory=list)
    seeds: tuple[int, ...] = ()  # the input seeds it was checked on (``--seed`` repeats them)

    def as_dict(self) -> dict[str, Any]:
        return {"candidate": self.candidate, "accepted": self.accepted, "failures": self.failures,
                "stages": self.stages, "compile_reports": self.compile_reports, "seeds": list(self.seeds)}


def _is_jit(node: ast.FunctionDef) -> bool:
    return any("jit" in ast.unparse(d) for d in node.decorator_list)


def _module_aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> dotted path of what it was imported as (``tl`` -> ``triton.language``)."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module != "__future__":
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    return aliases


def _chain(node: ast.Attribute) -> list[str] | None:
    """``torch.nn.functional.relu`` -> ["torch", "nn", "functional", "relu"]; None when not rooted at a name."""
    parts = [node.attr]
    while isinstance(node.value, ast.Attribute):
        node = node.value
        parts.append(node.attr)
    if not isinstance(node.value, ast.Name):
        return None
    return [node.value.id, *reversed(parts)]


def _resolve(parts: list[str]) -> Iterator[Any]:
    """The object at each prefix of ``parts`` (torch, torch.nn, torch.nn.functional...), up to one that is missing."""
    try:
        obj = importlib.import_module(parts[0])
    except ImportError:
        return
    yield obj
    for i, part in enumerate(parts[1:], start=2):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                return  # does not exist: fails when run, no reach
        yield obj


def _reach_problem(dotted: str) -> str | None:
    """Why the object at ``dotted`` (e.g. ``torch.sys.modules``) may not be used; None when it may."""
    parts = dotted.split(".")
    if parts[0] not in ALLOWED_MODULE_ROOTS:
        return None  # not an import: the import check speaks for it
    private = next((i for i, part in enumerate(parts) if part.startswith("_")), None)
    if private is not None:
        return f"{'.'.join(parts[:private + 1])} is private"
    for i, obj in enumerate(_resolve(parts), start=1):
        name = (getattr(obj, "__name__", "") if isinstance(obj, types.ModuleType)
                else f"{getattr(obj, '__module__', '') or ''}.{getattr(obj, '__qualname__', '')}")
        if isinstance(obj, types.ModuleType) and name.split(".")[0] not in ALLOWED_MODULE_ROOTS:
            return f"{'.'.join(parts[:i])} is the module {name!r}"
        risky_module = isinstance(obj, types.ModuleType) and name.startswith(RISKY_MODULES)
        if risky_module or ".".join(parts[:i]) in RISKY_OBJECTS or name in RISKY_OBJECTS:
            return f"{'.'.join(parts[:i])} ({name}) loads code or files or reaches the network"
    return None


@functools.cache
def _is_module(dotted: str) -> bool:
    """``dotted`` (torch, torch.utils, triton.language) names a module."""
    parts = dotted.split(".")
    if parts[0] not in ALLOWED_MODULE_ROOTS:
        return False
    found = list(_resolve(parts))
    return len(found) == len(parts) and isinstance(found[-1], types.ModuleType)


def _module_value_problem(node: ast.Name | ast.Attribute, aliases: dict[str, str]) -> str | None:
    """Why ``node``, used as a value (not as ``node.attr``), may not be: it is a module.

    A module bound to another name, passed, stored or returned would hide from the chain check what is
    reached through it (``t = torch; t.load``), so modules may only be used as ``module.attr``.
    """
    chain = [node.id] if isinstance(node, ast.Name) else _chain(node)
    if not chain or chain[0] not in aliases or not isinstance(node.ctx, ast.Load):
        return None
    dotted = ".".join([aliases[chain[0]], *chain[1:]])
    if not _is_module(dotted):
        return None
    return (f"line {node.lineno}: the module {dotted} is used as a value; use it only as {'.'.join(chain)}.name "
            "(an alias would hide what is reached through it)")


def _attribute_problems(node: ast.Attribute, aliases: dict[str, str], kernels: set[str]) -> list[str]:
    line = node.lineno
    if node.attr.startswith("_"):
        return [f"line {line}: attribute {node.attr!r} is not allowed (private or dunder)"]
    if node.attr in BANNED_ATTRS:
        return [f"line {line}: attribute {node.attr!r} is not allowed"]
    chain = _chain(node)
    if chain is None:
        return []
    if not isinstance(node.ctx, ast.Load) and (chain[0] in aliases or chain[0] in kernels):
        return [f"line {line}: assigning to {'.'.join(chain)} is not allowed"]
    if chain[0] not in aliases:
        return []
    problem = _reach_problem(".".join([aliases[chain[0]], *chain[1:]]))
    return [f"line {line}: {problem}"] if problem else []


def static_check(source: str, reference_module: str, reference_func: str) -> list[str]:
    """Why the candidate's source is not acceptable; empty when it is."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return [f"syntax error line {exc.lineno}: {exc.msg}"]
    problems: list[str] = []
    ref_names = {reference_module.split(".")[0], reference_module.split(".")[-1], reference_func}
    aliases = _module_aliases(tree)
    kernels = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and _is_jit(n)}
    attribute_roots = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}  # x of x.attr
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, (ast.Name, ast.Attribute)) and id(node) not in attribute_roots and \
                (problem := _module_value_problem(node, aliases)):
            problems.append(problem)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for mod in mods:
                if mod.split(".")[0] not in ALLOWED_IMPORTS:
                    problems.append(f"line {line}: import of {mod!r} (allowed: {', '.join(sorted(ALLOWED_IMPORTS))})")
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ALLOWED_IMPORTS:
                for a in node.names:
                    bad = f"{a.name} is private" if a.name.startswith("_") else (
                        None if node.module == "__future__" else _reach_problem(f"{node.module}.{a.name}"))
                    if bad or a.name in BANNED_ATTRS:
                        problems.append(f"line {line}: from {node.module} import {a.name}: {bad or 'not allowed'}")
            elif isinstance(node, ast.Import):
                problems += [f"line {line}: import {a.name}: {bad}" for a in node.names
                             if (bad := _reach_problem(a.name))]
        elif isinstance(node, ast.Name) and (node.id in BANNED_CALLS or node.id in ref_names):
            problems.append(f"line {line}: use of {node.id!r} is not allowed")
        elif isinstance(node, ast.Name) and node.id.startswith("__") and node.id != "__name__":
            problems.append(f"line {line}: use of {node.id!r} is not allowed")
        elif isinstance(node, ast.Attribute):
            problems += _attribute_problems(node, aliases, kernels)
        elif isinstance(node, ast.FunctionDef) and _is_jit(node):
            problems += _kernel_problems(node)
    if not any(isinstance(n, ast.FunctionDef) and n.name == "run" for n in tree.body):
        problems.append("no top-level run(*inputs) function")
    if not kernels:
        problems.append("no @triton.jit kernel: the port must be a Triton kernel")
    return list(dict.fromkeys(problems))


def _kernel_problems(kernel: ast.FunctionDef) -> list[str]:
    problems = []
    for node in ast.walk(kernel):
        if isinstance(node, ast.Name) and node.id == "torch":
            problems.append(f"line {node.lineno}: torch used inside kernel {kernel.name}")
        elif isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            problems.append(f"line {node.lineno}: try/except inside kernel {kernel.name}")
    return problems


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
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        raise
    except Exception as exc:  # a reference that fails to import (SyntaxError, its own raise) is bad input
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
        return f"{where}: NaN in output (poisoned output not fully written)"
    atol, rtol = TOLERANCES.get(str(expected.dtype), (0.0, 0.0))
    if not torch.allclose(got, ref, atol=atol, rtol=rtol, equal_nan=True):
        err = (got - ref).abs().max().item() if expected.is_floating_point() else "n/a"
        return f"{where}: wrong values (max abs error {err}, atol {atol}, rtol {rtol})"
    return None


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
    problems = static_check(candidate.read_text(), module_name, func_name)
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
