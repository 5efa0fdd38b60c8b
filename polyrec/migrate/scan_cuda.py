"""CUDA / C++ hazards, found on the tree-sitter-cuda syntax tree (rules PM101-PM109, PM112).

tree-sitter and tree-sitter-cuda are optional dependencies: ``ParserMissing`` says how to install them,
and the scanner then reports CUDA files as not scanned instead of scanning them some weaker way.
Code inside a preprocessor conditional that names HIP / ROCm / __CUDA_ARCH__ is treated as already
ported (HIP-Clang does not define __CUDA_ARCH__, so such a branch is not what runs on AMD).
Macro bodies (object-like and function-like) are parsed and scanned as code too, at their place in the file.
"""

from __future__ import annotations

import copy
import functools
import re
from typing import Any

from polyrec.migrate.cexpr import TYPE_BYTES, evaluate, resolve
from polyrec.migrate.hipify import FP8_OCP_MAPPINGS
from polyrec.migrate.rules import AMD_WAVEFRONT, LDS_BYTES_GFX942, LDS_BYTES_GFX950
from polyrec.migrate.scan_python import is_warp_width_name
from polyrec.migrate.types import Finding, text_column

INSTALL_HINT = "pip install tree-sitter==0.26.1 tree-sitter-cuda==0.21.2 (or the cuda-parse extra)"

# Whole identifier parts only (``_`` or a non-alphanumeric on both sides): FLASHCHIP_H is no HIP guard.
_HIP_GUARD = re.compile(r"(?<![A-Za-z0-9])(?:HIP|HIPCC|ROCM|ROCm|AMDGCN|AMDGPU)(?![A-Za-z0-9])")
_GUARD = re.compile(_HIP_GUARD.pattern + r"|(?<![A-Za-z0-9])CUDA_ARCH(?![A-Za-z0-9])")
# __align__(n) is a CUDA macro tree-sitter-cuda does not know (it breaks the declaration); parse it as
# alignas(n), padded to the same length so byte offsets and columns stay those of the file.
_ALIGN_MACRO = re.compile(rb"\b__align__(?=\s*\()")
# A thread's index (lane / warp of a thread) or the block's thread count (warps per block: blockDim.x / 32).
_THREAD_OPERAND = re.compile(r"threadIdx|\btid\b|\blane\w*|\bthread_?id\w*|\bthread_?idx\w*|\bblockDim\b",
                             re.IGNORECASE)
_COMMENT = re.compile(r"//.*|/\*.*?\*/", re.DOTALL)
_LANE_MATH = {"%": 32, "&": 31, "/": 32, ">>": 5}
_SYNC_MASKED = re.compile(r"^__(shfl|shfl_up|shfl_down|shfl_xor|ballot|any|all|uni|match_any|match_all|"
                          r"reduce_\w+)_sync$|^__syncwarp$")
_BALLOT = re.compile(r"^__(ballot_sync|ballot|activemask)$")
# 32-bit integer types; not unsigned long, 64-bit on Linux where ROCm runs (LP64, the x86-64 System V ABI).
_NARROW_TYPES = re.compile(r"^(unsigned|unsigned int|int|uint32_t|int32_t)$")
# A use is a namespace (``cub::``, whole name only: cublasCreate is cuBLAS, not CUB) or a C API prefix, in a call or a
# type (cudnnHandle_t).
_LIBRARIES = (  # (include regex, namespace or C API use regex, rule, library name)
    (re.compile(r"^(cutlass|cute)/"), re.compile(r"^(cutlass|cute)(::|$)"), "PM104", "CUTLASS/CuTe"),
    (re.compile(r"^cub/"), re.compile(r"^cub(::|$)"), "PM105", "CUB"),
    (re.compile(r"^cublasLt\.h$"), re.compile(r"^cublasLt"), "PM106", "cuBLASLt"),
    (re.compile(r"^cudnn(_\w+)?\.h$|^cudnn_frontend"), re.compile(r"^cudnn"), "PM107", "cuDNN"),
)
# Token pasting and stringizing mean nothing outside a macro: a##b is parsed as a__b and #x as x (same length).
_MACRO_OPERATORS = re.compile(rb"##|#")
# A macro body that is not a whole declaration is parsed as the body of this function.
_MACRO_FUNCTION = b"void polyrec_macro_body() { "
# A CR not followed by LF ends a line (old Mac files; GCC reads LF, CR LF and CR as line ends: cpp manual,
# 'Initial processing'; so does Clang's lexer), but tree-sitter ends lines at LF only: a // comment ran to
# the end of such a file.
_LONE_CR = re.compile(rb"\r(?!\n)")
_BOM = b"\xef\xbb\xbf"  # UTF-8's byte order mark
_QUERIES = {
    "define": "(preproc_def name: (identifier) @name value: (preproc_arg) @value) @node",
    "const": "(declaration declarator: (init_declarator declarator: (identifier) @name value: (_) @value)) @node",
    "enum": "(enumerator name: (identifier) @name value: (_) @value) @node",
    "default": "(optional_parameter_declaration declarator: (identifier) @name default_value: (_) @value) @node",
    "field": "(field_declaration declarator: (field_identifier) @name default_value: (_) @value) @node",
    "call": "(call_expression function: (_) @fn arguments: (argument_list) @args) @node",
    "binary": "(binary_expression left: (_) @left right: (number_literal) @right) @node",
    "asm": "(gnu_asm_expression) @node",
    "include": "(preproc_include path: (_) @path) @node",
    "qualified": "(qualified_identifier scope: (namespace_identifier) @ns) @node",
    "type": "(type_identifier) @node",
    "using": "(using_declaration) @node",
    "for": "(for_statement) @node",
    "shared": "(declaration (type_qualifier) @qual) @node",
    "launch": "(call_expression (kernel_call_syntax) @launch) @node",
    "macro": "[(preproc_def name: (identifier) @name value: (preproc_arg) @value) "
             "(preproc_function_def name: (identifier) @name value: (preproc_arg) @value)] @node",
    "fp8": f"([(type_identifier) (identifier)] @name (#match? @name \"^({'|'.join(FP8_OCP_MAPPINGS)})$\"))",
}


class ParserMissing(RuntimeError):
    """tree-sitter or tree-sitter-cuda is not installed."""


@functools.cache
def _language() -> tuple[Any, Any, tuple[str, ...]]:
    """(language, one query holding every pattern of ``_QUERIES``, the key of each of its patterns).

    One query, run once per tree: each run walks the whole tree, and its cost grows with the tree's nodes
    (a 1 MB initializer line: 200k nodes), not with the patterns.
    """
    try:
        import tree_sitter
        import tree_sitter_cuda
    except ImportError as exc:
        raise ParserMissing(f"scanning CUDA/C++ needs tree-sitter-cuda: {INSTALL_HINT} ({exc})") from exc
    lang = tree_sitter.Language(tree_sitter_cuda.language())
    source, starts = "", []  # starts: (byte where a key's patterns start in ``source``, key)
    for key, pattern in _QUERIES.items():
        starts.append((len(source.encode()), key))
        source += pattern + "\n"
    query = tree_sitter.Query(lang, source)
    keys = tuple(next(key for start, key in reversed(starts) if start <= query.start_byte_for_pattern(i))
                 for i in range(query.pattern_count))
    return lang, query, keys


def parser_available() -> bool:
    try:
        _language()
    except ParserMissing:
        return False
    return True


def _text(node: Any) -> str:
    return node.text.decode("utf-8", "replace") if node is not None else ""


def _negated(conditional: Any, cond_text: str) -> bool:
    """``#ifndef X`` / ``#if !defined(X)``: the first branch is the one where X is not defined."""
    first = conditional.children[0].type if conditional.children else ""
    return first in ("#ifndef", "#elifndef") or cond_text.lstrip().startswith("!")


def _guarded(node: Any) -> bool:
    """In a branch of #if/#ifdef that does not run on AMD.

    A condition naming HIP/ROCm guards both branches (each side was written knowing about AMD). One
    naming only __CUDA_ARCH__ guards the branch where it is defined: HIP-Clang does not define it, so
    the other branch (``#else`` of ``#ifdef __CUDA_ARCH__``) is the code that runs on AMD.
    """
    child, parent = node, node.parent
    while parent is not None:
        if parent.type.startswith("preproc_if") or parent.type.startswith("preproc_elif"):
            cond = parent.child_by_field_name("condition") or parent.child_by_field_name("name")
            text = _text(cond)
            if cond is not None and child.id != cond.id and _GUARD.search(text):
                if _HIP_GUARD.search(text):
                    return True
                alternative = parent.child_by_field_name("alternative")
                in_else = alternative is not None and child.id == alternative.id
                if in_else == _negated(parent, text):
                    return True
        child, parent = parent, parent.parent
    return False


class _CudaScan:
    def __init__(self, path: str, data: bytes) -> None:
        lang, self.query, self.pattern_keys = _language()
        import tree_sitter

        self._cursor = tree_sitter.QueryCursor
        self._parser = tree_sitter.Parser(lang)
        self.path = path
        data = _LONE_CR.sub(b"\n", data)  # same length: byte offsets and columns stay those of the file
        data = data.removeprefix(_BOM)  # not text: the first line's columns start after it
        parsed = _ALIGN_MACRO.sub(b"alignas  ", data)
        self.root = self._parser.parse(parsed).root_node
        self.matches: dict[str, list[dict[str, list[Any]]]] | None = None  # of ``root``, by key; filled once
        self.origin = (0, 0)  # (row, column) in the file where the parsed text starts (a macro body: its own)
        # tree-sitter counts rows at "\n" only; str.splitlines() would also split at \f, \v, \x1c...
        self.lines = data.decode("utf-8", "replace").split("\n")
        self.findings: list[Finding] = []
        self.consts = self._constants()

    def captures(self, key: str) -> list[dict[str, list[Any]]]:
        """The matches of ``_QUERIES[key]`` in the tree, in the order the query cursor gives them."""
        if self.matches is None:
            self.matches = {k: [] for k in _QUERIES}
            for pattern, match in self._cursor(self.query).matches(self.root):
                self.matches[self.pattern_keys[pattern]].append(match)
        return self.matches[key]

    def add(self, rule: str, node: Any, message: str) -> None:
        row, col = node.start_point
        row, col = row + self.origin[0], col + (self.origin[1] if row == 0 else 0)
        text = self.lines[row] if row < len(self.lines) else ""
        self.findings.append(Finding(rule=rule, path=self.path, line=row + 1, column=text_column(text, col),
                                     message=message, snippet=text.strip()[:200]))

    def _constants(self) -> dict[str, int]:
        defs = {_text(m["name"][0]): _COMMENT.sub("", _text(m["value"][0])) for m in self.captures("define")}
        for m in self.captures("const") + self.captures("enum"):
            defs.setdefault(_text(m["name"][0]), _text(m["value"][0]))
        return resolve(defs)

    def run(self) -> list[Finding]:
        for check in (self._warp_constants, self._libraries, *self._occurrence_checks()):
            check()
        for m in self.captures("macro"):
            if _text(m["name"][0]) not in self.consts and not _guarded(m["node"][0]):
                for check in self._macro_scan(m["value"][0])._occurrence_checks():
                    check()
        return self.findings

    def _occurrence_checks(self) -> tuple[Any, ...]:
        """The checks that report each occurrence on their own (also run on macro bodies)."""
        return (self._lane_math, self._calls, self._asm, self._reductions, self._static_shared, self._launches,
                self._fp8)

    def _macro_scan(self, value: Any) -> _CudaScan:
        """A scan of one macro body, sharing this file's lines, constants and findings.

        The body is parsed at file scope when it is a whole declaration there, else as a function body.
        """
        body = _MACRO_OPERATORS.sub(lambda m: b"__" if m.group(0) == b"##" else b" ",
                                    value.text.replace(b"\\\n", b" \n"))
        scan, prefix = copy.copy(self), b""
        scan.matches = None
        scan.root = self._parser.parse(body).root_node
        if scan.root.has_error:
            prefix = _MACRO_FUNCTION
            scan.root = self._parser.parse(prefix + body + b"\n;}").root_node
        row, col = value.start_point
        scan.origin = (row, col - len(prefix))
        return scan

    def _warp_constants(self) -> None:
        """Constants named like a warp size that are 32: #defines, constants and enumerators (file-wide
        values), and the defaults of template / function parameters and class members (values at their place)."""
        named = [(m, self.consts.get(_text(m["name"][0]))) for key in ("define", "const", "enum")
                 for m in self.captures(key)]
        named += [(m, evaluate(_text(m["value"][0]), self.consts)) for key in ("default", "field")
                  for m in self.captures(key)]
        for m, value in named:
            name = _text(m["name"][0])
            if is_warp_width_name(name) and value == 32 and not _guarded(m["node"][0]):
                self.add("PM101", m["node"][0], f"{name} = 32 hard-codes the warp size; AMD wavefronts are "
                                                f"{AMD_WAVEFRONT} wide (use warpSize)")

    def _lane_math(self) -> None:
        for m in self.captures("binary"):
            node, left = m["node"][0], m["left"][0]
            op = _text(node.child_by_field_name("operator"))
            value = evaluate(_text(m["right"][0]), {})
            if _LANE_MATH.get(op) == value and _THREAD_OPERAND.search(_text(left)) and not _guarded(node):
                self.add("PM101", node, f"`{_text(node)}` is lane/warp arithmetic for 32-wide warps; use "
                                        "warpSize (64 on AMD)")

    def _reductions(self) -> None:
        for m in self.captures("for"):
            node = m["node"][0]
            init = node.child_by_field_name("initializer")
            body = node.child_by_field_name("body")
            if init is None or body is None or "__shfl" not in _text(body) or _guarded(node):
                continue
            value = init.child_by_field_name("declarator")
            value = value.child_by_field_name("value") if value is not None else None
            if value is not None and evaluate(_text(value), self.consts) == 16:
                self.add("PM101", node, "shuffle reduction starts at offset 16 (32-wide warp); on AMD start at "
                                        "warpSize / 2 = 32")

    def _calls(self) -> None:
        for m in self.captures("call"):
            node, name = m["node"][0], _text(m["fn"][0])
            args = [c for c in m["args"][0].named_children if c.type != "comment"]
            if _SYNC_MASKED.match(name) and args and self._is_mask32(args[0]) and not _guarded(node):
                self.add("PM102", node, f"{name} with 32-bit mask `{_text(args[0])}`; AMD lane masks are 64-bit")
            if _BALLOT.match(name) and not _guarded(node):
                self._narrow_ballot(node, name)
            # the HIP names too: hipify's output is scanned for what it left (its --launch-ggl launches)
            if name in ("cudaFuncSetAttribute", "hipFuncSetAttribute") and len(args) == 3 and \
                    _text(args[1]).endswith("MaxDynamicSharedMemorySize"):
                self._dynamic_smem(node, args[2], f"{name} opts in to")
            if name == "hipLaunchKernelGGL" and len(args) >= 5:  # (kernel, grid, block, shmem, stream, ...)
                self._dynamic_smem(node, args[3], "kernel launch asks for")

    def _is_mask32(self, arg: Any) -> bool:
        text = _text(arg)
        if re.fullmatch(r"~0[uU]?", text.replace(" ", "")):
            return True
        value = evaluate(text, self.consts)
        # the mask parameter is a 32-bit unsigned: -1 (e.g. a signed ~0) converts to 0xffffffff too
        return value is not None and -(1 << 31) <= value < (1 << 32) and value & 0xFFFFFFFF == 0xFFFFFFFF

    def _narrow_ballot(self, node: Any, name: str) -> None:
        parent = node.parent
        outer = parent.parent if parent.type == "argument_list" else None
        if outer is not None and outer.type == "call_expression" and \
                _text(outer.child_by_field_name("function")) == "__popc":
            self.add("PM102", outer, f"__popc of {name}: counts only lanes 0-31; use __popcll")
            return
        stored = _stored_type(node)
        if stored is not None and _NARROW_TYPES.match(stored[0]):
            self.add("PM102", stored[1], f"{name} stored in 32-bit `{stored[0]}`: lanes 32-63 are "
                                         "dropped on AMD (use unsigned long long / uint64_t)")

    def _asm(self) -> None:
        for m in self.captures("asm"):
            node = m["node"][0]
            if not _guarded(node):
                self.add("PM103", node, "inline PTX asm(); HIP-Clang cannot compile PTX")

    def _libraries(self) -> None:
        included: set[str] = set()
        for m in self.captures("include"):
            path = _text(m["path"][0]).strip('<>"')
            for pattern, _, rule, lib in _LIBRARIES:
                if pattern.search(path) and not _guarded(m["node"][0]):
                    self.add(rule, m["node"][0], f"includes {lib} ({path})")
                    included.add(rule)
        uses = [(m["ns"][0], _text(m["ns"][0])) for m in self.captures("qualified")]
        uses += [(m["fn"][0], _text(m["fn"][0])) for m in self.captures("call")]
        uses += [(m["node"][0], _text(m["node"][0])) for m in self.captures("type")]  # cudnnHandle_t h;
        uses += [(m["node"][0], _text(m["node"][0]).split()[-1].rstrip(";")) for m in self.captures("using")]
        uses.sort(key=lambda use: use[0].start_byte)  # the finding is at the library's first use in the file
        for _, use, rule, lib in _LIBRARIES:
            if rule in included:
                continue
            for node, text in uses:
                if use.match(text) and not _guarded(node):
                    self.add(rule, node, f"uses {lib} ({text})")
                    break

    def _fp8(self) -> None:
        for m in self.captures("include"):
            if _text(m["path"][0]).strip('<>"') == "cuda_fp8.h" and not _guarded(m["node"][0]):
                self.add("PM112", m["node"][0], "includes cuda_fp8.h: hip/hip_fp8.h has its OCP fp8 types "
                                                f"(__hip_fp8_e4m3...) in device code on gfx950 only; {_FNUZ_ONLY}")
        for m in self.captures("fp8"):
            node = m["name"][0]
            if not _guarded(node):
                twin = FP8_OCP_MAPPINGS[_text(node)]
                fnuz = twin + ("_FNUZ" if twin.isupper() else "_fnuz")
                self.add("PM112", node, f"{_text(node)} is OCP fp8: its twin {twin} (hip/hip_fp8.h) has that "
                                        f"format in device code on gfx950 only; {_FNUZ_ONLY} ({fnuz})")

    def _static_shared(self) -> None:
        totals: dict[int, int] = {}
        for m in self.captures("shared"):
            node = m["node"][0]
            if _text(m["qual"][0]) != "__shared__" or _guarded(node):
                continue
            size = self._declared_bytes(node)
            if size is None:
                continue
            kernel = node.parent
            while kernel is not None and kernel.type != "function_definition":
                kernel = kernel.parent
            key = kernel.id if kernel is not None else -1
            before = totals.get(key, 0)
            totals[key] = before + size
            if before <= LDS_BYTES_GFX942 < totals[key]:
                self.add("PM108", node, f"static shared memory reaches {totals[key]} B in this kernel: "
                                        f"{_fit_text(totals[key])}")

    def _declared_bytes(self, node: Any) -> int | None:
        type_node = node.child_by_field_name("type")
        elem = TYPE_BYTES.get(" ".join(_text(type_node).split())) if type_node is not None else None
        if elem is None:
            return None
        total = 0
        for decl in node.children_by_field_name("declarator"):
            count = 1
            while decl is not None and decl.type == "array_declarator":
                size = decl.child_by_field_name("size")
                value = evaluate(_text(size), self.consts) if size is not None else None
                if value is None:
                    return None
                count *= value
                decl = decl.child_by_field_name("declarator")
            total += count * elem
        return total

    def _launches(self) -> None:
        for m in self.captures("launch"):
            config = [c for c in m["launch"][0].named_children if c.type != "comment"]
            if len(config) >= 3:
                self._dynamic_smem(m["node"][0], config[2], "kernel launch asks for")

    def _dynamic_smem(self, node: Any, size_node: Any, what: str) -> None:
        size = evaluate(_text(size_node), self.consts)
        if size is not None and size > LDS_BYTES_GFX942 and not _guarded(node):
            self.add("PM109", node, f"{what} {size} B of dynamic shared memory: {_fit_text(size)}")


_FNUZ_ONLY = ("gfx942 (MI300X/MI325X) device code has only the FNUZ formats, other numbers for the same bits "
              "(bias +1, no inf or -0, e4m3 max 240 not 448)")


def _stored_type(value: Any) -> tuple[str, Any] | None:
    """(type, node to report at) of the variable ``value`` is stored in: declared with it as initializer (``unsigned
    m = value``: at the call), or assigned it (``m = value``, ``m |= value``: at the assignment) where ``m`` is a plain
    name whose declaration is found; None otherwise (a member of another object, an array element, a cast)."""
    parent = value.parent
    if parent.type == "init_declarator" and parent.parent.type == "declaration":
        type_node = parent.parent.child_by_field_name("type")
        return (" ".join(_text(type_node).split()), value) if type_node is not None else None
    if parent.type == "assignment_expression" and parent.child_by_field_name("right").id == value.id:
        left = parent.child_by_field_name("left")
        declared = _declared_type(left) if left.type == "identifier" else None
        return (declared, parent) if declared is not None else None
    return None


def _declared_type(use: Any) -> str | None:
    """The type (as written, spaces collapsed) of the declaration of identifier ``use`` in the innermost scope
    around it that declares that name: a block, file or namespace before the use, a ``for`` initializer, a
    function's parameters, a class's members. None where none is found (a macro body's or a global's elsewhere)."""
    name = _text(use)
    scope = use.parent
    while scope is not None:
        for decl in reversed(_declarations(scope, use.start_byte)):
            if name in _declared_names(decl):
                type_node = decl.child_by_field_name("type")
                return " ".join(_text(type_node).split()) if type_node is not None else None
        scope = scope.parent
    return None


def _declarations(scope: Any, before: int) -> list[Any]:
    """The declarations ``scope`` holds for its code: those of a block, file or namespace ending before byte
    ``before``, a ``for``'s initializer, a function's parameters, every member of a class."""
    if scope.type in ("compound_statement", "translation_unit", "declaration_list"):
        return [c for c in scope.named_children if c.type == "declaration" and c.end_byte <= before]
    if scope.type == "field_declaration_list":
        return [c for c in scope.named_children if c.type == "field_declaration"]
    if scope.type == "for_statement":
        init = scope.child_by_field_name("initializer")
        return [init] if init is not None and init.type == "declaration" else []
    if scope.type == "function_definition":
        declarator = scope.child_by_field_name("declarator")
        while declarator is not None and declarator.type != "function_declarator":
            declarator = declarator.child_by_field_name("declarator")
        params = declarator.child_by_field_name("parameters") if declarator is not None else None
        return params.named_children if params is not None else []
    return []


def _declared_names(decl: Any) -> set[str]:
    """The names a declaration declares as plain variables (``unsigned a, m = 0, &r = m``; not pointers or arrays)."""
    names = set()
    for declarator in decl.children_by_field_name("declarator"):
        if declarator.type == "init_declarator":
            declarator = declarator.child_by_field_name("declarator")
        if declarator is not None and declarator.type == "reference_declarator":
            declarator = declarator.named_children[0] if declarator.named_children else None
        if declarator is not None and declarator.type in ("identifier", "field_identifier"):
            names.add(_text(declarator))
    return names


def _fit_text(size: int) -> str:
    where = "fits MI350X (160 KiB)" if size <= LDS_BYTES_GFX950 else "exceeds MI350X too (160 KiB)"
    return f"exceeds MI300X LDS ({LDS_BYTES_GFX942 // 1024} KiB), {where}"


def scan_cuda(path: str, data: bytes) -> list[Finding]:
    """Findings of every CUDA/C++ rule in one file (raises ParserMissing without tree-sitter-cuda)."""
    return _CudaScan(path, data).run()
