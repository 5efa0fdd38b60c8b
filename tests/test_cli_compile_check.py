"""`polyrec hw compile-check` on a user-supplied kernel, for every distinct target."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from polyrec.cli import app
from polyrec.hardware.compile import CompileJob

pytestmark = pytest.mark.compile


def scale_jobs(spec) -> list[CompileJob]:
    from triton_kernels import scale_kernel

    return [CompileJob(label="scale", kernel=scale_kernel,
                       signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                       constexprs={"BLOCK": 512})]


def test_compile_check_user_kernel_json(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    result = CliRunner().invoke(app, ["hw", "compile-check", "--kernel", "test_cli_compile_check:scale_jobs",
                                      "-d", "H200", "-d", "MI300X", "-d", "MI350X", "--json"])
    assert result.exit_code == 0, result.output
    reports = json.loads(result.stdout)
    assert {r["target"] for r in reports} == {"cuda:90", "hip:gfx942", "hip:gfx950"}
    assert all(r["fits"] for r in reports)
