"""A user's audit of `polyrec plan` and `polyrec hw` on the CPU: what a data file or a calibration file may
say that the planner cannot price is refused with the field named, not planned at infinity or a traceback."""

from __future__ import annotations

import json
import shutil
import sys

import pytest
from typer.testing import CliRunner

from polyrec.cli import app
from polyrec.hardware import get_device
from polyrec.hardware.calibrate import ceilings, save_calibration

runner = CliRunner()


@pytest.fixture
def catalog_without_bf16(tmp_path, monkeypatch):
    """The packaged catalog plus one data file, NOBF16: an H200 whose datasheet has no bf16 rate, written as
    docs/hardware.md says (value = 0 where the dtype is unsupported; a V100 has no bf16)."""
    catalog_module = sys.modules["polyrec.hardware.catalog"]  # polyrec.hardware.catalog is also a function's name
    for path in catalog_module.DEVICES_DIR.glob("*.toml"):
        shutil.copy(path, tmp_path)
    text = (tmp_path / "h200.toml").read_text()
    text = text.replace('name = "H200"', 'name = "NOBF16"', 1).replace('["H200"]', '["NOBF16"]', 1)
    (tmp_path / "nobf16.toml").write_text(text.replace("[peak_flops.bf16]\nvalue = 989.4e12",
                                                       "[peak_flops.bf16]\nvalue = 0", 1))
    real_load = catalog_module.load_catalog
    monkeypatch.setattr(catalog_module, "load_catalog", lambda: real_load(tmp_path))
    catalog_module.catalog.cache_clear()
    yield
    catalog_module.catalog.cache_clear()


@pytest.mark.usefixtures("catalog_without_bf16")
def test_a_dense_dtype_the_device_has_no_matrix_rate_for_is_refused():
    """Was a plan of an infinite step at 0 samples/s (exit 0, "Infinity" in the JSON, which `polyrec train
    --plan` then refused): every GEMM priced at a rate of 0. fp8 was refused so on the A100 already."""
    assert get_device("NOBF16").peak_flops["bf16"] == 0
    result = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--fleet", "NOBF16x1", "--json"])
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert "dense dtype bf16: NOBF16 has no bf16 matrix rate" in " ".join(result.output.split())
    fp32 = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--fleet", "NOBF16x1", "--dense-dtype", "fp32",
                               "--json"])
    assert fp32.exit_code == 0, fp32.output
    assert json.loads(fp32.stdout)["samples_per_s"] > 0


@pytest.mark.parametrize("key, value", [("l2_bandwidth", 1e-300), ("l2_bandwidth", 1e300),
                                        ("launch_latency", 1e300), ("launch_latency", 1e-300)])
def test_an_estimated_ceiling_no_device_measures_is_refused_naming_it(key, value):
    """The datasheet rates had a plausible band, the estimated ones (L2 bandwidth, launch latency) none: an
    L2 of 1e-300 B/s crashed `polyrec plan` with a traceback (RuntimeError: select_gemm: no config ... fits),
    a launch latency of 1e300 s planned a step of 1e304 ms."""
    save_calibration("H200", {"date": "2026-12-05", key: value})
    result = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--fleet", "H200x1", "--json"])
    assert result.exit_code == 2 and result.stdout == "", result.output
    said = " ".join(result.output.split())
    assert f"calibration of H200: '{key}'" in said and "the estimate's" in said


def test_measured_estimated_ceilings_still_load():
    """What an H200 measured (L2 7.7-8.5 TB/s against the 12 TB/s estimate, launches 6-11 us against 5 us)."""
    c = ceilings(get_device("H200"), {"date": "2026-12-05", "l2_bandwidth": 7.7e12, "launch_latency": 1.14e-5})
    assert c.l2_bandwidth.value == 7.7e12 and c.launch_latency.value == 1.14e-5
