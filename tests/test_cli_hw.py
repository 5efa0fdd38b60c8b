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


@pytest.fixture
def broken_catalog(tmp_path, monkeypatch):
    """The packaged catalog with one data file whose HBM bandwidth is in the wrong unit (as a user adding a
    device may write it); yields that file."""
    import shutil
    import sys

    catalog_module = sys.modules["polyrec.hardware.catalog"]  # polyrec.hardware.catalog is also a function's name
    for path in catalog_module.DEVICES_DIR.glob("*.toml"):
        shutil.copy(path, tmp_path)
    bad = tmp_path / "zz_new.toml"
    text = (tmp_path / "h200.toml").read_text().replace('name = "H200"', 'name = "NEW"', 1)
    bad.write_text(text.replace('unit = "B/s"', 'unit = "GB/s"', 1))
    real_load = catalog_module.load_catalog
    monkeypatch.setattr(catalog_module, "load_catalog", lambda: real_load(tmp_path))
    catalog_module.catalog.cache_clear()
    yield bad
    catalog_module.catalog.cache_clear()


@pytest.mark.parametrize("args", [["hw", "list", "--json"], ["hw", "show", "NEW"], ["hw", "detect", "--json"],
                                  ["hw", "calibrate", "--json"], ["hw", "compile-check", "--json"]])
def test_a_malformed_data_file_is_a_clear_error(broken_catalog, monkeypatch, args):
    """Was a traceback ending in CatalogError, exit 1 (`hw show NAME` is how docs/hardware.md checks a new file;
    detect and calibrate read the catalog where a GPU is present, faked here)."""
    import torch

    from polyrec.hardware import detect
    from polyrec.hardware.detect import DeviceProps

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(detect, "read_props", lambda index=0: DeviceProps(
        name="NVIDIA H200", total_memory=143771 * 2**20, multi_processor_count=132, major=9))
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and result.stdout == "", result.output
    said = " ".join(result.stderr.split())
    assert said.startswith(f"error: {broken_catalog}: field 'hbm_bandwidth'") and "Traceback" not in said


def not_jit_jobs(spec):
    from polyrec.hardware.compile import CompileJob

    return [CompileJob(label="plain python", kernel=len, signature={"x": "*fp32"})]


def test_compile_check_of_a_job_that_is_not_a_triton_kernel_is_a_clear_error(monkeypatch):
    """Was a traceback ending in CompileHarnessError, exit 1."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    result = runner.invoke(app, ["hw", "compile-check", "-d", "H200", "-k", "test_cli_hw:not_jit_jobs", "--json"])
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert "error: 'len' is not a JITFunction" in " ".join(result.stderr.split())


def test_a_calibration_that_cannot_be_stored_is_printed_and_said(tmp_path, monkeypatch):
    """Was a traceback (PermissionError) after the minute of timing, the values lost."""
    import torch

    import polyrec.hardware.calibrate as calibrate
    from polyrec.hardware import detect
    from polyrec.hardware.detect import DeviceProps

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(detect, "read_props", lambda index=0: DeviceProps(
        name="NVIDIA H200", total_memory=143771 * 2**20, multi_processor_count=132, major=9))
    monkeypatch.setattr(calibrate, "calibrate", lambda spec, progress=None: {"device": spec.name,
                                                                           "copy_bandwidth": 4.2e12})
    monkeypatch.setattr(calibrate, "save_calibration", lambda device, measured: (_ for _ in ()).throw(
        PermissionError(13, "Permission denied")))
    result = runner.invoke(app, ["hw", "calibrate", "--json", "--no-host-probe"])
    assert result.exit_code == 1, result.output
    assert json.loads(result.stdout)["measured"]["copy_bandwidth"] == 4.2e12
    said = " ".join(result.stderr.split())
    assert "error: could not store the calibration at" in said and "Permission denied" in said
