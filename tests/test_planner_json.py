"""Plan JSON: round trip, and errors that name the malformed field."""

from __future__ import annotations

import dataclasses
import json

import pytest
from typer.testing import CliRunner

from polyrec.cli import app
from polyrec.models.config import dcnv2_small
from polyrec.planner import Plan, PlanFormatError, make_plan, model_spec_from_config, parse_fleet


@pytest.fixture(scope="module")
def plan() -> Plan:
    return make_plan(model_spec_from_config(dcnv2_small()), parse_fleet("H200x2"))


def test_round_trip(plan):
    again = Plan.from_json(plan.to_json())
    assert again == plan
    assert again.to_json() == plan.to_json()
    assert isinstance(again.tables[0].ranks, tuple)


def test_host_memory_round_trip(plan):
    """A fleet's host memory survives the plan JSON; a plan written before the field loads as not known."""
    given = dataclasses.replace(plan, fleet=dataclasses.replace(plan.fleet, host_memory_bytes=2 * 10**12))
    assert Plan.from_json(given.to_json()).fleet.host_memory_bytes == 2 * 10**12
    doc = json.loads(plan.to_json())
    assert doc["fleet"].pop("host_memory_bytes") is None
    assert Plan.from_json(json.dumps(doc)) == plan


def edited_plan_json(plan: Plan, edit) -> str:
    """``plan``'s JSON after ``edit`` (a function changing its parsed document in place)."""
    doc = json.loads(plan.to_json())
    edit(doc)
    return json.dumps(doc)


@pytest.mark.parametrize("edit, where", [
    (lambda d: d.__setitem__("version", 99), "plan.version"),
    (lambda d: d.pop("batch_per_gpu"), "plan.batch_per_gpu: missing"),
    (lambda d: d.__setitem__("batch_per_gpu", "big"), "plan.batch_per_gpu: expected an integer"),
    (lambda d: d["tables"][3].__setitem__("weight_dtype", "fp8"), "plan.tables[3].weight_dtype: must be one of"),
    (lambda d: d["tables"][0].__setitem__("sharding", "diagonal"), "plan.tables[0].sharding"),
    (lambda d: d["tables"][1].__setitem__("ranks", [5]), "plan.tables[1].ranks"),
    (lambda d: d["tables"].pop(), "no entry for table"),
    (lambda d: d["step"].__setitem__("total_ms", None), "plan.step.total_ms: expected a number"),
    (lambda d: d["memory"][0].__setitem__("colour", 1), "plan.memory[0].colour: unknown field"),
    (lambda d: d["model"]["dense"].__setitem__("interaction", "mlp"), "plan.model.dense.interaction"),
    (lambda d: d["fleet"]["groups"][0].__setitem__("count", 1.5), "plan.fleet.groups[0].count"),
    (lambda d: d["fleet"].__setitem__("host_memory_bytes", "2TB"), "plan.fleet.host_memory_bytes: expected an integer"),
    (lambda d: d["fleet"].__setitem__("host_memory_bytes", 0),
     "plan.fleet: Fleet.host_memory_bytes must be a positive integer"),
])
def test_malformed_plan_names_the_field(plan, edit, where):
    with pytest.raises(PlanFormatError) as info:
        Plan.from_json(edited_plan_json(plan, edit))
    assert where in str(info.value)


def test_not_json():
    with pytest.raises(PlanFormatError, match="not valid JSON"):
        Plan.from_json("{")
    with pytest.raises(PlanFormatError, match="expected a JSON object"):
        Plan.from_json("[]")


def _said(result) -> str:
    """The CLI's output with rich's line wrapping undone."""
    return " ".join(result.output.split())


def test_plan_output_to_a_path_that_cannot_be_written_is_a_clear_error(tmp_path):
    result = CliRunner().invoke(app, ["plan", "--model", "dcnv2-small", "--json", "-o",
                                      str(tmp_path / "no" / "p.json")])
    assert result.exit_code == 2 and result.stdout == ""  # --json: nothing half-written on stdout
    assert "error:" in _said(result) and "No such file or directory" in _said(result)


def test_compare_report_to_a_directory_that_cannot_be_made_is_a_clear_error(tmp_path):
    (tmp_path / "afile").write_text("")
    result = CliRunner().invoke(app, ["plan", "--model", "dcnv2-small", "--compare", "H200", "--json", "--out-dir",
                                      str(tmp_path / "afile" / "report")])
    assert result.exit_code == 2 and result.stdout == ""
    assert "error:" in _said(result) and "Not a directory" in _said(result)


def test_no_fit_with_json_prints_the_reason_as_json_and_exits_1(plan):
    """Was: exit 1, the reason on stderr and nothing on stdout, so a --json script had nothing to read."""
    result = CliRunner().invoke(app, ["plan", "--fleet", "H100x1", "--weight-dtypes", "fp32", "--no-host-cache",
                                      "--json"])
    assert result.exit_code == 1 and "does not fit:" in result.stderr  # a person still reads why
    answer = json.loads(result.stdout)
    assert answer["fits"] is False and "Smallest H100 fleet that fits: H100x2" in answer["reason"]
    keys = json.loads(plan.to_json())  # model and fleet as a plan writes them
    assert set(answer["model"]) == set(keys["model"]) and answer["model"]["name"] == "mlperf-dcnv2"
    assert answer["fleet"] == {"groups": [{"device": "H100", "count": 1}], "hosts": 1, "host_memory_bytes": None}
    with pytest.raises(PlanFormatError, match="plan.fits: false"):  # saved by a script, it does not train
        Plan.from_json(result.stdout)
