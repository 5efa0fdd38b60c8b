"""Wrappers of a launch's num_warps in one file, followed to any depth (for rule PM110).

A wrapper takes a value under a parameter of its own (``def run(x, w=4): kernel[grid](x, num_warps=w)``) or in its
``**kwargs`` (``def run(x, **kw): kernel[grid](x, **kw)``) and hands it on as it is to a launch, a
``triton.Config``, a dict of launch options, or another wrapper (``def outer(x, w=32): run(x, w=w)``). The scan
reads each wrapper's default and what each call in the file gives it. Wrappers that the file imports from other files
of the scan come in as ``imported`` (``imports.py`` finds them); a file read alone knows none.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

_OPTION = "num_warps"  # the launch option followed
# Methods of a dict that drop or replace what a caller put in it: a **kwargs dict so touched no longer passes on the
# caller's num_warps as it is.
_DICT_WRITERS = frozenset({"pop", "popitem", "clear", "update"})


def dotted(node: ast.AST) -> str:
    """'torch.version.cuda' for an Attribute chain; '' for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def takes_launch_options(call: ast.Call) -> bool:
    """A launch (``kernel[grid](...)``), a ``triton.Config(...)`` or a ``dict(...)`` of options to pass on to one."""
    return isinstance(call.func, ast.Subscript) or dotted(call.func).split(".")[-1] == "Config" or \
        dotted(call.func) == "dict"


@dataclass(frozen=True, kw_only=True, slots=True)
class Forwarded:
    """A keyword that a wrapper passes on as a launch's num_warps: one of its parameters, or one it takes in
    ``**kwargs``."""

    param: str  # the keyword, as a call gives it
    position: int | None  # its index among a call's positional arguments (a method's self not counted); None: none
    chain: tuple[str, ...]  # the wrappers it then goes through, as messages name them (outer() -> run(): ("run()",))
    label: str = ""  # how a message names a wrapper another file defines (``run() (ops/launch.py)``); "": by the call


@dataclass(frozen=True, kw_only=True, slots=True)
class Sink:
    """A value handed on as a launch's num_warps: as num_warps itself, or as a wrapper's forwarded keyword."""

    value: ast.expr  # what is given
    keyword: str  # the keyword it is given under
    chain: tuple[str, ...]  # the wrappers it goes through to the launch, in order, as Forwarded.chain; () at a launch
    spread: bool  # given as ``**value``: a dict whose key ``keyword``, if any, is what is handed on


@dataclass(frozen=True, kw_only=True, slots=True)
class NumWarpsWrappers:
    """The file's wrappers: what each function forwards, and what a call that names it (``run``, ``op.launch``)
    may reach, merged over the functions of that name and the wrappers imported under it."""

    by_function: dict[ast.FunctionDef, dict[str, Forwarded]]  # keyed by Forwarded.param
    by_name: dict[str, list[Forwarded]]  # only names with something forwarded; an imported one as called (``L.run``)


@dataclass(frozen=True, kw_only=True, slots=True)
class _Function:
    """A function as the fixed point reads it: what reaches its body as a caller gave it, and where it may hand that
    on."""

    node: ast.FunctionDef
    positional: list[str]  # its positional parameters, a method's self left out
    params: frozenset[str]  # its parameters that it never binds again (no assignment, loop, ``with ... as``, del)
    named: frozenset[str]  # the keywords that bind a parameter, so never reach its **kwargs
    kwargs: str | None  # its **kwargs, where never bound again nor written to; None: none
    nodes: list[ast.Call | ast.Dict]  # where it may hand a value on


def argument(call: ast.Call, forwarded: Forwarded) -> ast.expr | None:
    """What ``call`` of a wrapper gives its keyword ``forwarded``: by keyword, or at its position before any
    ``*args``; None where it gives nothing."""
    value = next((kw.value for kw in call.keywords if kw.arg == forwarded.param), None)
    position = forwarded.position
    if value is None and position is not None and position < len(call.args) and \
            not any(isinstance(a, ast.Starred) for a in call.args[:position + 1]):
        value = call.args[position]
    return value


def sinks(node: ast.AST, by_name: dict[str, list[Forwarded]]) -> list[Sink]:
    """What ``node`` hands on as a launch's num_warps: ``kernel[grid](x, num_warps=w)``, ``triton.Config(m, **kw)``,
    ``dict(num_warps=w)``, ``{"num_warps": w}``, or a call of a wrapper in ``by_name``: under the call's whole name
    (``L.run(x, w)``, an imported module's wrapper) or else its last (``run(x, w)``, ``op.launch(x, w)``)."""
    if isinstance(node, ast.Dict):
        return [Sink(value=v, keyword=_OPTION, chain=(), spread=k is None) for k, v in zip(node.keys, node.values)
                if k is None or (isinstance(k, ast.Constant) and k.value == _OPTION)]
    if not isinstance(node, ast.Call):
        return []
    if takes_launch_options(node):
        return [Sink(value=kw.value, keyword=_OPTION, chain=(), spread=kw.arg is None) for kw in node.keywords
                if kw.arg in (None, _OPTION)]
    called = dotted(node.func)
    name = called.split(".")[-1]
    found = []
    for forwarded in by_name.get(called) or by_name.get(name, []):
        chain = (forwarded.label or f"{name}()", *forwarded.chain)
        if (value := argument(node, forwarded)) is not None:
            found.append(Sink(value=value, keyword=forwarded.param, chain=chain, spread=False))
        found += [Sink(value=kw.value, keyword=forwarded.param, chain=chain, spread=True) for kw in node.keywords
                  if kw.arg is None]
    return found


def _untouched_kwargs(func: ast.FunctionDef, stored: set[str], inside: list[ast.AST]) -> str | None:
    """``func``'s **kwargs, unless it binds that name again, sets or deletes an item of it, or calls a method that
    drops or replaces items (``kw.pop("num_warps")``); ``inside``: its nodes."""
    name = func.args.kwarg.arg if func.args.kwarg else None
    if name is None or name in stored:
        return None
    for node in inside:
        written = isinstance(node, ast.Subscript) and not isinstance(node.ctx, ast.Load)
        if (written or (isinstance(node, ast.Attribute) and node.attr in _DICT_WRITERS)) and dotted(node.value) == name:
            return None
    return name


def _function(func: ast.FunctionDef, method: bool) -> _Function:
    """What a wrapper's parameters are made of, read once for the fixed point."""
    args, inside = func.args, list(ast.walk(func))  # walked once: walks were most of the time spent here
    stored = {n.id for n in inside if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    named = {a.arg for a in (*args.args, *args.kwonlyargs)}
    return _Function(node=func, positional=[a.arg for a in args.posonlyargs + args.args][method:],
                     params=frozenset({a.arg for a in args.posonlyargs} | named) - stored, named=frozenset(named),
                     kwargs=_untouched_kwargs(func, stored, inside),
                     nodes=[n for n in inside if isinstance(n, (ast.Call, ast.Dict))])


def _forwards(func: _Function, by_name: dict[str, list[Forwarded]]) -> list[Forwarded]:
    """What ``func`` passes on, as it is, as a launch's num_warps, given the wrappers found so far: a parameter it
    hands on by name, or the keywords its **kwargs hands on (those no parameter of its own takes)."""
    found = []
    for sink in (s for node in func.nodes for s in sinks(node, by_name) if isinstance(s.value, ast.Name)):
        if not sink.spread and sink.value.id in func.params:
            position = func.positional.index(sink.value.id) if sink.value.id in func.positional else None
            found.append(Forwarded(param=sink.value.id, position=position, chain=sink.chain))
        elif sink.spread and sink.value.id == func.kwargs and sink.keyword not in func.named:
            found.append(Forwarded(param=sink.keyword, position=None, chain=sink.chain))
    return found


def _by_name(functions: list[_Function], found: dict[ast.FunctionDef, dict[str, Forwarded]],
             imported: dict[str, list[Forwarded]]) -> dict[str, list[Forwarded]]:
    merged: dict[str, list[Forwarded]] = {}
    for func in functions:
        if found[func.node]:
            merged.setdefault(func.node.name, []).extend(found[func.node].values())
    for name, forwarded in imported.items():
        merged.setdefault(name, []).extend(forwarded)
    return merged


def num_warps_wrappers(tree: ast.AST, imported: dict[str, list[Forwarded]] | None = None) -> NumWarpsWrappers:
    """The file's wrappers, to any depth: a fixed point over its functions, each round adding what the wrappers
    found so far make forward, starting from those the file imports (``imported``: the name a call gives, as
    NumWarpsWrappers.by_name). A keyword once found keeps its (shortest) chain, so a cycle of wrappers ends."""
    nodes = list(ast.walk(tree))
    methods = {id(f) for c in nodes if isinstance(c, ast.ClassDef) for f in c.body
               if isinstance(f, ast.FunctionDef) and "staticmethod" not in map(dotted, f.decorator_list)}
    functions = [_function(n, id(n) in methods) for n in nodes if isinstance(n, ast.FunctionDef)]
    found: dict[ast.FunctionDef, dict[str, Forwarded]] = {f.node: {} for f in functions}
    while True:
        by_name = _by_name(functions, found, imported or {})
        new = [(f.node, fwd) for f in functions for fwd in _forwards(f, by_name) if fwd.param not in found[f.node]]
        if not new:
            return NumWarpsWrappers(by_function=found, by_name=by_name)
        for node, forwarded in new:
            found[node].setdefault(forwarded.param, forwarded)
