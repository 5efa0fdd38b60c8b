"""What-if report (PNG + HTML) and the ``polyrec plan`` command."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from polyrec.cli import app
from polyrec.models.config import dcnv2_small
from polyrec.planner import Plan, model_spec_from_config
from polyrec.planner.report import what_if, write_report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_what_if_report_renders(tmp_path):
    rows = what_if(model_spec_from_config(dcnv2_small()), ["H100", "H200", "MI300X", "MI350X"])
    assert [r.gpus for r in rows] == [1, 1, 1, 1]
    assert all(r.samples_per_s_per_watt > 0 and "datasheet" in r.origin for r in rows)
    png, page = write_report(rows, tmp_path, title="test")
    data = png.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 10_000
    text = page.read_text()
    assert "MI350X" in text and "data:image/png;base64," in text


def test_cli_plan_json_round_trip(tmp_path):
    out = tmp_path / "plan.json"
    result = CliRunner().invoke(app, ["plan", "--model", "dcnv2-small", "--fleet", "H200x2", "--json", "-o", str(out)])
    assert result.exit_code == 0, result.output
    plan = Plan.from_json(out.read_text())
    assert plan.fleet.world_size == 2 and json.loads(result.stdout)["batch_per_gpu"] == plan.batch_per_gpu


def test_cli_unknown_device_lists_valid_ones():
    result = CliRunner().invoke(app, ["plan", "--fleet", "H300x8"])
    assert result.exit_code == 2
    assert "unknown device 'H300'" in result.output and "MI355X" in result.output


def test_cli_fits_nowhere_names_smallest_fleet():
    result = CliRunner().invoke(app, ["plan", "--fleet", "H100x1", "--weight-dtypes", "fp32", "--no-host-cache"])
    assert result.exit_code == 1
    assert "Smallest H100 fleet that fits: H100x2" in result.output


def test_cli_host_memory_gb():
    """MLPerf on one H100 with fp32 rows needs 41.3 GB of host memory: 100 GB hosts hold it, 40 GB hosts do not."""
    args = ["plan", "--fleet", "H100x1", "--weight-dtypes", "fp32"]
    result = CliRunner().invoke(app, [*args, "--host-memory-gb", "100", "--json"])
    assert result.exit_code == 0, result.output
    plan = Plan.from_json(result.stdout)
    assert plan.fleet.host_memory_bytes == 100 * 10**9 and any(t.memory == "host_cached" for t in plan.tables)
    result = CliRunner().invoke(app, [*args, "--host-memory-gb", "40"])
    assert result.exit_code == 1
    assert "40.0 GB of host memory per host (as given)" in " ".join(result.output.split())


@pytest.mark.parametrize("value", ["0", "-5", "1e-12", "nan", "inf", "1e300"])
@pytest.mark.parametrize("mode", [[], ["--codesign"]])
def test_cli_bad_host_memory_gb(value, mode):
    result = CliRunner().invoke(app, ["plan", "--model", "dcnv2-small", *mode, "--host-memory-gb", value])
    assert result.exit_code == 2
    assert f"--host-memory-gb must be a positive, finite number of GB (10^9 bytes) per host, got {float(value)}" in \
        " ".join(result.output.split())


def test_compare_takes_the_hosts_memory():
    """--compare's smallest fleets are sized for hosts of the given memory: MLPerf with fp32 rows fits one
    H100 with host-cached tables on hosts of unknown memory (the 2 x 6 TiB bound), not on 40 GB hosts."""
    from polyrec.models.config import preset
    from polyrec.planner.types import PlanConstraints

    model = model_spec_from_config(preset("mlperf-dcnv2"))
    c = PlanConstraints(weight_dtypes=("fp32",))
    unknown, small = (what_if(model, ["H100"], c, host_memory_bytes=h)[0] for h in (None, 40 * 10**9))
    assert unknown.fleet == "H100x1" and small.gpus > unknown.gpus


def test_cli_compare_passes_host_memory_gb(tmp_path):
    result = CliRunner().invoke(app, ["plan", "--model", "dcnv2-small", "--compare", "H200", "--host-memory-gb", "2000",
                                      "--json", "--out-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    bad = CliRunner().invoke(app, ["plan", "--model", "dcnv2-small", "--compare", "H200", "--host-memory-gb", "0",
                                   "--out-dir", str(tmp_path / "x")])
    assert bad.exit_code == 2 and not (tmp_path / "x").exists()


def test_cli_compare_writes_report(tmp_path):
    result = CliRunner().invoke(app, ["plan", "--model", "dcnv2-small", "--compare", "H200,MI355X", "--json",
                                      "--out-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert [r["device"] for r in doc["rows"]] == ["H200", "MI355X"]
    assert (tmp_path / "whatif_dcnv2-small.png").stat().st_size > 0
