"""``polyrec migrate hipify``: CUDA -> HIP on torch.utils.hipify's own mapping tables, plus fixes.

The mapping comes from ``torch.utils.hipify.cuda_to_hip_mappings`` (imported, never copied). On top of
it this module closes the gaps of torch's hipify that the migration issue lists:

- identifiers are renamed only in code, never in comments or string literals; a namespace torch's table
  renames as a qualifier (``cub::`` -> ``hipcub::``) is renamed wherever ``::`` follows it (torch's own
  table entries for it are not identifiers, so the header became hipcub's while ``cub::`` stayed);
- headers are written as hipify-clang writes them (``hipblas.h``, not ``hipblas/hipblas.h``; the
  ``<>``/``""`` style kept; a second include of the same HIP header dropped), per hipify-clang's tests
  (ROCm/HIP tests/hipify-clang/unit_tests/headers/headers_test_*.cu);
- ``#include "hip/hip_runtime.h"`` is added to every .cu/.cuh file and to C++ files with device code
  in code (not in comments), at file scope: before the first ``#include`` or line of code, or before the
  outermost ``#if`` block around it (never inside a comment or a conditional block); includes inside
  comments are neither renamed nor counted;
- cuda_fp8.h names are translated where hip/hip_fp8.h has the same thing: storage types, saturation
  modes and conversion functions always, the OCP format types (``__nv_fp8_e4m3``...) only for a target
  whose device code has the OCP formats (gfx950); elsewhere they are left and the scan reports them (PM112);
- launches stay ``<<<>>>`` (valid HIP, hipify-clang's default) or, with ``launch_ggl``, become
  ``hipLaunchKernelGGL`` also inside macros and for templated kernels (hipify_launch.py);
- driver / cuSPARSE / cuSOLVER names missing from torch's table are added (GAP_MAPPINGS, each a HIP
  API of the same signature);
- non-UTF-8 files are translated byte-for-byte (surrogateescape) instead of crashing;
- hazards with a safe rewrite are fixed (32-bit full lane masks -> 64-bit, __popc of a ballot ->
  __popcll); the others are left, and reported by scanning the output.
"""

from __future__ import annotations

import difflib
import functools
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from polyrec.files import atomic_write_bytes, atomic_write_text
from polyrec.migrate.hipify_launch import to_launch_ggl
from polyrec.migrate.walk import not_a_file, tree_files

#: Names HIP provides under the same signature that torch 2.13's table lacks. Sources: HIP driver API
#: reference (hipDeviceTotalMem, hipCtxPushCurrent/PopCurrent), hipSPARSE generic API
#: (hipsparseCreateConstCsr, hipsparseCreateBlockedEll), hipSOLVER compatibility API (hipsolverStatus_t,
#: HIPSOLVER_STATUS_SUCCESS, hipsolverDnCreateParams), hip/hip_fp8.h (the __hip_fp8 storage types,
#: saturation modes and __hip_cvt_* conversions; hipify-clang maps them the same way).
GAP_MAPPINGS: dict[str, str] = {
    "cuDeviceTotalMem": "hipDeviceTotalMem",
    "cuCtxPushCurrent": "hipCtxPushCurrent",
    "cuCtxPopCurrent": "hipCtxPopCurrent",
    "cusparseCreateConstCsr": "hipsparseCreateConstCsr",
    "cusparseCreateBlockedEll": "hipsparseCreateBlockedEll",
    "cusolverStatus_t": "hipsolverStatus_t",
    "CUSOLVER_STATUS_SUCCESS": "HIPSOLVER_STATUS_SUCCESS",
    "cusolverDnCreateParams": "hipsolverDnCreateParams",
} | {  # cuda_fp8.h names whose hip/hip_fp8.h twin does not fix the fp8 format (it is an argument or absent)
    f"__nv_{name}": f"__hip_{name}" for name in (
        "fp8_storage_t", "fp8x2_storage_t", "fp8x4_storage_t", "saturation_t", "fp8_interpretation_t",
        "cvt_double_to_fp8", "cvt_double2_to_fp8x2", "cvt_float_to_fp8", "cvt_float2_to_fp8x2",
        "cvt_halfraw_to_fp8", "cvt_halfraw2_to_fp8x2", "cvt_bfloat16raw_to_fp8", "cvt_bfloat16raw2_to_fp8x2",
        "cvt_fp8_to_halfraw", "cvt_fp8x2_to_halfraw2")
} | {"__NV_NOSAT": "__HIP_NOSAT", "__NV_SATFINITE": "__HIP_SATFINITE"}
#: cuda_fp8.h names of the OCP fp8 formats and their hip/hip_fp8.h twins (same name, same OCP format).
#: Exact only where device code has the OCP types: hip/hip_fp8.h sets HIP_FP8_TYPE_OCP to 0 for gfx942
#: device code (only the FNUZ types ``__hip_fp8_e4m3_fnuz``...: bias one higher, no inf or -0, e4m3 max 240
#: not 448) and to 1 for gfx950. Source: ROCm/clr hipamd/include/hip/amd_detail/amd_hip_fp8.h (commit
#: 23b03d98); ROCm "Data types and precision support" (rocm.docs.amd.com/compatibility/precision-support.html).
#: hipify-clang maps them to the _fnuz types, which changes what the bits mean (its synthetic device test).
FP8_OCP_MAPPINGS: dict[str, str] = {
    f"__nv_{kind}_{fmt}": f"__hip_{kind}_{fmt}" for kind in ("fp8", "fp8x2", "fp8x4") for fmt in ("e4m3", "e5m2")
} | {"__NV_E4M3": "__HIP_E4M3", "__NV_E5M2": "__HIP_E5M2"}
#: The fp8 format of device code per AMD target (same source as FP8_OCP_MAPPINGS).
FP8_FORMAT_BY_TARGET = {"gfx942": "fnuz", "gfx950": "ocp"}
#: Headers torch's table lacks or writes differently from hipify-clang.
GAP_HEADERS: dict[str, str] = {
    "cusolverDn.h": "hipsolver.h",
    "cusolver_common.h": "hipsolver.h",
    "cusparse_v2.h": "hipsparse.h",
    "cuda_fp8.h": "hip/hip_fp8.h",
}
#: torch's table renames these names without a CUDA prefix (library_types.h's libraryPropertyType); a project's
#: own version macros or fields take them too, and HIP has no such names (its enum is HIP_LIBRARY_MAJOR_VERSION
#: ...; hipify-clang marks MAJOR_VERSION -> hipLibraryMajorVersion HIP_UNSUPPORTED): left as written.
UNPREFIXED_NOT_RENAMED = frozenset({"MAJOR_VERSION", "MINOR_VERSION", "PATCH_LEVEL", "libraryPropertyType",
                                    "libraryPropertyType_t"})
RUNTIME_HEADER = "hip/hip_runtime.h"
#: The file in an output folder listing, one per line, the files hipify wrote there (relative to it): a later walk of
#: a tree holding that folder leaves them out, so an earlier run's output is not translated again (the folder's
#: other files are sources like any).
OUTPUT_LIST = ".polyrec-hipify-outputs"
BOM = "\ufeff"  # a UTF-8 byte order mark, as decoded: it must stay the file's first character
_CUDA_NAME = re.compile(r"^(cuda[A-Z]\w*|cu[A-Z]\w*|cublas\w*|cusparse\w*|cusolver\w*|curand\w*|cufft\w*|"
                        r"nvrtc\w*|CUDA_\w+|CU_\w+|CUBLAS_\w+|CUSPARSE_\w+|CUSOLVER_\w+)$")
_INCLUDE = re.compile(r'^([ \t]*#[ \t]*include[ \t]*)([<"])([^>"\n]+)([>"])', re.MULTILINE)
_DEVICE_CODE = re.compile(r"__global__|__device__|__shared__|<<<|\bthreadIdx\b|\bblockIdx\b|__syncthreads")
_MASK_FIX = re.compile(r"(__(?:shfl|shfl_up|shfl_down|shfl_xor|ballot|any|all|match_any|match_all)_sync\s*\(\s*)"
                       r"(0[xX][fF]{8}[uU]?[lL]{0,2}|~0[uU]?)(\s*,)")
_POPC_BALLOT = re.compile(r"\b__popc(\s*\(\s*__(?:ballot_sync|ballot|activemask)\b)")
_IDENT = re.compile(r"\b[A-Za-z_]\w*\b")
_QUALIFIER = re.compile(r"\s*::")
# Comments, raw strings R"d(...)d" (may span lines), strings, char literals, #include lines, and numbers
# (pp-numbers, so that the digit separator of 1'000 is not read as the start of a char literal).
_LEX = re.compile(r'(?P<number>(?<![\w.])\.?\d(?:[eEpP][+-]|\'(?=\w)|[\w.])*)|//[^\n]*|/\*.*?\*/|'
                  r'(?<!\w)(?:u8|[uUL])?R"(?P<delim>[^()\\ \t\n"]{0,16})\(.*?\)(?P=delim)"|'
                  r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|'
                  r'(?P<include>#\s*include\s*(?:<[^>\n]*>|"[^"\n]*"))',
                  re.DOTALL)
# One logical source line: physical lines joined by a trailing backslash (a multi-line #define is one).
_LOGICAL_LINE = re.compile(r"(?:[^\n]*\\\n)*[^\n]*\n?")
_DIRECTIVE = re.compile(r"[ \t]*#[ \t]*(\w*)")
HIPIFY_SUFFIXES = frozenset({".cu", ".cuh", ".cpp", ".cc", ".cxx", ".h", ".hpp"})


@dataclass(kw_only=True, slots=True)
class FileReport:
    """What hipify did to one file and what it left."""

    path: str
    renamed: dict[str, str] = field(default_factory=dict)  # CUDA name -> HIP name (each once)
    headers: list[str] = field(default_factory=list)  # "cuda_runtime.h -> hip/hip_runtime.h"
    launches_rewritten: int = 0
    fixes: list[str] = field(default_factory=list)  # safe hazard rewrites applied, "line N: what"
    unmapped: list[str] = field(default_factory=list)  # CUDA-looking names with no HIP mapping
    runtime_header_added: bool = False
    changed: bool = False


def _value(entry: object) -> str | None:
    """A mapping value: a string in torch >= 2.x tables, a (name, kind, api[, HIP_UNSUPPORTED]) tuple before."""
    if isinstance(entry, str):
        return entry
    if isinstance(entry, tuple) and entry and "HIP_UNSUPPORTED" not in map(str, entry[1:]):
        return str(entry[0])
    return None


@functools.cache
def mappings(pytorch_extension: bool = False) -> tuple[dict[str, str], dict[str, str]]:
    """(identifier map, header map) from torch.utils.hipify plus the gap tables.

    ``pytorch_extension`` adds torch's PyTorch/c10-specific names (for extensions built against ATen).
    """
    from torch.utils.hipify import cuda_to_hip_mappings as m

    skip = {id(m.CAFFE2_PATH_MAPPINGS), id(m.CAFFE2_SPECIFIC_MAPPINGS)}
    if not pytorch_extension:
        skip |= {id(m.PYTORCH_SPECIFIC_MAPPINGS), id(m.C10_MAPPINGS)}
    idents: dict[str, str] = {}
    for table in m.CUDA_TO_HIP_MAPPINGS:
        if id(table) in skip or table is m.CUDA_INCLUDE_MAP:
            continue
        for key, entry in table.items():
            value = _value(entry)
            if value is not None and re.fullmatch(r"\w+", key) and key not in UNPREFIXED_NOT_RENAMED:
                idents.setdefault(key, value)
    headers: dict[str, str] = {}
    for key, entry in m.CUDA_INCLUDE_MAP.items():
        value = _value(entry)
        if value is None:
            continue
        if key.startswith("include "):  # torch's form for cuda.h: 'include <cuda.h' -> 'include <hip/...'
            key, value = key[len("include ") + 1:], value[len("include ") + 1:]
        headers[key] = _clang_header(value)
    return idents | GAP_MAPPINGS, headers | GAP_HEADERS


@functools.cache
def namespace_mappings() -> dict[str, str]:
    """Namespaces torch's table renames as a qualifier (``cub::`` -> ``hipcub::``: the header becomes
    hipcub/hipcub.hpp, which has no ``cub``), renamed where ``::`` follows them in code."""
    from torch.utils.hipify import cuda_to_hip_mappings as m

    spaces: dict[str, str] = {}
    for table in m.CUDA_TO_HIP_MAPPINGS:
        for key, entry in table.items():
            value = _value(entry)
            if value is not None and re.fullmatch(r"\w+::", key) and re.fullmatch(r"\w+::", value):
                spaces.setdefault(key[:-2], value[:-2])
    return spaces


def _clang_header(header: str) -> str:
    """hipify-clang names library headers without the directory: hipblas/hipblas.h -> hipblas.h."""
    parts = header.split("/")
    return parts[1] if len(parts) == 2 and parts[1] == f"{parts[0]}.h" else header


def mask_comments_and_strings(text: str, *, keep_includes: bool = False) -> str:
    """``text`` with comments and string/char literals replaced by spaces (newlines kept).

    ``#include`` lines are masked too, unless ``keep_includes`` (then only real includes are left as text).
    """
    def mask(m: re.Match[str]) -> str:
        keep = m.group("number") or (keep_includes and m.group("include"))
        return m.group(0) if keep else re.sub(r"[^\n]", " ", m.group(0))

    return _LEX.sub(mask, text)


def _rename(text: str, masked: str, idents: dict[str, str], report: FileReport) -> str:
    out, pos = [], 0
    spaces = namespace_mappings()
    for m in _IDENT.finditer(masked):
        name = m.group(0)
        new = idents.get(name)
        if name in spaces and _QUALIFIER.match(masked, m.end()):
            new = spaces[name]
        if new is None:
            if _CUDA_NAME.match(name) and name not in report.unmapped:
                report.unmapped.append(name)
            continue
        out += [text[pos:m.start()], new]
        pos = m.end()
        report.renamed.setdefault(name, new)
    out.append(text[pos:])
    return "".join(out)


def _headers(text: str, headers: dict[str, str], report: FileReport) -> str:
    branches = _branches(mask_comments_and_strings(text, keep_includes=True))
    seen: dict[str, list[tuple]] = {}  # header -> the branches of its includes so far

    def repl(m: re.Match[str], line: int) -> str:
        name = m.group(3)
        new = headers.get(name, name)
        if new != name:
            report.headers.append(f"{name} -> {new}")
        here = branches[line - 1]
        if new != name and any(here[:len(b)] == b for b in seen.get(new, ())):
            return ""  # hipify-clang drops a second include of the same HIP header (one this line sees)
        seen.setdefault(new, []).append(here)
        return f"{m.group(1)}{m.group(2)}{new}{m.group(4)}"

    return _sub_code(_INCLUDE, text, repl, keep_includes=True)


def _preprocessor_lines(code: str):
    """Each logical line of ``code`` (comments and strings masked; backslash continuations joined) as (its
    match, its kind, the preprocessor branches it lies in, outermost first: (the offset of the ``#if``,
    which of its branches)); kind is the directive's name, "code", or "" for a blank line. Then
    (None, "end", the branches still open at the end). An ``#if`` line lies outside its own block, an
    ``#else`` in the branch it opens."""
    open_: list[tuple[int, int]] = []
    for m in _LOGICAL_LINE.finditer(code):
        if not m.group(0):
            break
        directive = _DIRECTIVE.match(m.group(0))
        kind = directive.group(1) if directive else ("code" if m.group(0).strip() else "")
        if kind in ("elif", "else") and open_:
            open_[-1] = (open_[-1][0], open_[-1][1] + 1)
        elif kind == "endif" and open_:
            open_.pop()
        yield m, kind, tuple(open_)
        if kind in ("if", "ifdef", "ifndef"):
            open_.append((m.start(), 0))
    yield None, "end", tuple(open_)


def _branches(code: str) -> list[tuple[tuple[int, int], ...]]:
    """Per physical line of ``code`` (comments and strings masked), the preprocessor branches it lies in
    (``_preprocessor_lines``). An include in another branch (``#else``) of the same ``#if`` is not one this
    line sees."""
    paths: list[tuple[tuple[int, int], ...]] = []
    for m, _, branches in _preprocessor_lines(code):
        if m is None:  # the empty line after a last newline
            paths += [branches] * (code.count("\n") + 1 - len(paths))
        else:
            paths += [branches] * (m.group(0).count("\n") + (not m.group(0).endswith("\n")))
    return paths


def _runtime_header_offset(code: str) -> int:
    """Where the runtime include goes in ``code`` (comments and strings masked, includes kept).

    Before the first ``#include`` or line of code; when that sits in an ``#if``/``#ifdef``/``#ifndef``
    block, before the outermost such block instead, so the include is always at file scope.
    """
    m, _, branches = next(line for line in _preprocessor_lines(code) if line[1] in ("include", "code", "end"))
    return branches[0][0] if branches else (len(code) if m is None else m.start())


def _add_runtime_header(text: str, suffix: str, report: FileReport) -> str:
    code = mask_comments_and_strings(text, keep_includes=True)
    branches = _branches(code)
    if any(m.group(3) == RUNTIME_HEADER and not branches[code.count("\n", 0, m.start())]
           for m in _INCLUDE.finditer(code)):  # at file scope: an #if's branch may not be compiled
        return text
    if suffix not in (".cu", ".cuh") and not _DEVICE_CODE.search(code):
        return text
    report.runtime_header_added = True
    at = _runtime_header_offset(code)
    eol = "\r\n" if text.count("\r\n") * 2 > text.count("\n") else "\n"  # a CR LF file's own line ends
    line = f'#include "{RUNTIME_HEADER}"{eol}'
    if at and text[at - 1] != "\n":  # after a last line without a newline (a comment would swallow it)
        line = eol + line
    return text[:at] + line + text[at:]


def _sub_code(pattern: re.Pattern[str], text: str, repl, *, keep_includes: bool = False) -> str:
    """``pattern.sub(repl, text)`` for matches in code only (not in comments or strings)."""
    out, pos = [], 0
    for m in pattern.finditer(mask_comments_and_strings(text, keep_includes=keep_includes)):
        out += [text[pos:m.start()], repl(m, text.count("\n", 0, m.start()) + 1)]
        pos = m.end()
    out.append(text[pos:])
    return "".join(out)


def _safe_fixes(text: str, report: FileReport) -> str:
    def mask(m: re.Match[str], line: int) -> str:
        report.fixes.append(f"line {line}: 32-bit lane mask {m.group(2)} -> 0xffffffffffffffffull")
        return f"{m.group(1)}0xffffffffffffffffull{m.group(3)}"

    def popc(m: re.Match[str], line: int) -> str:
        report.fixes.append(f"line {line}: __popc of a ballot -> __popcll")
        return f"__popcll{m.group(1)}"

    return _sub_code(_POPC_BALLOT, _sub_code(_MASK_FIX, text, mask), popc)


def _fp8_mappings(target: str | None) -> dict[str, str]:
    """The OCP fp8 names to translate for ``target`` (an AMD gfx name; None: any target, so none)."""
    if target is not None and target not in FP8_FORMAT_BY_TARGET:
        raise ValueError(f"hipify: unknown target {target!r}; known: {', '.join(FP8_FORMAT_BY_TARGET)}")
    return FP8_OCP_MAPPINGS if target is not None and FP8_FORMAT_BY_TARGET[target] == "ocp" else {}


def _cr_only(text: str) -> bool:
    """Whether ``text``'s lines end in a lone CR (classic Mac OS files): a // comment would run to its end."""
    return "\r" in text and "\n" not in text


def hipify_source(text: str, path: str, *, launch_ggl: bool = False, pytorch_extension: bool = False,
                  target: str | None = None) -> tuple[str, FileReport]:
    """Translate one file's text; return the HIP text and what was done.

    ``target`` (``"gfx942"``, ``"gfx950"`` or None for code that must run on both) decides the
    translations that are exact on some targets only: the OCP fp8 types.
    """
    if _cr_only(text):  # lines read as LF lines (the patterns end lines there), written back with CR
        out, report = hipify_source(text.replace("\r", "\n"), path, launch_ggl=launch_ggl,
                                    pytorch_extension=pytorch_extension, target=target)
        return out.replace("\n", "\r"), report
    if text.startswith(BOM):  # translated without it (a directive after it is one), kept first
        out, report = hipify_source(text[len(BOM):], path, launch_ggl=launch_ggl,
                                    pytorch_extension=pytorch_extension, target=target)
        return BOM + out, report
    idents, headers = mappings(pytorch_extension)
    idents = idents | _fp8_mappings(target)
    report = FileReport(path=path)
    out = _safe_fixes(text, report)
    out = _rename(out, mask_comments_and_strings(out), idents, report)
    out = _headers(out, headers, report)
    out = _add_runtime_header(out, Path(path).suffix, report)
    if launch_ggl:
        out, report.launches_rewritten = to_launch_ggl(out, mask_comments_and_strings(out))
    report.changed = out != text
    return out, report


def _unified_diff(old: str, new: str, rel: str) -> list[str]:
    """``diff -u`` of one file, with ``\\ No newline at end of file`` where a side lacks the final newline
    (difflib leaves such a line unterminated, which glues it to the next one and breaks patch/git apply)."""
    if _cr_only(old) and _cr_only(new):  # shown as lines; patch tools see one line in such a file
        old, new = old.replace("\r", "\n"), new.replace("\r", "\n")
    lines = []
    for line in difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                     fromfile=f"a/{rel}", tofile=f"b/{rel}"):
        lines.append(line if line.endswith("\n") else f"{line}\n\\ No newline at end of file\n")
    return lines


def _sources(src: Path, skipped: dict[str, str], out_dir: Path) -> list[Path]:
    """The regular files to translate under ``src``, but for those under ``out_dir`` (an earlier run's output
    inside the tree); a dangling link or other non-file, a folder that cannot be listed and a link to a folder
    outside ``src`` (not followed) is put in ``skipped``."""
    if not src.exists():
        raise FileNotFoundError(f"hipify: {src} does not exist")
    if src.is_file():
        if src.suffix not in HIPIFY_SUFFIXES:
            raise ValueError(f"hipify: {src}: unsupported file type {src.suffix!r} "
                             f"(expected {', '.join(sorted(HIPIFY_SUFFIXES))})")
        return [src]
    files, out = [], out_dir.resolve()
    out_inside = out != src.resolve() and out.is_relative_to(src.resolve())
    unlisted: dict[str, str] = {}  # folders the walk misses (SKIP_DIRS are left out, as by the scan)
    found = tree_files(src, unlisted)
    written = _earlier_outputs(found)
    for path in found:
        if path.suffix not in HIPIFY_SUFFIXES or (out_inside and path.parent.resolve().is_relative_to(out)) \
                or path.resolve() in written:
            continue
        if (why := not_a_file(path)) is None:
            files.append(path)
        else:
            skipped[str(path.relative_to(src))] = why
    skipped.update({str(Path(folder).relative_to(src)): why for folder, why in unlisted.items()})
    return files


def _earlier_outputs(files: list[Path]) -> set[Path]:
    """The files earlier runs wrote (resolved), from the OUTPUT_LIST of each output folder among ``files``."""
    written: set[Path] = set()
    for listing in (f for f in files if f.name == OUTPUT_LIST):
        try:
            lines = listing.read_text().splitlines()
        except (OSError, UnicodeDecodeError):  # not ours to read: its folder's files are walked as sources
            continue
        written |= {(listing.parent / line).resolve() for line in lines if line}
    return written


def _record_outputs(out_dir: Path, written: list[str]) -> None:
    """Add ``written`` (paths relative to ``out_dir``) to its OUTPUT_LIST."""
    listing = out_dir / OUTPUT_LIST
    earlier = listing.read_text().splitlines() if listing.is_file() else []
    atomic_write_text(listing, "".join(f"{rel}\n" for rel in dict.fromkeys(earlier + written)))


def hipify_tree(src: Path, out_dir: Path, *, launch_ggl: bool = False, pytorch_extension: bool = False,
                target: str | None = None, skipped: dict[str, str] | None = None) -> tuple[list[FileReport], str]:
    """Translate a file or a directory into ``out_dir`` (same relative names); return reports and a diff.

    ``target`` is hipify_source's (the AMD target the output is for; None: every target). Paths that cannot
    be translated (dangling links, unreadable files, sockets...) are skipped, not fatal: they go into
    ``skipped`` (relative path -> why) when given, and are warned about otherwise.
    """
    missed: dict[str, str] = {} if skipped is None else skipped
    files = _sources(src, missed, out_dir)
    if not files and not missed:
        raise FileNotFoundError(f"hipify: no .cu/.cuh/.cpp/.h files under {src}")
    reports, diff = [], []
    for file in files:
        rel = file.name if src.is_file() else str(file.relative_to(src))
        try:
            data = file.read_bytes()
        except OSError as exc:
            missed[rel] = f"cannot read: {exc.strerror or exc}"
            continue
        if b"\0" in data:  # no C++ source holds a NUL byte: an object file or archive named like one
            missed[rel] = "a binary file (NUL bytes), not a source"
            continue
        text = data.decode("utf-8", "surrogateescape")
        new, report = hipify_source(text, rel, launch_ggl=launch_ggl, pytorch_extension=pytorch_extension,
                                    target=target)
        dest = out_dir / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(dest, new.encode("utf-8", "surrogateescape"))
        reports.append(report)
        diff += _unified_diff(text, new, rel)
    if reports:
        _record_outputs(out_dir, [report.path for report in reports])
    if skipped is None:
        for rel, why in missed.items():
            warnings.warn(f"hipify: skipped {rel}: {why}", stacklevel=2)
    return reports, "".join(diff).encode("utf-8", "surrogateescape").decode("utf-8", "replace")
