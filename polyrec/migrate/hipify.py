"""``polyrec migrate hipify``: CUDA -> HIP on torch.utils.hipify's own mapping tables, plus fixes.

The mapping comes from ``torch.utils.hipify.cuda_to_hip_mappings`` (imported, never copied). On top of
it this module closes the gaps of torch's hipify that the migration issue lists:

- identifiers are renamed only in code, never in comments or string literals;
- headers are written as hipify-clang writes them (``hipblas.h``, not ``hipblas/hipblas.h``; the
  ``<>``/``""`` style kept; a second include of the same HIP header dropped), per hipify-clang's tests
  (ROCm/HIP tests/hipify-clang/unit_tests/headers/headers_test_*.cu);
- ``#include "hip/hip_runtime.h"`` is added to every .cu/.cuh file and to C++ files with device code
  in code (not in comments), placed before the first ``#include``;
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
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from polyrec.migrate.hipify_launch import to_launch_ggl

#: Names HIP provides under the same signature that torch 2.13's table lacks. Sources: HIP driver API
#: reference (hipDeviceTotalMem, hipCtxPushCurrent/PopCurrent), hipSPARSE generic API
#: (hipsparseCreateConstCsr, hipsparseCreateBlockedEll), hipSOLVER compatibility API (hipsolverStatus_t,
#: HIPSOLVER_STATUS_SUCCESS, hipsolverDnCreateParams).
GAP_MAPPINGS: dict[str, str] = {
    "cuDeviceTotalMem": "hipDeviceTotalMem",
    "cuCtxPushCurrent": "hipCtxPushCurrent",
    "cuCtxPopCurrent": "hipCtxPopCurrent",
    "cusparseCreateConstCsr": "hipsparseCreateConstCsr",
    "cusparseCreateBlockedEll": "hipsparseCreateBlockedEll",
    "cusolverStatus_t": "hipsolverStatus_t",
    "CUSOLVER_STATUS_SUCCESS": "HIPSOLVER_STATUS_SUCCESS",
    "cusolverDnCreateParams": "hipsolverDnCreateParams",
}
#: Headers torch's table lacks or writes differently from hipify-clang.
GAP_HEADERS: dict[str, str] = {
    "cusolverDn.h": "hipsolver.h",
    "cusolver_common.h": "hipsolver.h",
    "cusparse_v2.h": "hipsparse.h",
    "cuda_fp8.h": "hip/hip_fp8.h",
}
RUNTIME_HEADER = "hip/hip_runtime.h"
_CUDA_NAME = re.compile(r"^(cuda[A-Z]\w*|cu[A-Z]\w*|cublas\w*|cusparse\w*|cusolver\w*|curand\w*|cufft\w*|"
                        r"nvrtc\w*|CUDA_\w+|CU_\w+|CUBLAS_\w+|CUSPARSE_\w+|CUSOLVER_\w+)$")
_INCLUDE = re.compile(r'^(\s*#\s*include\s*)([<"])([^>"]+)([>"])', re.MULTILINE)
_DEVICE_CODE = re.compile(r"__global__|__device__|__shared__|<<<|\bthreadIdx\b|\bblockIdx\b|__syncthreads")
_MASK_FIX = re.compile(r"(__(?:shfl|shfl_up|shfl_down|shfl_xor|ballot|any|all|match_any|match_all)_sync\s*\(\s*)"
                       r"(0[xX][fF]{8}[uU]?[lL]{0,2}|~0[uU]?)(\s*,)")
_POPC_BALLOT = re.compile(r"\b__popc(\s*\(\s*__(?:ballot_sync|ballot|activemask)\b)")
_IDENT = re.compile(r"\b[A-Za-z_]\w*\b")
# Comments, raw strings R"d(...)d" (may span lines), strings, char literals, <header> names, and numbers
# (pp-numbers, so that the digit separator of 1'000 is not read as the start of a char literal).
_LEX = re.compile(r'(?P<number>(?<![\w.])\.?\d(?:[eEpP][+-]|\'(?=\w)|[\w.])*)|//[^\n]*|/\*.*?\*/|'
                  r'(?<!\w)(?:u8|[uUL])?R"(?P<delim>[^()\\ \t\n"]{0,16})\(.*?\)(?P=delim)"|'
                  r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|#\s*include\s*<[^>\n]*>',
                  re.DOTALL)
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
            if value is not None and re.fullmatch(r"\w+", key):
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


def _clang_header(header: str) -> str:
    """hipify-clang names library headers without the directory: hipblas/hipblas.h -> hipblas.h."""
    parts = header.split("/")
    return parts[1] if len(parts) == 2 and parts[1] == f"{parts[0]}.h" else header


def mask_comments_and_strings(text: str) -> str:
    """``text`` with comments and string/char literals replaced by spaces (newlines kept)."""
    return _LEX.sub(lambda m: m.group(0) if m.group("number") else re.sub(r"[^\n]", " ", m.group(0)), text)


def _rename(text: str, masked: str, idents: dict[str, str], report: FileReport) -> str:
    out, pos = [], 0
    for m in _IDENT.finditer(masked):
        name = m.group(0)
        new = idents.get(name)
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
    seen: set[str] = set()

    def repl(m: re.Match[str]) -> str:
        name = m.group(3)
        new = headers.get(name, name)
        if new != name:
            report.headers.append(f"{name} -> {new}")
        if new in seen and new != name:
            return ""  # hipify-clang drops a second include of the same HIP header
        seen.add(new)
        return f"{m.group(1)}{m.group(2)}{new}{m.group(4)}"

    return _INCLUDE.sub(repl, text)


def _add_runtime_header(text: str, suffix: str, report: FileReport) -> str:
    if RUNTIME_HEADER in text:
        return text
    if suffix not in (".cu", ".cuh") and not _DEVICE_CODE.search(mask_comments_and_strings(text)):
        return text
    report.runtime_header_added = True
    line = f'#include "{RUNTIME_HEADER}"\n'
    first = _INCLUDE.search(text)
    if first is not None:
        return text[:first.start()] + line + text[first.start():]
    return line + text


def _sub_code(pattern: re.Pattern[str], text: str, repl) -> str:
    """``pattern.sub(repl, text)`` for matches in code only (not in comments or strings)."""
    out, pos = [], 0
    for m in pattern.finditer(mask_comments_and_strings(text)):
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


def hipify_source(text: str, path: str, *, launch_ggl: bool = False,
                  pytorch_extension: bool = False) -> tuple[str, FileReport]:
    """Translate one file's text; return the HIP text and what was done."""
    idents, headers = mappings(pytorch_extension)
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
    lines = []
    for line in difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                     fromfile=f"a/{rel}", tofile=f"b/{rel}"):
        lines.append(line if line.endswith("\n") else f"{line}\n\\ No newline at end of file\n")
    return lines


def _sources(src: Path, skipped: dict[str, str]) -> list[Path]:
    """The regular files to translate under ``src``; a dangling link or other non-file is put in ``skipped``."""
    if src.is_file():
        return [src]
    files = []
    for path in sorted(src.rglob("*")):
        if path.suffix not in HIPIFY_SUFFIXES or path.is_dir():
            continue  # a directory named x.cu is walked into, not translated
        rel = str(path.relative_to(src))
        if path.is_symlink() and not path.exists():
            skipped[rel] = f"dangling symbolic link to {os.readlink(path)}"
        elif not path.is_file():
            skipped[rel] = "not a regular file"
        else:
            files.append(path)
    return files


def hipify_tree(src: Path, out_dir: Path, *, launch_ggl: bool = False, pytorch_extension: bool = False,
                skipped: dict[str, str] | None = None) -> tuple[list[FileReport], str]:
    """Translate a file or a directory into ``out_dir`` (same relative names); return reports and a diff.

    Paths that cannot be translated (dangling links, unreadable files, sockets...) are skipped, not fatal:
    they go into ``skipped`` (relative path -> why) when given, and are warned about otherwise.
    """
    missed: dict[str, str] = {} if skipped is None else skipped
    files = _sources(src, missed)
    if not files and not missed:
        raise FileNotFoundError(f"hipify: no .cu/.cuh/.cpp/.h files under {src}")
    reports, diff = [], []
    for file in files:
        rel = file.name if src.is_file() else str(file.relative_to(src))
        try:
            text = file.read_bytes().decode("utf-8", "surrogateescape")
        except OSError as exc:
            missed[rel] = f"cannot read: {exc.strerror or exc}"
            continue
        new, report = hipify_source(text, rel, launch_ggl=launch_ggl, pytorch_extension=pytorch_extension)
        target = out_dir / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(new.encode("utf-8", "surrogateescape"))
        reports.append(report)
        diff += _unified_diff(text, new, rel)
    if skipped is None:
        for rel, why in missed.items():
            warnings.warn(f"hipify: skipped {rel}: {why}", stacklevel=2)
    return reports, "".join(diff).encode("utf-8", "surrogateescape").decode("utf-8", "replace")
