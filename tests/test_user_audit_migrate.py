"""Regressions found by porting a small real-looking codebase with ``polyrec migrate`` (scan, hipify, verify)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from polyrec.cli import app
from polyrec.migrate import scan_cuda
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
    assert sorted(p.name for p in out.iterdir()) == ["hipify-report.json", "hipify.diff", "k.cu"]  # no temp file left


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
