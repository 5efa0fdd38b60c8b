"""The static stage of ``polyrec migrate verify``: what a candidate port's source may not contain (its AST), and
the advice given without failing it.

Refused: imports other than torch / triton / math; in kernels torch and try/except; ``_private`` or
``__dunder__`` attributes and dunder names; an attribute that is (or a chain that reaches) a module outside
torch / triton / math such as ``torch.sys`` or ``torch.os``, or a risky torch module (hub, serialization,
cpp_extension...); a module other than as ``module.attr`` (bound to another name, passed, stored or returned,
it would hide what is reached through it); assignment to attributes of torch / triton / the kernels;
eval/exec/open/globals/exit; autotune; anything named after the reference; a kernel's call that the CPU
interpreter of the numerics stage cannot run although a GPU compiles it: a ``triton.language`` builtin called
through a name bound at import (``from triton.language import dot``, a module-level ``mm = tl.dot``:
``INTERPRETER_UNPATCHED``); a kernel's variable bound to a function (``d = tl.dot`` in a kernel), which the
interpreter runs but a GPU does not compile (``KERNEL_FUNCTION_VARIABLE``). Warned of: a ``tl.dot`` left at
Triton's per-target default precision (``DOT_DEFAULT_PRECISION``), which the CPU interpreter does not model,
however it is named (``lang.dot``, ``from triton.language import dot``, ``mm = tl.dot``); a kernel's call of a
``triton.language.extra`` function such as ``libdevice.exp``, which the interpreter cannot run
(``EXTRA_UNINTERPRETED``).
"""

from __future__ import annotations

import ast
import functools
import importlib
import types
from collections import Counter
from collections.abc import Iterator
from typing import Any

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
#: Why a kernel's call of a triton.language builtin through a name bound at import is refused. For the length of a
#: launch, Triton 3.6's interpreter (triton/runtime/interpreter.py ``_patch_lang``) replaces the builtins (and
#: ``range``, ``static_range``) among the attributes of triton.language and triton.language.math with versions that
#: compute on numpy. A name bound to one when the candidate is imported, before any launch (``from triton.language
#: import dot``, a module-level ``mm = tl.dot``), keeps the original, which raises "Did you forget to add
#: @triton.jit ?" when called (range and static_range fail otherwise); the GPU compiler resolves such names and
#: compiles them. Not refused: ``tl.core.maximum`` called in a kernel, which fails alone but runs once any launch has
#: called a jitted triton.language function such as ``tl.sum`` (its ``_patch_lang`` patches triton.language.core and
#: never restores it). Each form is run under TRITON_INTERPRET=1, and compiled, by tests/test_migrate_verify_interp.py.
INTERPRETER_UNPATCHED = (
    "{expr} in kernel {kernel} is triton.language.{name} as bound at import (a from-import or a module-level "
    "alias): call triton.language builtins as tl.{name} (the CPU interpreter of the numerics stage patches only "
    "the attributes of triton.language, so {expr} keeps the unpatched builtin and the run fails, for a builtin "
    "with \"Did you forget to add @triton.jit ?\"; a GPU compiles such a call through a module-level name)")
#: Why a kernel's name bound to a function is refused. A kernel's variable holds tensors and constants: Triton 3.6's
#: code generator (triton/compiler/code_generator.py) turns the value of each assignment into a tensor, and a
#: function (a builtin, a jitted function such as tl.sum or the candidate's own helper) raises "cannot convert
#: <function dot> to tensor" at the assignment, called or not, for sm_90, gfx942 and gfx950 alike. The interpreter
#: runs the kernel as Python, so only the compile stage would fail the port, with that message and no line.
#: tests/test_migrate_verify_interp.py runs each form under TRITON_INTERPRET=1 and compiles it.
KERNEL_FUNCTION_VARIABLE = (
    "{name} = {value} in kernel {kernel} holds a function in a variable, which a kernel cannot: the GPU compile "
    "refuses the assignment (\"cannot convert <function ...> to tensor\", though the CPU interpreter of the "
    "numerics stage runs it); call {call} directly (call triton.language builtins as tl.NAME inside kernels)")
#: Why a kernel's call of a triton.language.extra function is warned of, not refused. Triton 3.6's
#: triton/language/extra/libdevice.py holds stubs (``def exp(arg0): ...``) that the GPU compiler replaces with the
#: target's libdevice (extra/cuda, extra/hip), which compile for sm_90, gfx942 and gfx950; the interpreter has no
#: version of them: ``libdevice.exp(x)`` returns None there and the run fails with "cannot convert None of type
#: <class 'NoneType'> to tensor" when stored, "'NoneType' object has no attribute 'type'" when computed with
#: (extra.cuda.libdevice: "Did you forget to add @triton.jit ?"). A call whose value is never used runs, so it is not
#: refused; a port that uses one cannot pass the numerics stage.
EXTRA_UNINTERPRETED = (
    "{expr} in kernel {kernel} is {dotted}, which the CPU interpreter of the numerics stage cannot run (Triton 3.6 "
    "has no interpreter version of triton.language.extra: the call returns None and the run fails, with \"cannot "
    "convert None ... to tensor\" or \"'NoneType' object has no attribute\"), so the port cannot pass verify; {fix}")


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
    problems += interpreter_problems(tree, aliases)
    problems += kernel_variable_problems(tree, aliases, kernels)
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
    aliases = _module_aliases(tree)
    module_dots = _dot_names(tree, aliases, {name for name, dotted in aliases.items() if _names_dot(dotted)})
    calls = set()
    for kernel in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and _is_jit(n)):
        dots = _dot_names(kernel, aliases, module_dots - _local_names(kernel))
        calls |= {node.lineno for node in ast.walk(kernel) if isinstance(node, ast.Call)
                  and _is_dot(node.func, aliases, dots) and _default_precision(node)}
    return [f"line {line}: {DOT_DEFAULT_PRECISION}" for line in sorted(calls)]


def _is_dot(expr: ast.expr, aliases: dict[str, str], dots: set[str]) -> bool:
    """``expr`` is ``triton.language.dot``: one of the names ``dots`` or an attribute chain from an import
    (``tl.dot``, ``lang.dot``, ``triton.language.dot``)."""
    if isinstance(expr, ast.Name):
        return expr.id in dots
    chain = _chain(expr) if isinstance(expr, ast.Attribute) else None
    return bool(chain) and chain[0] in aliases and _names_dot(".".join([aliases[chain[0]], *chain[1:]]))


def _dot_names(scope: ast.AST, aliases: dict[str, str], inherited: set[str]) -> set[str]:
    """The names holding ``tl.dot`` in ``scope`` (the module or one function): those ``inherited`` and those it
    binds to one (``mm = tl.dot``, ``mm2 = mm``, in either order). A name bound to ``tl.dot`` anywhere in the
    scope counts, whatever else it is bound to: the warning is advice, a miss costs more than a false alarm."""
    bindings = [pair for node in _scope_nodes(scope) for pair in _bindings(node)]
    names = set(inherited)
    while new := {name for name, value in bindings if name not in names and _is_dot(value, aliases, names)}:
        names |= new
    return names


def _scope_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """The nodes under ``scope`` outside the functions, lambdas and classes defined in it (their own scopes)."""
    for child in ast.iter_child_nodes(scope):
        yield child
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            yield from _scope_nodes(child)


def _bindings(node: ast.AST) -> Iterator[tuple[str, ast.expr]]:
    """(name, value) for each name ``node`` binds to an expression: ``a = b = v``, ``a, b = v, w``, ``a: T = v``,
    ``(a := v)``."""
    if isinstance(node, ast.Assign):
        for target in node.targets:
            yield from _pairs(target, node.value)
    elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
        yield from _pairs(node.target, node.value)


def _pairs(target: ast.expr, value: ast.expr) -> Iterator[tuple[str, ast.expr]]:
    """(name, value) pairs of one assignment target, element by element where a tuple is unpacked from a tuple."""
    if isinstance(target, ast.Name):
        yield target.id, value
    elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)) \
            and len(target.elts) == len(value.elts):
        for t, v in zip(target.elts, value.elts, strict=True):
            yield from _pairs(t, v)


def _local_names(func: ast.FunctionDef) -> set[str]:
    """The names local to ``func``, which hide the module's: its parameters and the names its body stores to."""
    params = {a.arg for a in ast.walk(func.args) if isinstance(a, ast.arg)}
    return params | {n.id for n in _scope_nodes(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


@functools.cache
def _names_dot(dotted: str) -> bool:
    """``dotted`` (triton.language.dot, triton.language.core.dot) is ``tl.dot``."""
    import triton.language as tl

    parts = dotted.split(".")
    found = list(_resolve(parts)) if parts[0] == "triton" else []
    return len(found) == len(parts) and found[-1] is tl.dot


def _default_precision(call: ast.Call) -> bool:
    """``call`` passes neither input_precision nor allow_tf32 (4th and 5th positional), nor ``*args`` or ``**kw``
    that might hold them."""
    if len(call.args) > 3 or any(isinstance(a, ast.Starred) for a in call.args):
        return False
    return not any(k.arg in (None, "input_precision", "allow_tf32")
                   and not (isinstance(k.value, ast.Constant) and k.value.value is None) for k in call.keywords)


def interpreter_problems(tree: ast.Module, aliases: dict[str, str]) -> list[str]:
    """Each call in a jitted function of a builtin the CPU interpreter replaces, through a name bound to it at import
    (``INTERPRETER_UNPATCHED``): ``from triton.language import dot``, ``mm = tl.dot``, ``mm2 = mm``, or a kernel's own
    name bound to one of those. A name also bound to anything else (a def, a loop variable, ``global``) is left
    alone: what it holds is known only when it runs."""
    declared_global = {name for node in ast.walk(tree) if isinstance(node, ast.Global) for name in node.names}
    module_names = _import_bound(tree, {}, declared_global, aliases)
    problems = []
    for kernel in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and _is_jit(n)):
        params = {a.arg for a in ast.walk(kernel.args) if isinstance(a, ast.arg)}
        names = _import_bound(kernel, module_names, params, None)
        for call in (n for n in _scope_nodes(kernel) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)):
            if name := names.get(call.func.id):
                message = INTERPRETER_UNPATCHED.format(expr=call.func.id, kernel=kernel.name, name=name)
                problems.append((call.lineno, f"line {call.lineno}: {message}"))
    return [problem for _, problem in sorted(problems)]


def _import_bound(scope: ast.AST, inherited: dict[str, str], rebound: set[str],
                  aliases: dict[str, str] | None) -> dict[str, str]:
    """The names of ``scope`` that hold a builtin the interpreter replaces, as bound at import, each with its name
    in triton.language: those ``inherited`` that ``scope`` does not bind, and those every binding of which in
    ``scope`` is one of these names or, where ``aliases`` is given (the module, run at import), a ``from`` import of
    or an attribute chain to such a builtin (in a kernel it runs patched). A name also bound otherwise (a def, an
    import of a module, a loop variable, a value unpacked from a call) or named in ``rebound`` is left out."""
    stores = Counter(n.id for n in _scope_nodes(scope) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
    stores.update(rebound)
    bindings: list[tuple[str, ast.expr | str]] = [pair for node in _scope_nodes(scope) for pair in _bindings(node)]
    for node in _scope_nodes(scope):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stores[node.name] += 1
        elif isinstance(node, ast.Import):
            stores.update(a.asname or a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            stores.update(a.asname or a.name for a in node.names)
            bindings += [(a.asname or a.name, f"{node.module}.{a.name}") for a in node.names if node.module]
    names = {name: held for name, held in inherited.items() if name not in stores}
    while True:
        held: dict[str, list[str]] = {}
        for name, value in bindings:
            if name not in names and (builtin := _bound_builtin(value, names, aliases)):
                held.setdefault(name, []).append(builtin)
        new = {name: found[0] for name, found in held.items() if len(found) == stores[name]}
        if not new:
            return names
        names |= new


def _bound_builtin(value: ast.expr | str, names: dict[str, str], aliases: dict[str, str] | None) -> str | None:
    """The triton.language name of the replaced builtin that ``value`` (an expression, or the dotted path of a
    ``from`` import) holds: one of ``names``, or, where ``aliases`` is given, what it reaches; None when none."""
    if isinstance(value, ast.Name):
        return names.get(value.id)
    if aliases is None:
        return None
    if isinstance(value, ast.Attribute):
        chain = _chain(value)
        value = ".".join([aliases[chain[0]], *chain[1:]]) if chain and chain[0] in aliases else ""
    return _interpreted_name(value) if isinstance(value, str) and value.startswith("triton.") else None


@functools.cache
def _interpreted_name(dotted: str) -> str | None:
    """NAME when ``dotted`` (triton.language.dot, triton.language.core.maximum) is a function the CPU interpreter
    replaces (a builtin, range, static_range) and ``tl.NAME`` reaches it; else None. A name in
    triton.language.core is looked up in triton.language: once any interpreted launch has called a jitted
    triton.language function, core holds the interpreter's versions (``INTERPRETER_UNPATCHED``), and the answer
    must not depend on what ran before in the process."""
    import triton.language as tl

    parts = dotted.removeprefix("triton.language.core.").split(".")
    if len(parts) == 1:
        parts = ["triton", "language", parts[0]]
    found = list(_resolve(parts))
    obj = found[-1] if len(found) == len(parts) else None
    if obj is None or not (tl.core.is_builtin(obj) or obj is tl.range or obj is tl.static_range):
        return None
    return next((name for name in (parts[-1], *dir(tl)) if getattr(tl, name, None) is obj), None)


def kernel_variable_problems(tree: ast.Module, aliases: dict[str, str], kernels: set[str]) -> list[str]:
    """Each binding, in a jitted function, of a name to a function (``KERNEL_FUNCTION_VARIABLE``): an attribute
    chain or a from-import reaching one (``tl.dot``, ``tl.sum``, ``libdevice.exp``), a module-level jitted function,
    a module-level name bound to a builtin at import (``mm = tl.dot``), or a name the kernel bound to one of those."""
    declared_global = {name for node in ast.walk(tree) if isinstance(node, ast.Global) for name in node.names}
    module_names = {name: f"tl.{held}" for name, held in _import_bound(tree, {}, declared_global, aliases).items()}
    module_names |= {name: name for name in kernels}
    problems = []
    for kernel in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and _is_jit(n)):
        local = _local_names(kernel)
        visible = {name: dotted for name, dotted in aliases.items() if name not in local}
        held = {name: call for name, call in module_names.items() if name not in local}
        bindings = [pair for node in _scope_nodes(kernel) for pair in _bindings(node)]
        while new := {name: call for name, value in bindings
                      if name not in held and (call := _held_function(value, visible, held))}:
            held |= new
        for name, value in bindings:
            if call := _held_function(value, visible, held):
                message = KERNEL_FUNCTION_VARIABLE.format(name=name, value=ast.unparse(value), kernel=kernel.name,
                                                          call=call)
                problems.append((value.lineno, f"line {value.lineno}: {message}"))
    return [problem for _, problem in sorted(problems)]


def _held_function(value: ast.expr, aliases: dict[str, str], held: dict[str, str]) -> str | None:
    """How to call the function ``value`` holds (``tl.dot``), where it is one of the names ``held`` or reaches a
    function through ``aliases``; None when it holds none."""
    if isinstance(value, ast.Name) and value.id in held:
        return held[value.id]
    chain = [value.id] if isinstance(value, ast.Name) else _chain(value) if isinstance(value, ast.Attribute) else None
    if not chain or chain[0] not in aliases:
        return None
    return _function_call(".".join([aliases[chain[0]], *chain[1:]]))


@functools.cache
def _function_call(dotted: str) -> str | None:
    """How to call the function at ``dotted``: ``tl.NAME`` where that reaches it (triton.language.core.dot), else
    ``dotted`` (triton.language.extra.libdevice.exp); None when it is no function (a module, a dtype)."""
    import triton.language as tl

    parts = dotted.split(".")
    found = list(_resolve(parts)) if parts[0] in ALLOWED_MODULE_ROOTS else []
    obj = found[-1] if len(found) == len(parts) else None
    if not callable(obj) or isinstance(obj, type):
        return None
    return next((f"tl.{name}" for name in (parts[-1], *dir(tl)) if getattr(tl, name, None) is obj), dotted)


def interpreter_warnings(source: str) -> list[str]:
    """Each call in a jitted function of a ``triton.language.extra`` function (``EXTRA_UNINTERPRETED``), through an
    attribute chain (``libdevice.exp``, ``tl.extra.libdevice.exp``) or a from-import, with its tl.math equivalent
    where Triton has one."""
    import triton.language as tl

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []  # static_check reports it
    aliases = _module_aliases(tree)
    warnings = []
    for kernel in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and _is_jit(n)):
        local = _local_names(kernel)
        for call in (n for n in _scope_nodes(kernel) if isinstance(n, ast.Call)):
            chain = ([call.func.id] if isinstance(call.func, ast.Name) and call.func.id not in local
                     else _chain(call.func) if isinstance(call.func, ast.Attribute) else None)
            if not chain or chain[0] not in aliases:
                continue
            dotted = ".".join([aliases[chain[0]], *chain[1:]])
            if not _is_extra_function(dotted):
                continue
            name = dotted.rsplit(".", 1)[-1]
            fix = (f"use tl.{name} (tl.math.{name})" if callable(getattr(tl.math, name, None))
                   else f"Triton 3.6 has no tl.math.{name}: compute it from tl functions (tl.exp, tl.log, tl.where...)")
            message = EXTRA_UNINTERPRETED.format(expr=ast.unparse(call.func), kernel=kernel.name, dotted=dotted,
                                                 fix=fix)
            warnings.append((call.lineno, f"line {call.lineno}: {message}"))
    return [warning for _, warning in sorted(warnings)]


@functools.cache
def _is_extra_function(dotted: str) -> bool:
    """``dotted`` (triton.language.extra.libdevice.exp) is a function of a triton.language.extra module."""
    parts = dotted.split(".")
    found = list(_resolve(parts)) if parts[0] == "triton" else []
    return (len(found) == len(parts) and callable(found[-1]) and not isinstance(found[-1], type)
            and (getattr(found[-1], "__module__", "") or "").startswith("triton.language.extra."))


def _kernel_problems(kernel: ast.FunctionDef) -> list[str]:
    problems = []
    for node in ast.walk(kernel):
        if isinstance(node, ast.Name) and node.id == "torch":
            problems.append(f"line {node.lineno}: torch used inside kernel {kernel.name}")
        elif isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            problems.append(f"line {node.lineno}: try/except inside kernel {kernel.name}")
    return problems
