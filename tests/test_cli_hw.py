"""The `polyrec hw` commands, through typer's test runner."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from polyrec.cli import app

runner = CliRunner()


def test_list_json_has_devices_with_sources():
    result = runner.invoke(app, ["hw", "list", "--json"])
    assert result.exit_code == 0, result.output
    devices = {d["name"]: d for d in json.loads(result.stdout)}
    assert len(devices) >= 8
    assert devices["H200"]["hbm_bytes"] == 141e9
    assert devices["MI350X"]["sources"]["hbm_bandwidth"].startswith("http")


def test_list_table():
    result = runner.invoke(app, ["hw", "list"])
    assert result.exit_code == 0 and "MI355X" in result.stdout


def test_show_and_unknown_name():
    result = runner.invoke(app, ["hw", "show", "mi300x", "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["arch"] == "gfx942"
    bad = runner.invoke(app, ["hw", "show", "H300"])
    assert bad.exit_code == 2
    assert "unknown device 'H300'" in bad.output and "H200" in bad.output


def test_detect_json_on_cpu(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = runner.invoke(app, ["hw", "detect", "--json"])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["how"] == "cpu"


def test_calibrate_without_gpu_is_a_clear_error(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = runner.invoke(app, ["hw", "calibrate"])
    assert result.exit_code == 2 and "needs a CUDA or ROCm GPU" in result.output


def test_compile_check_refuses_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    result = runner.invoke(app, ["hw", "compile-check"])
    assert result.exit_code == 2 and "TRITON_INTERPRET" in result.output


@pytest.mark.parametrize("ref, says", [
    ("nosuch.module:f", "No module named 'nosuch'"),
    ("polyrec.kernels.tbe_compile:nosuch", "has no attribute 'nosuch'"),
    ("polyrec.kernels.tbe_compile:_SCALARS", "dict is not a function"),
    (":compile_jobs", "Empty module name"),
])
def test_compile_check_of_a_kernel_that_cannot_be_loaded_is_a_clear_error(monkeypatch, ref, says):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    result = runner.invoke(app, ["hw", "compile-check", "-d", "H200", "-k", ref, "--json"])
    assert result.exit_code == 2 and result.stdout == ""  # --json: nothing but the error, on stderr
    said = " ".join(result.output.split())
    assert f"error: --kernel {ref}:" in said and says in said
