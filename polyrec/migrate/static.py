"""The static stage of ``polyrec migrate verify``: what a candidate port's source may not contain (its AST), and the
advice given without failing it.

Refused: imports other than torch / triton / math; in kernels torch and try/except; ``_private`` or ``__dunder__``
attributes and dunder names; an attribute that is (or a chain that reaches) a module outside torch / triton / math
such as ``torch.sys`` or ``torch.os``, or a risky torch module (hub, serialization, cpp_extension...); a module
other than as ``module.attr`` (bound to another name, passed, stored or returned, it would hide what is reached
through it); assignment to attributes of torch / triton / the kernels; eval/exec/open/globals/exit; autotune;
anything named after the reference; a kernel's call that the CPU interpreter of the numerics stage cannot run
although a GPU compiles it: a ``triton.language`` builtin called through a name bound at import (``from
triton.language import dot``, a module-level ``mm = tl.dot``: ``interpreter_checks.INTERPRETER_UNPATCHED``); a
kernel's variable bound to a function (``d = tl.dot`` in a kernel), which the interpreter runs but a GPU does not
compile (``interpreter_checks.KERNEL_FUNCTION_VARIABLE``), or passed to a jitted function
(``interpreter_checks.KERNEL_BUILTIN_ARGUMENT``). Warned of: a ``tl.dot`` left at Triton's per-target
default precision (``DOT_DEFAULT_PRECISION``), which the CPU interpreter does not model, however it is named
(``lang.dot``, ``from triton.language import dot``, ``mm = tl.dot``); a kernel's call of a ``triton.language.extra``
function such as ``libdevice.exp``, which the interpreter cannot run (``interpreter_checks.EXTRA_UNINTERPRETED``).
"""

from __future__ import annotations

import ast
import functools
import types

from polyrec.migrate.interpreter_checks import (builtin_argument_problems, interpreter_problems,
                                                kernel_variable_problems)
from polyrec.migrate.kernel_ast import (ALLOWED_MODULE_ROOTS, attribute_chain, dotted_path, is_jit, local_names,
                                        module_aliases, name_bindings, resolve_prefixes, resolved, scope_nodes)

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
#: Torch parts that load code or files, or reach the network.
RISKY_MODULES = ("torch.hub", "torch.serialization", "torch.utils.cpp_extension", "torch.package", "torch.jit",
                 "torch.multiprocessing", "torch.distributed", "torch.ops", "torch.classes", "torch.library",
                 "torch.compiler", "torch.utils.data", "torch.fx", "torch.export", "torch.onnx", "torch.backends",
                 "triton.runtime", "triton.compiler", "triton.backends", "triton.knobs", "triton.tools")
RISKY_OBJECTS = frozenset({"torch.load", "torch.save", "torch.compile", "torch.from_file"})
#: Why a ``tl.dot`` that passes neither ``input_precision`` nor ``allow_tf32`` is warned of. Triton 3.6 picks its
#: fp32 precision per target (triton/language/core.py ``dot``: $TRITON_F32_DEFAULT, else "tf32" where the
#: target's ``allowed_dot_input_precisions`` has it, else "ieee"): triton/backends/nvidia/compiler.py allows tf32
#: on every NVIDIA GPU, triton/backends/amd/compiler.py only on gfx942 (CDNA3) and refuses it on gfx950; a compile
#: of a bare dot for the three targets shows tf32 in the TTIR for sm_90 and gfx942, none for gfx950. The
#: interpreter's ``create_dot`` (triton/runtime/interpreter.py) ignores the precision: a plain fp32 matmul.
DOT_DEFAULT_PRECISION = (
    "tl.dot passes neither input_precision nor allow_tf32: fp32 operands then run in TF32 (10-bit mantissa) on "
    "NVIDIA GPUs and gfx942 (MI300X), in IEEE fp32 on gfx950 (MI350X) (Triton 3.6: triton/language/core.py dot, "
    "triton/backends/amd/compiler.py), which the CPU interpreter does not model; pass input_precision=\"ieee\" "
    "for fp32 accuracy, or allow_tf32=True to accept TF32 (input_precision=\"tf32\" does not compile for gfx950)")


def _reach_problem(dotted: str) -> str | None:
    """Why the object at ``dotted`` (e.g. ``torch.sys.modules``) may not be used; None when it may."""
    parts = dotted.split(".")
    if parts[0] not in ALLOWED_MODULE_ROOTS:
        return None  # not an import: the import check speaks for it
    private = next((i for i, part in enumerate(parts) if part.startswith("_")), None)
    if private is not None:
        return f"{'.'.join(parts[:private + 1])} is private"
    for i, obj in enumerate(resolve_prefixes(parts), start=1):
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
    return isinstance(resolved(dotted), types.ModuleType)


def _module_value_problem(node: ast.Name | ast.Attribute, aliases: dict[str, str]) -> str | None:
    """Why ``node``, used as a value (not as ``node.attr``), may not be: it is a module.

    A module bound to another name, passed, stored or returned would hide from the chain check what is
    reached through it (``t = torch; t.load``), so modules may only be used as ``module.attr``.
    """
    dotted = dotted_path(node, aliases) if isinstance(node.ctx, ast.Load) else None
    if dotted is None or not _is_module(dotted):
        return None
    return (f"line {node.lineno}: the module {dotted} is used as a value; use it only as {ast.unparse(node)}.name "
            "(an alias would hide what is reached through it)")


def _attribute_problems(node: ast.Attribute, aliases: dict[str, str], kernels: set[str]) -> list[str]:
    line = node.lineno
    if node.attr.startswith("_"):
        return [f"line {line}: attribute {node.attr!r} is not allowed (private or dunder)"]
    if node.attr in BANNED_ATTRS:
        return [f"line {line}: attribute {node.attr!r} is not allowed"]
    chain = attribute_chain(node)
    if chain is None:
        return []
    if not isinstance(node.ctx, ast.Load) and (chain[0] in aliases or chain[0] in kernels):
        return [f"line {line}: assigning to {'.'.join(chain)} is not allowed"]
    if chain[0] not in aliases:
        return []
    problem = _reach_problem(dotted_path(node, aliases))
    return [f"line {line}: {problem}"] if problem else []


def static_check(source: str, reference_module: str, reference_func: str) -> list[str]:
    """Why the candidate's source is not acceptable; empty when it is."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return [f"syntax error line {exc.lineno}: {exc.msg}" if exc.lineno else f"syntax error: {exc.msg}"]
    problems: list[str] = []
    ref_names = {reference_module.split(".")[0], reference_module.split(".")[-1], reference_func}
    aliases = module_aliases(tree)
    kernels = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and is_jit(n)}
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
        elif isinstance(node, ast.FunctionDef) and is_jit(node):
            problems += _kernel_problems(node)
    problems += interpreter_problems(tree, aliases)
    problems += kernel_variable_problems(tree, aliases, kernels)
    problems += builtin_argument_problems(tree, aliases, kernels)
    if not any(isinstance(n, ast.FunctionDef) and n.name == "run" for n in tree.body):
        problems.append("no top-level run(*inputs) function")
    if not kernels:
        problems.append("no @triton.jit kernel: the port must be a Triton kernel")
    return list(dict.fromkeys(problems))


def precision_warnings(source: str) -> list[str]:
    """Each ``tl.dot`` call in a jitted function that leaves its fp32 precision to Triton's per-target default,
    however the function is reached: ``tl.dot``, ``lang.dot``, ``from triton.language import dot``, or a name
    bound to it (``mm = tl.dot``, then ``mm2 = mm``) in the module or the function."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []  # static_check reports it
    aliases = module_aliases(tree)
    module_dots = _dot_names(tree, aliases, {name for name, dotted in aliases.items() if _names_dot(dotted)})
    calls = set()
    for kernel in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and is_jit(n)):
        dots = _dot_names(kernel, aliases, module_dots - local_names(kernel))
        calls |= {node.lineno for node in ast.walk(kernel) if isinstance(node, ast.Call)
                  and _is_dot(node.func, aliases, dots) and _default_precision(node)}
    return [f"line {line}: {DOT_DEFAULT_PRECISION}" for line in sorted(calls)]


def _is_dot(expr: ast.expr, aliases: dict[str, str], dots: set[str]) -> bool:
    """``expr`` is ``triton.language.dot``: one of the names ``dots`` or an attribute chain from an import
    (``tl.dot``, ``lang.dot``, ``triton.language.dot``)."""
    if isinstance(expr, ast.Name):
        return expr.id in dots
    dotted = dotted_path(expr, aliases) if isinstance(expr, ast.Attribute) else None
    return dotted is not None and _names_dot(dotted)


def _dot_names(scope: ast.AST, aliases: dict[str, str], inherited: set[str]) -> set[str]:
    """The names holding ``tl.dot`` in ``scope`` (the module or one function): those ``inherited`` and those it
    binds to one (``mm = tl.dot``, ``mm2 = mm``, in either order). A name bound to ``tl.dot`` anywhere in the
    scope counts, whatever else it is bound to: the warning is advice, a miss costs more than a false alarm."""
    bindings = [pair for node in scope_nodes(scope) for pair in name_bindings(node)]
    names = set(inherited)
    while new := {name for name, value in bindings if name not in names and _is_dot(value, aliases, names)}:
        names |= new
    return names


@functools.cache
def _names_dot(dotted: str) -> bool:
    """``dotted`` (triton.language.dot, triton.language.core.dot) is ``tl.dot``."""
    import triton.language as tl

    return resolved(dotted) is tl.dot


def _default_precision(call: ast.Call) -> bool:
    """``call`` passes neither input_precision nor allow_tf32 (4th and 5th positional), nor ``*args`` or ``**kw``
    that might hold them."""
    if len(call.args) > 3 or any(isinstance(a, ast.Starred) for a in call.args):
        return False
    return not any(k.arg in (None, "input_precision", "allow_tf32")
                   and not (isinstance(k.value, ast.Constant) and k.value.value is None) for k in call.keywords)


def _kernel_problems(kernel: ast.FunctionDef) -> list[str]:
    problems = []
    for node in ast.walk(kernel):
        if isinstance(node, ast.Name) and node.id == "torch":
            problems.append(f"line {node.lineno}: torch used inside kernel {kernel.name}")
        elif isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            problems.append(f"line {node.lineno}: try/except inside kernel {kernel.name}")
    return problems
