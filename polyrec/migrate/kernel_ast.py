"""Reading a candidate port's AST for the static stage of ``polyrec migrate verify``: which functions are jitted,
what each imported name stands for, the object a dotted path reaches, and the names a scope binds (to what, and
which of them are local)."""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from typing import Any

#: Roots of modules a candidate may reach.
ALLOWED_MODULE_ROOTS = frozenset({"torch", "triton", "math", "typing"})


def is_jit(node: ast.FunctionDef) -> bool:
    return any("jit" in ast.unparse(d) for d in node.decorator_list)


def module_aliases(tree: ast.Module) -> dict[str, str]:
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


def attribute_chain(node: ast.Attribute) -> list[str] | None:
    """``torch.nn.functional.relu`` -> ["torch", "nn", "functional", "relu"]; None when not rooted at a name."""
    parts = [node.attr]
    while isinstance(node.value, ast.Attribute):
        node = node.value
        parts.append(node.attr)
    if not isinstance(node.value, ast.Name):
        return None
    return [node.value.id, *reversed(parts)]


def resolve_prefixes(parts: list[str]) -> Iterator[Any]:
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


def dotted_path(expr: ast.expr, aliases: dict[str, str]) -> str | None:
    """What a name or attribute chain stands for through the imports ``aliases`` (``tl.math.exp`` ->
    ``triton.language.math.exp``); None when it is rooted at no imported name."""
    chain = ([expr.id] if isinstance(expr, ast.Name)
             else attribute_chain(expr) if isinstance(expr, ast.Attribute) else None)
    if not chain or chain[0] not in aliases:
        return None
    return ".".join([aliases[chain[0]], *chain[1:]])


def resolved(dotted: str) -> Any:
    """The object at ``dotted`` (triton.language.dot), found by importing from an allowed root; None when its root
    is not one of ALLOWED_MODULE_ROOTS or a part of it is missing."""
    parts = dotted.split(".")
    if parts[0] not in ALLOWED_MODULE_ROOTS:
        return None
    found = list(resolve_prefixes(parts))
    return found[-1] if len(found) == len(parts) else None


def scope_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """The nodes under ``scope`` outside the functions, lambdas and classes defined in it (their own scopes)."""
    for child in ast.iter_child_nodes(scope):
        yield child
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            yield from scope_nodes(child)


def name_bindings(node: ast.AST) -> Iterator[tuple[str, ast.expr]]:
    """(name, value) for each name ``node`` binds to an expression: ``a = b = v``, ``a, b = v, w``, ``a: T = v``,
    ``(a := v)``."""
    if isinstance(node, ast.Assign):
        for target in node.targets:
            yield from assignment_pairs(target, node.value)
    elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
        yield from assignment_pairs(node.target, node.value)


def assignment_pairs(target: ast.expr, value: ast.expr) -> Iterator[tuple[str, ast.expr]]:
    """(name, value) pairs of one assignment target, element by element where a tuple is unpacked from a tuple."""
    if isinstance(target, ast.Name):
        yield target.id, value
    elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)) \
            and len(target.elts) == len(value.elts):
        for t, v in zip(target.elts, value.elts, strict=True):
            yield from assignment_pairs(t, v)


def local_names(func: ast.FunctionDef) -> set[str]:
    """The names local to ``func``, which hide the module's: its parameters and the names its body stores to."""
    params = {a.arg for a in ast.walk(func.args) if isinstance(a, ast.arg)}
    return params | {n.id for n in scope_nodes(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
