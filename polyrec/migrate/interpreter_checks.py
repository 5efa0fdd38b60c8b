"""What the CPU interpreter of ``polyrec migrate verify``'s numerics stage and a GPU compile treat differently,
found in a candidate's source before it runs: a ``triton.language`` builtin called through a name bound at import
(refused: the interpreter cannot run it), a kernel's variable holding a function or a builtin passed to a jitted
function (refused: a GPU cannot compile them), a ``triton.language.extra`` call (warned of: the interpreter cannot
run it). Each form is run under TRITON_INTERPRET=1 and compiled by tests/test_migrate_verify_interp.py."""

from __future__ import annotations

import ast
import functools
from collections import Counter
from collections.abc import Callable
from typing import Any

from polyrec.migrate.kernel_ast import (dotted_path, is_jit, local_names, module_aliases, name_bindings, resolved,
                                        scope_nodes)

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
#: Why a builtin passed to a jitted function is refused. Triton 3.6's code generator passes a jitted function
#: (tl.sum, the candidate's helper) to another as a constant, but a builtin (tl.dot, tl.maximum), even to a
#: ``tl.constexpr`` parameter, raises "'function' object has no attribute 'type'" at the call for sm_90, gfx942 and
#: gfx950; the interpreter runs it (tests/test_migrate_verify_interp.py runs and compiles each form).
KERNEL_BUILTIN_ARGUMENT = (
    "{value} passed to {callee} in kernel {kernel} is a triton.language builtin given to a jitted function, which "
    "the GPU compile refuses (\"'function' object has no attribute 'type'\", though the CPU interpreter of the "
    "numerics stage runs it); call {call} inside {callee} (a jitted function such as tl.sum may be passed)")
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


def interpreter_problems(tree: ast.Module, aliases: dict[str, str]) -> list[str]:
    """Each call in a jitted function of a builtin the CPU interpreter replaces, through a name bound to it at import
    (``INTERPRETER_UNPATCHED``): ``from triton.language import dot``, ``mm = tl.dot``, ``mm2 = mm``, or a kernel's own
    name bound to one of those. A name also bound to anything else (a def, a loop variable, ``global``) is left
    alone: what it holds is known only when it runs."""
    declared_global = {name for node in ast.walk(tree) if isinstance(node, ast.Global) for name in node.names}
    module_names = _import_bound(tree, {}, declared_global, aliases)
    problems = []
    for kernel in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and is_jit(n)):
        params = {a.arg for a in ast.walk(kernel.args) if isinstance(a, ast.arg)}
        names = _import_bound(kernel, module_names, params, None)
        for call in (n for n in scope_nodes(kernel) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)):
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
    stores = _binding_counts(scope, rebound)
    bindings: list[tuple[str, ast.expr | str]] = [pair for node in scope_nodes(scope) for pair in name_bindings(node)]
    bindings += [(a.asname or a.name, f"{node.module}.{a.name}") for node in scope_nodes(scope)
                 if isinstance(node, ast.ImportFrom) and node.module for a in node.names]
    names = {name: held for name, held in inherited.items() if name not in stores}
    return _every_binding_resolved(bindings, stores, names, lambda value, known: _bound_builtin(value, known, aliases))


def _binding_counts(scope: ast.AST, rebound: set[str]) -> Counter:
    """How many times ``scope`` binds each name: stores, defs (async too), classes and imports, and once each name in
    ``rebound`` (a parameter, a name declared ``global`` elsewhere). A name is taken as holding what its bindings
    resolve to only where all of them do, so every binder must be counted here."""
    stores = Counter(n.id for n in scope_nodes(scope) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
    stores.update(rebound)
    for node in scope_nodes(scope):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stores[node.name] += 1
        elif isinstance(node, ast.Import):
            stores.update(a.asname or a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            stores.update(a.asname or a.name for a in node.names)
    return stores


def _every_binding_resolved(bindings: list[tuple[str, Any]], stores: Counter, known: dict[str, str],
                            resolve: Callable[[Any, dict[str, str]], str | None]) -> dict[str, str]:
    """``known`` and, to a fixed point, each name all ``stores[name]`` of whose ``bindings`` ``resolve`` (given the
    names known so far: ``t = s`` after ``s = tl.sum``) answers, with its first answer."""
    while True:
        found: dict[str, list[str]] = {}
        for name, value in bindings:
            if name not in known and (answer := resolve(value, known)):
                found.setdefault(name, []).append(answer)
        new = {name: answers[0] for name, answers in found.items() if len(answers) == stores[name]}
        if not new:
            return known
        known = known | new


def _bound_builtin(value: ast.expr | str, names: dict[str, str], aliases: dict[str, str] | None) -> str | None:
    """The triton.language name of the replaced builtin that ``value`` (an expression, or the dotted path of a
    ``from`` import) holds: one of ``names``, or, where ``aliases`` is given, what it reaches; None when none."""
    if isinstance(value, ast.Name):
        return names.get(value.id)
    if aliases is None:
        return None
    if isinstance(value, ast.Attribute):
        value = dotted_path(value, aliases) or ""
    return _interpreted_name(value) if isinstance(value, str) and value.startswith("triton.") else None


@functools.cache
def _interpreted_name(dotted: str) -> str | None:
    """NAME when ``dotted`` (triton.language.dot, triton.language.core.maximum) is a function the CPU interpreter
    replaces (a builtin, range, static_range) and ``tl.NAME`` reaches it; else None. A name in
    triton.language.core is looked up in triton.language: once any interpreted launch has called a jitted
    triton.language function, core holds the interpreter's versions (``INTERPRETER_UNPATCHED``), and the answer
    must not depend on what ran before in the process."""
    import triton.language as tl

    core_name = dotted.removeprefix("triton.language.core.")
    if "." not in core_name:
        dotted = f"triton.language.{core_name}"
    obj = resolved(dotted)
    if obj is None or not (tl.core.is_builtin(obj) or obj is tl.range or obj is tl.static_range):
        return None
    return _tl_name(obj, dotted)


def _tl_name(obj: object, dotted: str) -> str | None:
    """NAME where ``tl.NAME`` is ``obj`` (``dotted``'s last part first, then every name of triton.language)."""
    import triton.language as tl

    return next((name for name in (dotted.rsplit(".", 1)[-1], *dir(tl)) if getattr(tl, name, None) is obj), None)


def kernel_variable_problems(tree: ast.Module, aliases: dict[str, str], kernels: set[str]) -> list[str]:
    """Each binding, in a jitted function, of a name to a function (``KERNEL_FUNCTION_VARIABLE``): an attribute
    chain or a from-import reaching one (``tl.dot``, ``tl.sum``, ``libdevice.exp``), a module-level jitted function,
    a module-level name bound to a builtin at import (``mm = tl.dot``) or to another function (``s = tl.sum``,
    ``e = libdevice.exp``, ``c = helper``), or a name the kernel bound to one of those."""
    declared_global = {name for node in ast.walk(tree) if isinstance(node, ast.Global) for name in node.names}
    module_names = {name: f"tl.{held}" for name, held in _import_bound(tree, {}, declared_global, aliases).items()}
    module_names = _module_functions(tree, aliases, module_names | {name: name for name in kernels}, declared_global)
    problems = []
    for kernel in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and is_jit(n)):
        local = local_names(kernel)
        visible = {name: dotted for name, dotted in aliases.items() if name not in local}
        held = {name: call for name, call in module_names.items() if name not in local}
        bindings = [pair for node in scope_nodes(kernel) for pair in name_bindings(node)]
        while new := {name: call for name, value in bindings
                      if name not in held and (call := _held_function(value, visible, held))}:
            held |= new
        for name, value in bindings:
            if call := _held_function(value, visible, held):
                message = KERNEL_FUNCTION_VARIABLE.format(name=name, value=ast.unparse(value), kernel=kernel.name,
                                                          call=call)
                problems.append((value.lineno, f"line {value.lineno}: {message}"))
    return [problem for _, problem in sorted(problems)]


def _module_functions(tree: ast.Module, aliases: dict[str, str], held: dict[str, str],
                      rebound: set[str]) -> dict[str, str]:
    """``held`` and the module-level names every binding of which holds a function (``s = tl.sum``, then ``t = s``),
    each with how to call it; a name also bound otherwise (a def, an import, a loop variable, ``global``) is left
    out."""
    bindings = [pair for node in scope_nodes(tree) for pair in name_bindings(node)]
    return _every_binding_resolved(bindings, _binding_counts(tree, rebound), held,
                                   lambda value, known: _held_function(value, aliases, known))


def _held_function(value: ast.expr, aliases: dict[str, str], held: dict[str, str]) -> str | None:
    """How to call the function ``value`` holds (``tl.dot``), where it is one of the names ``held`` or reaches a
    function through ``aliases``, or is a tuple or list holding one (``(tl.maximum, tl.minimum)``: the compile
    refuses it too); None when it holds none."""
    if isinstance(value, (ast.Tuple, ast.List)):
        return next((call for elt in value.elts if (call := _held_function(elt, aliases, held))), None)
    if isinstance(value, ast.Name) and value.id in held:
        return held[value.id]
    dotted = dotted_path(value, aliases)
    return None if dotted is None else _function_call(dotted)


def builtin_argument_problems(tree: ast.Module, aliases: dict[str, str], kernels: set[str]) -> list[str]:
    """Each argument, in a jitted function's call of one of the candidate's jitted functions, that reaches a function
    that is not jitted (``helper(tl.dot, a, b)``: ``KERNEL_BUILTIN_ARGUMENT``)."""
    from triton.runtime.jit import JITFunction

    problems = []
    for kernel in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and is_jit(n)):
        local = local_names(kernel)
        visible = {name: dotted for name, dotted in aliases.items() if name not in local}
        for call in (n for n in scope_nodes(kernel) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                     and n.func.id in kernels and n.func.id not in local):
            for value in [*call.args, *(k.value for k in call.keywords)]:
                dotted = dotted_path(value, visible)
                how = None if dotted is None else _function_call(dotted)
                if how and not isinstance(resolved(dotted), JITFunction):
                    message = KERNEL_BUILTIN_ARGUMENT.format(value=ast.unparse(value), callee=call.func.id,
                                                             kernel=kernel.name, call=how)
                    problems.append((value.lineno, f"line {value.lineno}: {message}"))
    return [problem for _, problem in sorted(problems)]


@functools.cache
def _function_call(dotted: str) -> str | None:
    """How to call the function at ``dotted``: ``tl.NAME`` where that reaches it (triton.language.core.dot), else
    ``dotted`` (triton.language.extra.libdevice.exp); None when it is no function (a module, a dtype)."""
    obj = resolved(dotted)
    if not callable(obj) or isinstance(obj, type):
        return None
    name = _tl_name(obj, dotted)
    return dotted if name is None else f"tl.{name}"


def interpreter_warnings(source: str) -> list[str]:
    """Each call in a jitted function of a ``triton.language.extra`` function (``EXTRA_UNINTERPRETED``), through an
    attribute chain (``libdevice.exp``, ``tl.extra.libdevice.exp``) or a from-import, with its tl.math equivalent
    where Triton has one."""
    import triton.language as tl

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []  # static_check reports it
    aliases = module_aliases(tree)
    warnings = []
    for kernel in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and is_jit(n)):
        local = local_names(kernel)
        for call in (n for n in scope_nodes(kernel) if isinstance(n, ast.Call)):
            if isinstance(call.func, ast.Name) and call.func.id in local:
                continue
            dotted = dotted_path(call.func, aliases)
            if dotted is None or not _is_extra_function(dotted):
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
    obj = resolved(dotted)
    return (callable(obj) and not isinstance(obj, type)
            and (getattr(obj, "__module__", "") or "").startswith("triton.language.extra."))
