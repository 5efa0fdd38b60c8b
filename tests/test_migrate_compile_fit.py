"""Rule PM111: `migrate scan --compile-jobs` compiles user configs for gfx942/gfx950 and flags misfits."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from polyrec.cli import app
from polyrec.hardware.compile import CompileJob
from polyrec.migrate.compile_fit import compile_fit_findings

pytestmark = pytest.mark.compile

DOT_SIGNATURE = {"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*fp32", "K": "i32", "BM": "constexpr",
                 "BN": "constexpr", "BK": "constexpr"}


def oversized_jobs(spec) -> list[CompileJob]:
    """A 256x256x128 bf16 tile: 128 KiB of operands per stage, more than gfx942's 64 KiB LDS."""
    from triton_kernels import dot_kernel

    return [CompileJob(label="dot 256x256x128", kernel=dot_kernel, signature=DOT_SIGNATURE,
                       constexprs={"BM": 256, "BN": 256, "BK": 128}, num_warps=8, num_stages=2)]


def small_jobs(spec) -> list[CompileJob]:
    from triton_kernels import dot_kernel

    return [CompileJob(label="dot 64x64x32", kernel=dot_kernel, signature=DOT_SIGNATURE,
                       constexprs={"BM": 64, "BN": 64, "BK": 32}, num_warps=4, num_stages=2)]


def test_oversized_config_is_flagged_at_the_kernel(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    findings = compile_fit_findings(["test_migrate_compile_fit:oversized_jobs"], targets=("MI300X",))
    assert len(findings) == 1
    f = findings[0]
    assert f.rule == "PM111" and f.path.endswith("triton_kernels.py") and f.line > 1
    assert "MI300X" in f.message and ("shared memory" in f.message or "spills" in f.message)


def test_config_that_fits_is_not_flagged(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert compile_fit_findings(["test_migrate_compile_fit:small_jobs"]) == []


def test_cli_reports_pm111_and_bad_references(tmp_path, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    (tmp_path / "clean.py").write_text("x = 1\n")
    runner = CliRunner()
    result = runner.invoke(app, ["migrate", "scan", str(tmp_path), "--json", "--compile-jobs",
                                 "test_migrate_compile_fit:oversized_jobs"])
    assert result.exit_code == 1, result.output
    assert {f["rule"] for f in json.loads(result.stdout)["findings"]} == {"PM111"}
    bad = runner.invoke(app, ["migrate", "scan", str(tmp_path), "--compile-jobs", "no_such_module:jobs"])
    assert bad.exit_code == 2 and "no_such_module" in bad.output
