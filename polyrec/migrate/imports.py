"""num_warps wrappers followed across the Python files of one scan (rule PM110).

A launch wrapper often lives in one module (``ops/launch.py: def run(x, num_warps=4): kernel[grid](x,
num_warps=num_warps)``) and is called from another (``from ops.launch import run; run(x, num_warps=32)``,
``import ops.launch as L; L.run(x, 32)``, ``from . import launch; launch.run(x, 32)``). Each file of the scan is
named as Python imports it, relative to the scan's roots (``ops/launch.py`` -> ``ops.launch``; a package's
``__init__.py`` -> the package; a root inside packages keeps their names: scanning ``polyrec/`` gives
``polyrec.migrate.scan``). The names a file imports from another file of the scan (relative imports resolved against
its package) bring that file's wrappers, and its classes' wrapper methods, into its own table, as if defined there;
its functions that hand a value on to them become wrappers too, and so on across files until nothing new is found.
Not followed: a name the file binds again (assigned, a parameter, a ``def`` or ``class`` of that name, or imported
from two places), a module outside the scan, a module name two files of the scan share (``utils`` under two roots),
and ``from m import *``.

Cheap on a large tree: a file is parsed and scanned once, with its own wrappers, and kept only as a PythonModule
(names, no tree: holding every file's tree until the end made Python's garbage collector crawl); one that turns out to
import a wrapper is parsed again, its wrappers found anew with the imported ones, and scanned again.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from polyrec.migrate.scan_python import ParsedPython, parse_python
from polyrec.migrate.wrappers import Forwarded, NumWarpsWrappers, dotted, num_warps_wrappers

# Fields of a statement (or an except / case clause) that hold statements.
_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")


@dataclass(frozen=True, kw_only=True, slots=True)
class Exports:
    """What other files may import from a module: its module-level wrappers, own or imported, by name."""

    functions: dict[str, list[Forwarded]]  # a function's name -> what it forwards (Forwarded.label set)
    classes: dict[str, dict[str, list[Forwarded]]]  # a class's name -> its wrapper methods' names -> the same


@dataclass(frozen=True, kw_only=True, slots=True)
class PythonModule:
    """One Python file of the scan as the cross-file pass keeps it."""

    path: str  # as the scan shows it
    data: bytes  # to parse it again if it imports a wrapper; b"" where it imports nothing from the scan
    bindings: dict[str, str]  # a name it imports from the scan -> what that is (run -> ops.launch.run)
    exported: tuple[str, ...]  # those of ``bindings`` bound at module level (others may import them from it), sorted
    references: tuple[str, ...]  # the names of ``bindings``, and its calls' names that start with one (``L.run``),
    # sorted: the order wrappers are found in, so the messages, never changes between runs
    own: Exports  # its module-level wrappers, as found with no imports


class ModuleIndex:
    """The Python files of one scan by their dotted module names, as Python imports them, relative to the scan's
    roots: ``ops/launch.py`` -> ``ops.launch``, ``ops/__init__.py`` -> ``ops``, after the packages a root sits in."""

    def __init__(self, roots: Iterable[Path], files: Iterable[tuple[Path, str]]) -> None:
        read = [(root, root.is_dir(), _packages(root if root.is_dir() else root.parent)) for root in roots]
        self.names = {shown: _module_names(file, read) for file, shown in files}  # display path -> its names
        claims: dict[str, list[str]] = {}
        for shown, names in self.names.items():
            for name in names:
                claims.setdefault(name, []).append(shown)
        self.files = {name: shown[0] for name, shown in claims.items() if len(shown) == 1}  # shared names left out
        self.packages = {name.rsplit(".", i)[0] for name in self.files for i in range(name.count(".") + 1)}

    def target(self, path: str) -> tuple[str, str] | None:
        """(the file that defines it, its name there) for a dotted path (``ops.launch.run``); None outside the scan."""
        owner, _, name = path.rpartition(".")
        return (self.files[owner], name) if owner in self.files else None

    def reaches(self, path: str) -> bool:
        """Whether what an import binds to ``path`` may lead into the scan: a module or package of it, or a name in
        one of its modules."""
        return path in self.packages or self.target(path) is not None


def _packages(folder: Path) -> tuple[str, ...]:
    """The packages ``folder`` is (it holds an ``__init__.py``) and sits in, outermost first."""
    found = []
    folder = folder.resolve()
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        found.append(folder.name)
        folder = folder.parent
    return tuple(reversed(found))


def _module_names(file: Path, roots: list[tuple[Path, bool, tuple[str, ...]]]) -> tuple[str, ...]:
    """``file``'s module names, one a root (path, a folder?, its packages) it is under."""
    names = []
    for root, folder, packages in roots:
        if folder and file.is_relative_to(root):
            parts = file.relative_to(root).with_suffix("").parts
        elif file == root:
            parts = (file.stem,)
        else:
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names.append(".".join((*packages, *parts)))
    return tuple(dict.fromkeys(n for n in names if n))


def python_module(parsed: ParsedPython, data: bytes, wrappers: NumWarpsWrappers, index: ModuleIndex) -> PythonModule:
    """A parsed file as the cross-file pass keeps it: what it imports from the scan (names bound again left out),
    the calls that may reach an import, and its own module-level wrappers (``wrappers``: found with no imports)."""
    names = index.names.get(parsed.path, ())
    own, package = names[0] if names else "", Path(parsed.path).name == "__init__.py"
    imported = _imported_names(_statements(parsed.tree, True), own, package)
    bindings = {name: target for name, targets in imported.items() if len(targets) == 1
                for target in targets if index.reaches(target)}
    calls: set[str] = set()
    if bindings:  # the whole tree read only where something may come in from the scan
        nodes = list(ast.walk(parsed.tree))
        rebound = _rebound(nodes)
        bindings = {name: target for name, target in bindings.items() if name not in rebound}
        calls = {dotted(n.func) for n in nodes if isinstance(n, ast.Call)}
    module_level = _imported_names(_statements(parsed.tree, False), own, package)
    return PythonModule(path=parsed.path, data=data if bindings else b"", bindings=bindings,
                        exported=tuple(sorted(module_level.keys() & bindings.keys())),
                        references=tuple(sorted({*bindings, *(c for c in calls if c.partition(".")[0] in bindings)})),
                        own=_own_exports(parsed, wrappers))


def _statements(tree: ast.Module, nested: bool) -> Iterator[ast.AST]:
    """The statements of a module (with its except and case clauses), those in its functions and classes too where
    ``nested``. Expressions are not entered: this costs a fraction of a full walk."""
    stack: list[ast.AST] = tree.body[::-1]
    while stack:  # depth first, in source order
        node = stack.pop()
        yield node
        if nested or not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stack += [child for field in reversed(_BODIES) for child in reversed(getattr(node, field, ()))]


def _imported_names(nodes: Iterable[ast.AST], own: str, package: bool) -> dict[str, set[str]]:
    """Each name the import statements among ``nodes`` bind -> what it is bound to, as absolute dotted paths
    (``import a.b`` binds ``a`` to ``a``, ``import a.b as L`` binds ``L`` to ``a.b``, ``from .b import f`` in module
    ``a.c`` binds ``f`` to ``a.b.f``); ``own``: the importing module's name, ``package``: it is an ``__init__.py``."""
    found: dict[str, set[str]] = {}
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                local = alias.asname or alias.name.partition(".")[0]
                found.setdefault(local, set()).add(alias.name if alias.asname else local)
        elif isinstance(node, ast.ImportFrom) and (base := _absolute(node, own, package)) is not None:
            for alias in (a for a in node.names if a.name != "*"):
                found.setdefault(alias.asname or alias.name, set()).add(f"{base}.{alias.name}")
    return found


def _absolute(node: ast.ImportFrom, own: str, package: bool) -> str | None:
    """The module a ``from ... import`` names, a relative one (``from ..ops import f``) resolved against ``own``'s
    package; None where it climbs above the top package (as Python refuses to)."""
    if node.level == 0:
        return node.module
    parts = own.split(".") if own else []
    parts = parts if package else parts[:-1]
    if node.level > len(parts):
        return None
    return ".".join([*parts[:len(parts) - node.level + 1], *filter(None, [node.module])])


def _rebound(nodes: Iterable[ast.AST]) -> set[str]:
    """The names the file binds other than by import: assigned or deleted, a parameter, a function, a class, an
    exception caught ``as`` it."""
    found = set()
    for node in nodes:
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            found.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, ast.arg):
            found.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            found.add(node.name)
    return found


def _own_exports(parsed: ParsedPython, wrappers: NumWarpsWrappers) -> Exports:
    """A file's module-level wrappers and classes' wrapper methods, labelled for the messages of other files."""
    by_function = wrappers.by_function
    functions: dict[str, list[Forwarded]] = {}
    classes: dict[str, dict[str, list[Forwarded]]] = {}
    for node in _statements(parsed.tree, False):
        if isinstance(node, ast.FunctionDef) and by_function[node]:
            functions.setdefault(node.name, []).extend(_labelled(node, by_function, parsed.path))
        elif isinstance(node, ast.ClassDef) and (methods := {f.name: _labelled(f, by_function, parsed.path)
                                                             for f in node.body
                                                             if isinstance(f, ast.FunctionDef) and by_function[f]}):
            classes[node.name] = methods
    return Exports(functions=functions, classes=classes)


def _labelled(func: ast.FunctionDef, by_function: dict[ast.FunctionDef, dict[str, Forwarded]],
              path: str) -> list[Forwarded]:
    """What ``func`` forwards, labelled for the messages of other files: ``run() (ops/launch.py)``."""
    return [replace(f, label=f"{func.name}() ({path})") for f in by_function[func].values()]


def _target(module: PythonModule, reference: str, index: ModuleIndex) -> tuple[str, str] | None:
    """Where a reference of ``module`` (``L.run``, ``run``) leads: (the file of the scan that defines it, the name
    there); None for a module outside the scan or a deeper attribute (``L.Op.launch``)."""
    head, _, rest = reference.partition(".")
    return index.target(".".join(filter(None, [module.bindings[head], rest])))


def _imported_wrappers(module: PythonModule, index: ModuleIndex, exports: dict[str, Exports]
                       ) -> dict[str, list[Forwarded]]:
    """The wrappers ``module`` imports, as NumWarpsWrappers.by_name holds them: a function under the name its calls
    give (``run``, ``L.run``), an imported class's wrapper methods under their own names (``op.launch``)."""
    table: dict[str, list[Forwarded]] = {}
    classes: dict[tuple[str, str], dict[str, list[Forwarded]]] = {}
    for reference in module.references:
        if (target := _target(module, reference, index)) is None or (found := exports.get(target[0])) is None:
            continue  # outside the scan, or a file of it that could not be read
        if target[1] in found.functions:
            table[reference] = list(found.functions[target[1]])
        if target[1] in found.classes:
            classes[target] = found.classes[target[1]]
    for methods in classes.values():
        for method, forwarded in methods.items():
            table.setdefault(method, []).extend(forwarded)
    return table


def _exports(module: PythonModule, own: Exports, index: ModuleIndex, exports: dict[str, Exports]) -> Exports:
    """``module``'s own wrappers, and those it imports at module level (re-exports: ``from .launch import run`` in a
    package's ``__init__.py``) as far as ``exports`` knows them."""
    functions, classes = dict(own.functions), dict(own.classes)
    for name in module.exported:
        if (target := _target(module, name, index)) is None or (found := exports.get(target[0])) is None:
            continue
        if target[1] in found.functions:
            functions[name] = found.functions[target[1]]
        if target[1] in found.classes:
            classes[name] = found.classes[target[1]]
    return Exports(functions=functions, classes=classes)


def _signature(exports: Exports) -> set[tuple[str, ...]]:
    """What an export table holds, chains left out: it only grows as more wrappers are found."""
    return {(name, f.param) for name, forwarded in exports.functions.items() for f in forwarded} | \
        {(name, method, f.param) for name, methods in exports.classes.items() for method, forwarded in methods.items()
         for f in forwarded}


def _importers(modules: list[PythonModule], index: ModuleIndex) -> dict[str, list[str]]:
    """Each file of the scan -> the files that import something from it."""
    importers: dict[str, list[str]] = {}
    for module in modules:
        for path in sorted({t[0] for r in module.references if (t := _target(module, r, index)) is not None}):
            importers.setdefault(path, []).append(module.path)
    return importers


def follow_imports(modules: list[PythonModule], index: ModuleIndex
                   ) -> dict[str, tuple[ParsedPython, NumWarpsWrappers]]:
    """The files that import wrappers from other files of the scan, to any depth across files, each parsed again
    with its wrappers, imported ones included: a worklist that reads a file again when a module it imports from
    exports something new. What a module exports only grows, so a cycle of imports ends."""
    by_path = {m.path: m for m in modules}
    importers = _importers(modules, index)
    exports: dict[str, Exports] = {}
    for module in modules:  # own wrappers, and re-exports of those already read
        exports[module.path] = _exports(module, module.own, index, exports)
    seen = {path: _signature(found) for path, found in exports.items()}
    pending = dict.fromkeys(i for path, signature in seen.items() if signature for i in importers.get(path, []))
    again: dict[str, tuple[ParsedPython, NumWarpsWrappers]] = {}
    while pending:
        path = next(iter(pending))
        del pending[path]
        module = by_path[path]
        own = module.own
        if imported := _imported_wrappers(module, index, exports):
            parsed = again[path][0] if path in again else parse_python(path, module.data)
            again[path] = (parsed, num_warps_wrappers(parsed.tree, imported))
            own = _own_exports(parsed, again[path][1])
        found = _exports(module, own, index, exports)
        if not (signature := _signature(found)) <= seen[path]:
            seen[path] |= signature
            exports[path] = found
            pending.update(dict.fromkeys(importers.get(path, [])))
    return again
