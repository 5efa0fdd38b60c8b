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


NUMBERS = ("gpus", "samples_per_s", "samples_per_s_per_gpu", "samples_per_s_per_watt", "step_ms", "peak_gb_per_gpu",
           "batch_per_gpu")
FITS_NOWHERE = ["--compare", "H100,MI355X", "--batch-per-gpu", "3000000", "--weight-dtypes", "fp32", "--no-host-cache"]


def test_compare_rows_that_fit_nowhere_have_no_numbers(tmp_path):
    """MLPerf at 3M per GPU with fp32 rows in HBM fits no H100 or MI355X fleet. Those rows showed 0 in every
    number column, "gpus": 0 and "samples_per_s": 0.0 in JSON, bars at 0 in the chart, a notes line ending
    ".; numbers from: ", and no reason for the MI355X (whose GPU holds the batch alone)."""
    result = CliRunner().invoke(app, ["plan", *FITS_NOWHERE, "--json", "--out-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    rows = {r["device"]: r for r in json.loads(result.stdout)["rows"]}
    for row in rows.values():
        assert row["fleet"] is None and row["origin"] is None and all(row[k] is None for k in NUMBERS), row
    assert "At batch 3,000,000 per GPU the activations and workspace alone take" in rows["H100"]["notes"]
    mi355x = rows["MI355X"]["notes"]
    assert mi355x.startswith("fits no MI355X fleet of up to 512 GPUs. On MI355Xx1, at batch 3,000,000 per GPU: ")
    assert "leaving 62.1 GB for the tables, which take 105.4 GB (fp32 rows, rowwise_adagrad state)" in mi355x
    assert "On MI355Xx8@64, at batch 3,000,000 per GPU: " in mi355x and "too many: activations" in mi355x
    page = (tmp_path / "whatif_mlperf-dcnv2.html").read_text()
    assert "<tr><td>H100</td>" + "<td>-</td>" * 8 in page


def test_compare_table_and_chart_show_no_result_where_nothing_fits(tmp_path):
    result = CliRunner().invoke(app, ["plan", *FITS_NOWHERE, "--out-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    table_rows = [line for line in result.stdout.splitlines() if line.startswith(("│ H100", "│ MI355X"))]
    assert len(table_rows) == 2 and all(cell.strip() == "-" for line in table_rows for cell in line.split("│")[2:-1])
    text = " ".join(result.stdout.split())
    assert "MI355X: fits no MI355X fleet" in text and "numbers from" not in text and ".;" not in text


def test_chart_draws_no_bar_for_a_kind_that_fits_no_fleet():
    from polyrec.planner.report import NO_FLEET_LABEL, WhatIfRow, chart_bars

    fits = WhatIfRow(device="H200", fleet="H200x2", gpus=2, samples_per_s=2e6, samples_per_s_per_gpu=1e6,
                     samples_per_s_per_watt=1.4e3, step_ms=50.0, peak_gb_per_gpu=100.0, batch_per_gpu=50_000,
                     notes="", origin="datasheet")
    nowhere = WhatIfRow(device="H100", fleet=None, gpus=None, samples_per_s=None, samples_per_s_per_gpu=None,
                        samples_per_s_per_watt=None, step_ms=None, peak_gb_per_gpu=None, batch_per_gpu=None,
                        notes="fits no H100 fleet of up to 512 GPUs.", origin=None)
    for _, heights, labels in chart_bars([fits, nowhere]):
        assert heights[0] > 0 and labels[0] != NO_FLEET_LABEL
        assert heights[1] == 0 and labels[1] == NO_FLEET_LABEL  # was: a bar labelled 0 / 0.00
