"""Regressions found by porting a small real-looking codebase with ``polyrec migrate`` (scan, hipify, verify)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from polyrec.cli import app
from polyrec.migrate import scan_cuda
from polyrec.migrate.port import port
from polyrec.migrate.providers import RecordedTranscriptProvider
from polyrec.migrate.scan import scan_paths
from polyrec.migrate.static import static_check
from polyrec.migrate.verify import VerifyConfig, verify

CORPUS = Path(__file__).parent / "migrate_corpus" / "verify"
needs_parser = pytest.mark.skipif(not scan_cuda.parser_available(), reason="tree-sitter-cuda not installed")
#: A cuBLAS caller: every name starts with "cub", none is CUB.
CUBLAS = """#include <cublas_v2.h>
void gemm(const float* a, const float* b, float* c, int n) {
  cublasHandle_t h;
  cublasCreate(&h);
  float alpha = 1.f, beta = 0.f;
  cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, n, b, n, &beta, c, n);
  cublasDestroy(h);
}
"""


@needs_parser
def test_cublas_calls_are_not_cub(tmp_path):
    src = tmp_path / "gemm.cu"
    src.write_text(CUBLAS)
    assert scan_paths([src]).findings == []
    src.write_text(CUBLAS + "using namespace cub;\nvoid r() { cub::DeviceReduce::Sum(0, 0, 0, 0, 0); }\n")
    assert [(f.rule, f.line) for f in scan_paths([src]).findings] == [("PM105", 9)]


def test_hipify_replaces_an_output_link_to_the_source_instead_of_writing_through_it(tmp_path):
    """An output folder holding a link to the source (a symlink farm, an earlier ``cp -s``) must not get the
    source overwritten: the output is written to a temporary file renamed over the link."""
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    out.mkdir()
    kernel = src / "k.cu"
    kernel.write_text("__global__ void k(float* x) { x[0] = 1; }\nvoid f(cudaStream_t s) { cudaStreamSynchronize(s); }\n")
    original = kernel.read_bytes()
    (out / "k.cu").symlink_to(kernel)
    result = CliRunner().invoke(app, ["migrate", "hipify", str(src), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert kernel.read_bytes() == original
    assert not (out / "k.cu").is_symlink() and "hipStreamSynchronize" in (out / "k.cu").read_text()
    assert sorted(p.name for p in out.iterdir()) == [".polyrec-hipify-outputs", "hipify-report.json", "hipify.diff",
                                                     "k.cu"]  # no temp file left


def test_verify_names_a_candidate_that_is_not_utf8(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(CORPUS))
    candidate = tmp_path / "cand.py"
    candidate.write_bytes(b"import torch\n# caf\xe9\n")
    with pytest.raises(ValueError, match=r"cand\.py is not Python source text"):
        verify(candidate, "migrate_ref_mm:mm", VerifyConfig(compile=False, seeds=(0,)))
    result = CliRunner().invoke(app, ["migrate", "verify", str(candidate), "--reference", "migrate_ref_mm:mm"])
    assert result.exit_code == 2 and "cand.py" in result.output, result.output


def test_verify_reads_a_candidate_with_a_coding_cookie_as_python_does(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(CORPUS))
    candidate = tmp_path / "cand.py"
    candidate.write_bytes(b"# -*- coding: latin-1 -*-\n# caf\xe9\nimport torch\n")
    report = verify(candidate, "migrate_ref_mm:mm", VerifyConfig(compile=False, seeds=(0,)))
    assert "static: no top-level run(*inputs) function" in report.failures


def test_a_syntax_error_without_a_line_says_no_line_none():
    assert static_check("import torch\n\0\n", "ref", "f") == ["syntax error: source code string cannot contain null bytes"]


def test_verify_refuses_a_candidate_that_is_not_a_python_file(tmp_path, monkeypatch):
    """A .cu given to verify was read as Python and rejected with "syntax error line 1" (exit 1): bad input, exit 2."""
    monkeypatch.syspath_prepend(str(CORPUS))
    candidate = tmp_path / "axpy.cu"
    candidate.write_text("__global__ void axpy(float* x) { x[0] = 1.f; }\n")
    with pytest.raises(ValueError, match=r"axpy\.cu is not a Python file \(suffix '\.cu'"):
        verify(candidate, "migrate_ref_mm:mm", VerifyConfig(compile=False, seeds=(0,)))
    result = CliRunner().invoke(app, ["migrate", "verify", str(candidate), "--reference", "migrate_ref_mm:mm"])
    assert result.exit_code == 2 and "not a Python file" in result.output and "syntax error" not in result.output


def _sarif_scan(tmp_path, monkeypatch, *args):
    monkeypatch.chdir(tmp_path)
    return CliRunner().invoke(app, ["migrate", "scan", *args])


def test_scan_refuses_a_sarif_path_that_is_a_scanned_file(tmp_path, monkeypatch):
    """``--sarif`` named a scanned source (itself, through ``./``, or a link to it in a scanned folder): the source
    was overwritten with SARIF. Refused with exit 2, the source unchanged; another path gets the SARIF."""
    src = tmp_path / "src"
    src.mkdir()
    kernel = src / "reduce.py"
    kernel.write_text("WARP_SIZE = 32\n")
    (src / "alias.py").symlink_to(kernel)
    for args in (["src/reduce.py", "--sarif", "src/reduce.py"], ["src", "--sarif", "./src/../src/reduce.py"],
                 ["src", "--sarif", "src/alias.py"]):
        result = _sarif_scan(tmp_path, monkeypatch, *args)
        assert result.exit_code == 2 and "would overwrite the input" in result.output, (args, result.output)
        assert kernel.read_text() == "WARP_SIZE = 32\n" and (src / "alias.py").is_symlink()
    result = _sarif_scan(tmp_path, monkeypatch, "src", "--sarif", "report.sarif")
    assert result.exit_code == 1 and json.loads((tmp_path / "report.sarif").read_text())["version"] == "2.1.0"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.sarif", "src"]  # no temporary file left


def test_scan_writes_sarif_by_renaming_a_temporary_file(tmp_path, monkeypatch):
    """A SARIF path that is a link to a file outside the scan is replaced, never written through."""
    outside = tmp_path / "keep.txt"
    outside.write_text("keep\n")
    (tmp_path / "out.sarif").symlink_to(outside)
    (tmp_path / "a.py").write_text("x = 1\n")
    result = _sarif_scan(tmp_path, monkeypatch, "a.py", "--sarif", "out.sarif")
    assert result.exit_code == 0, result.output
    assert outside.read_text() == "keep\n" and not (tmp_path / "out.sarif").is_symlink()


@pytest.mark.parametrize("name", ["attempt_1.py", "port_result.py", "port-report.json"])
def test_port_refuses_an_out_dir_where_an_output_would_replace_the_kernel(tmp_path, monkeypatch, name):
    """``port KERNEL -o DIR`` with DIR holding the kernel under one of port's output names overwrote it in round
    1 (or at the end); refused before anything is written, exit 2, the kernel unchanged."""
    monkeypatch.syspath_prepend(str(CORPUS))
    kernel = tmp_path / name
    kernel.write_text("import torch\n")
    result = CliRunner().invoke(app, ["migrate", "port", str(kernel), "--reference", "migrate_ref_ops:axpy",
                                      "-o", str(tmp_path)])
    assert result.exit_code == 2 and "would overwrite the input" in result.output, result.output
    assert kernel.read_text() == "import torch\n" and sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_port_refuses_an_out_dir_holding_the_reference_under_an_output_name(tmp_path, monkeypatch):
    ref = tmp_path / "port_result.py"
    ref.write_text((CORPUS / "migrate_ref_ops.py").read_text())
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match=r"would overwrite the input .*port_result\.py"):
        port(CORPUS.parent / "port" / "axpy.cu", "port_result:axpy", None, work_dir=tmp_path)


def test_port_replaces_an_output_link_instead_of_writing_through_it(tmp_path, monkeypatch):
    """An attempt or the transcript that is a link to a file port does not read is replaced, not written through."""
    monkeypatch.syspath_prepend(str(CORPUS))
    outside = tmp_path / "notes.txt"
    outside.write_text("mine\n")
    out = tmp_path / "out"
    out.mkdir()
    for name in ("attempt_1.py", "transcript.jsonl", "port_result.py"):
        (out / name).symlink_to(outside)
    reply = f"```python\n{(CORPUS / 'good_axpy.py').read_text()}```\n"
    report = port(CORPUS.parent / "port" / "axpy.cu", "migrate_ref_ops:axpy", RecordedTranscriptProvider(
        replies=[reply]), work_dir=out, rounds=1, config=VerifyConfig(compile=False, seeds=(0,)))
    assert report.accepted and outside.read_text() == "mine\n"
    assert not any((out / name).is_symlink() for name in ("attempt_1.py", "transcript.jsonl", "port_result.py"))


@needs_parser
def test_a_ballot_assigned_to_a_32bit_variable_after_its_declaration_is_flagged(tmp_path):
    src = tmp_path / "vote.cu"
    src.write_text("__global__ void k(int x, unsigned q) {\n"
                   "  unsigned m;\n"
                   "  uint64_t w;\n"
                   "  m = __ballot_sync(~0ull, x > 0);\n"  # line 4: flagged
                   "  w = __ballot_sync(~0ull, x > 0);\n"
                   "  q |= __activemask();\n"  # line 6: a 32-bit parameter
                   "  { unsigned long long m; m = __ballot_sync(~0ull, x); }\n"  # the inner m is 64-bit
                   "}\n")
    found = [(f.line, f.column, f.message.split(":")[0]) for f in scan_paths([src]).findings]
    assert found == [(4, 3, "__ballot_sync stored in 32-bit `unsigned`"),
                     (6, 3, "__activemask stored in 32-bit `unsigned`")]


def test_python_warp_constants_bound_to_32_are_flagged_but_tilings_are_not(tmp_path):
    src = tmp_path / "consts.py"
    src.write_text("WARP = 32\nWARP_SZ = 32\nkWarp = 32\nNUM_WARPS = 32\nWARPS_PER_BLOCK = 32\n"
                   "WARP_M = 32\nWARP_TILE_N = 32\nWARPS_PER_SM = 32\nthreads = 8 * 32\nWARP_OK = 64\n")
    assert [(f.line, f.rule) for f in scan_paths([src]).findings] == [
        (1, "PM101"), (2, "PM101"), (3, "PM101"), (4, "PM110"), (5, "PM110")]


@pytest.mark.parametrize("order", [("link.py", "reduce.py"), ("reduce.py", "link.py"), (".",)])
def test_a_file_and_a_link_to_it_are_reported_under_the_file_s_own_name(tmp_path, monkeypatch, order):
    monkeypatch.chdir(tmp_path)
    Path("reduce.py").write_text("WARP_SIZE = 32\n")
    Path("link.py").symlink_to("reduce.py")
    result = scan_paths([Path(p) for p in order])
    assert [f.path for f in result.findings] == ["reduce.py"] and result.files_scanned == 1


def test_python_warp_constants_computed_from_literals_are_flagged_like_32(tmp_path):
    """``WARP = 16 * 2`` and ``WARP_SIZE = 1 << 5`` were missed where ``WARP = 32`` is flagged."""
    src = tmp_path / "consts.py"
    src.write_text("WARP = 16 * 2\nWARP_SIZE = 1 << 5\nTHREADS_PER_WARP: int = (8 + 8) * 2\nNUM_WARPS = 64 - 32\n"
                   "kWarp = 16 * 4\nWARP_M = 16 * 2\nthreads = 8 * 32\nWARP_HUGE = 1 << 10 ** 9\n")
    assert [(f.line, f.rule) for f in scan_paths([src]).findings] == [
        (1, "PM101"), (2, "PM101"), (3, "PM101"), (4, "PM110")]


@needs_parser
def test_cuda_warp_constants_computed_from_literals_are_flagged(tmp_path):
    src = tmp_path / "consts.cu"
    src.write_text("constexpr int kWarp = 16*2;\nconstexpr int WARP_SIZE = 1 << 5;\nconstexpr int kWarpSize = 16*4;\n")
    assert [(f.line, f.rule) for f in scan_paths([src]).findings] == [(1, "PM101"), (2, "PM101")]


def test_a_lane_mask_behind_a_define_in_cupy_source_is_flagged_like_the_literal(tmp_path):
    """In a RawKernel's source the literal mask was PM206; the same mask behind ``#define FULL_MASK`` was missed."""
    src = tmp_path / "raw.py"
    src.write_text('import cupy as cp\n'
                   'K = cp.RawKernel(r"""\n#define FULL_MASK 0xffffffff\n'
                   'extern "C" __global__ void f(float* v) { v[0] = __shfl_sync(FULL_MASK, v[0], 0); }\n""", "f")\n'
                   'OK = cp.RawKernel(r"""\n#define FULL_MASK_64 0xffffffffffffffffull\n'
                   'extern "C" __global__ void f(float* v) { v[0] = __shfl_sync(FULL_MASK_64, v[0], 0); }\n""", "f")\n')
    found = [(f.line, f.rule, f.message) for f in scan_paths([src]).findings]
    assert found == [(2, "PM206", "RawKernel source uses CUDA-only constructs (__shfl_sync(0xffffffff)")]


@needs_parser
def test_library_types_are_library_uses(tmp_path):
    """``cudnnHandle_t h;`` alone was no cuDNN use (only calls were); cuBLAS and NCCL types stay unflagged, as
    their calls are (hipify maps cuBLAS to hipBLAS; RCCL keeps NCCL's API names)."""
    src = tmp_path / "handles.cu"
    src.write_text("void f() {\n  cudnnHandle_t h;\n  cublasHandle_t b;\n  ncclComm_t c;\n}\n"
                   "void g(cublasLtMatmulDesc_t d) {}\nvoid k() { cudnnCreate(0); }\n")
    found = [(f.rule, f.line, f.message) for f in scan_paths([src]).findings]
    assert found == [("PM107", 2, "uses cuDNN (cudnnHandle_t)"), ("PM106", 6, "uses cuBLASLt (cublasLtMatmulDesc_t)")]


def test_a_module_name_bound_to_a_function_and_imported_is_not_taken_as_holding_the_function():
    """``s = tl.sum`` then ``from math import pi as s``: s holds pi, yet a kernel's ``t = s`` was refused as holding
    tl.sum, because the module-level count of s's bindings left imports (and async defs) out."""
    template = ("import torch\nimport triton\nimport triton.language as tl\ns = tl.sum\n{rebind}\n\n\n@triton.jit\n"
                "def k(xp, yp):\n    r = tl.arange(0, 16)\n    t = s\n    tl.store(yp + r, tl.load(xp + r) * t)\n")
    for rebind in ("from math import pi as s", "import math as s", "async def s():\n    pass"):
        problems = static_check(template.format(rebind=rebind), "ref", "f")
        assert not [p for p in problems if "holds a function" in p], (rebind, problems)
    problems = static_check(template.format(rebind=""), "ref", "f")
    assert [p.split(":")[0] for p in problems if "holds a function" in p] == ["line 11"]
