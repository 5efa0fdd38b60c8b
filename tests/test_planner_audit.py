"""Bugs found by using `polyrec plan` and the planner's Python API as a user would: bad input gives a clear
error naming what is wrong (never a traceback, an out-of-memory kill or a misleading verdict), and the
planner's answers agree with themselves (notes, JSON round trip, the user's bounds)."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import time

import pytest
from typer.testing import CliRunner

from polyrec.cli import app
from polyrec.models.config import dcnv2_small, mlperf_dcnv2
from polyrec.planner import (
    Fleet,
    FleetError,
    NoFitError,
    Plan,
    PlanConstraints,
    PlanFormatError,
    make_plan,
    model_spec_from_config,
    parse_fleet,
)
from polyrec.planner import memory as mem
from polyrec.planner.codesign import codesign
from polyrec.planner.enumerate import MIN_ROWS_PER_SHARD, strategy_splits
from polyrec.planner.report import what_if
from polyrec.planner.types import SHARDINGS, DeviceGroup, TableSpec
from test_cli_audit import refused, said
from test_planner_json import edited_plan_json

runner = CliRunner()
SMALL = model_spec_from_config(dcnv2_small())
MLPERF = model_spec_from_config(mlperf_dcnv2())
H200 = parse_fleet("H200x1")


# --- a batch too large for the device: the message names the batch, not the tables -------------

def test_a_batch_too_large_names_the_batch_and_the_largest_that_fits():
    result = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--batch-per-gpu", "100000000", "--json"])
    assert result.exit_code == 1 and json.loads(result.stdout)["fits"] is False  # --json: the no-fit answer
    text = said(result.stderr)
    assert "at batch 100,000,000 per GPU" in text and "activations" in text, text
    assert "its tables need" not in text and "Smallest H200 fleet" not in text  # was: blamed the tables
    largest = int(re.search(r"largest batch per GPU that fits: ([\d,]+)", text).group(1).replace(",", ""))
    assert make_plan(SMALL, H200, PlanConstraints(batch_per_gpu=largest)).fits
    with pytest.raises(NoFitError, match="at batch"):
        make_plan(SMALL, H200, PlanConstraints(batch_per_gpu=largest + 1))


def test_a_batch_that_fits_a_larger_fleet_names_it():
    c = PlanConstraints(weight_dtypes=("fp32",), allow_host_cache=False, batch_per_gpu=800_000)
    with pytest.raises(NoFitError, match="At batch 800,000, the smallest H200 fleet that fits: H200x2"):
        make_plan(MLPERF, H200, c)


def _gb(text: str) -> float:
    number, unit = text.split()
    return float(number.replace(",", "")) / (1e3 if unit == "MB" else 1.0)


def test_a_batch_too_large_for_a_large_fleet_names_the_rank_that_runs_out():
    """On 64 MI355Xs at batch 3M the message said the activations take 243.7 GB of 278.1 GB and the tables 105.4
    GB over the fleet: what fits on paper. What runs out is a rank whose shards serve the global batch: the
    message names it and the parts of its peak, which add up, and the largest batch it names is the check's."""
    fleet = parse_fleet("MI355Xx8@8")
    c = PlanConstraints(weight_dtypes=("fp32",), allow_host_cache=False, batch_per_gpu=3_000_000)
    with pytest.raises(NoFitError) as info:
        make_plan(MLPERF, fleet, c)
    text = " ".join(str(info.value).split())
    assert "243.7 GB" not in text  # was: the even share, which fits
    size = r"([\d,.]+ [GM]B)"
    m = re.search(rf"rank \d+ \(MI355X\) needs {size} of its {size}, {size} too many: activations {size}, workspace "
                  rf"{size}, table shards {size} \(fp32 rows, rowwise_adagrad state\), dense layers {size}, reserve "
                  rf"{size}\.", text)
    assert m, text
    need, capacity, over, *parts = (_gb(g) for g in m.groups())
    assert capacity == 288.0 and need > capacity and over == pytest.approx(need - capacity, abs=0.1)
    assert sum(parts) == pytest.approx(need, abs=0.3)
    assert "the global batch (64 GPUs x 3,000,000)" in text
    assert "no MI355X fleet of up to 512 GPUs fits" in text
    largest = int(re.search(r"largest batch per GPU that fits: ([\d,]+)", text).group(1).replace(",", ""))
    assert make_plan(MLPERF, fleet, dataclasses.replace(c, batch_per_gpu=largest)).fits
    with pytest.raises(NoFitError, match=r"too many") as info:
        make_plan(MLPERF, fleet, dataclasses.replace(c, batch_per_gpu=largest + 1))
    assert not re.search(r" 0\.0 [GM]B too many", str(info.value))  # a rank a few kB short names them


def test_a_batch_too_large_for_one_gpu_beside_the_tables_says_what_is_left_for_them():
    c = PlanConstraints(weight_dtypes=("fp32",), allow_host_cache=False, batch_per_gpu=800_000)
    with pytest.raises(NoFitError, match=r"the activations and workspace take [\d.]+ GB of the 135.6 GB the H200 has "
                                         r"beside the reserve and the dense layers, leaving [\d.]+ GB for the tables, "
                                         r"which take 105.4 GB \(fp32 rows, rowwise_adagrad state\)"):
        make_plan(MLPERF, H200, c)


def test_tables_too_large_still_name_the_tables():
    with pytest.raises(NoFitError, match="its tables need 105.4 GB"):
        make_plan(MLPERF, parse_fleet("H100"), PlanConstraints(weight_dtypes=("fp32",), allow_host_cache=False))


# --- fleets ---------------------------------------------------------------------------------------

def test_a_fleet_with_nothing_after_the_at_sign_is_refused():
    with pytest.raises(FleetError, match="hosts after '@'"):
        parse_fleet("H200x1@")  # was: planned for one host


def test_a_fleet_with_a_superscript_host_count_is_refused():
    with pytest.raises(FleetError, match="hosts after '@' must be a positive integer"):
        parse_fleet("H200x1@²")  # was: "invalid literal for int() with base 10: '²'"


@pytest.mark.parametrize("fleet, entry", [("H200x８", "H200x８"), ("H100x2,H200x٣", "H200x٣"),
                                          ("H200 * ８", "H200 * ８"), ("H200x8@４", "@４"), ("H200x8@٣", "@٣")])
def test_a_fleet_count_in_other_digits_than_ascii_is_refused(fleet, entry):
    """int() and the regex's \\d take the decimal digits of every script: `H200x８` (full-width) planned 8 H200s,
    `H200x٣` (Arabic-Indic) 3, `@４` four hosts, without a word."""
    with pytest.raises(FleetError, match=re.escape(f"{entry!r}") + r".*counts are ASCII digits \(0-9\)"):
        parse_fleet(fleet)


def test_a_compare_or_fleet_option_with_a_full_width_count_is_refused(tmp_path):
    for args in (["--fleet", "H200x８"], ["--compare", "H200x８", "--out-dir", str(tmp_path)]):
        result = CliRunner().invoke(app, ["plan", "--model", "dcnv2-small", *args])
        assert result.exit_code == 2, result.output
        said = " ".join(result.stderr.split())
        assert "'H200x８' has a count in other digits than ASCII ('８'); counts are ASCII digits (0-9)" in said, said


def test_a_fleet_of_two_vendors_is_refused():
    """Was: planned over a 'pcie' link, though no NCCL / RCCL job runs NVIDIA and AMD GPUs together."""
    with pytest.raises(FleetError, match="fleet H100x1,MI300Xx1 mixes amd and nvidia GPUs"):
        parse_fleet("H100x1,MI300Xx1")
    assert parse_fleet("H100x1,H200x1").world_size == 2  # one vendor's kinds mix


def test_an_empty_fleet_option_is_refused_not_the_default():
    refused(["plan", "--model", "dcnv2-small", "--fleet", "", "--json"], "fleet '': empty device entry")
    # was: planned H200x1, the default, exit 0


def test_a_fixed_batch_above_the_given_bound_is_refused_not_ignored():
    refused(["plan", "--model", "dcnv2-small", "--batch-per-gpu", "100000", "--max-batch-per-gpu", "1024", "--json"],
            "--batch-per-gpu 100000 is above --max-batch-per-gpu 1024")  # was: planned at 100,000, exit 0
    result = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--batch-per-gpu", "100000", "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["batch_per_gpu"] == 100000  # the default bound


@pytest.mark.parametrize("text", ["H200x99999999999", "H200x8@99999999"])
def test_a_fleet_too_large_to_plan_is_refused_at_once(text):
    start = time.perf_counter()
    with pytest.raises(FleetError, match="the planner plans fleets of up to 4,096 GPUs"):
        parse_fleet(text)  # was: a list of every rank's device, killed for memory
    assert time.perf_counter() - start < 1
    refused(["plan", "--model", "dcnv2-small", "--fleet", text, "--json"], "up to 4,096 GPUs")


@pytest.mark.parametrize("build, says", [
    (lambda: Fleet(groups=()), "at least one device group"),  # was: min() arg is an empty sequence
    (lambda: Fleet(groups=(DeviceGroup(device="H200", count=1),), hosts=0), "hosts must be a positive integer"),
    (lambda: Fleet(groups=(DeviceGroup(device="H200", count=0),)), "count must be a positive integer"),
    (lambda: Fleet(groups=(DeviceGroup(device="H200", count=2.5),)), "count must be a positive integer"),
    (lambda: Fleet(groups=(DeviceGroup(device="H999", count=1),)), "unknown device 'H999'; valid devices: A100"),
    (lambda: Fleet(groups=(DeviceGroup(device="H200", count=1), DeviceGroup(device="h200", count=1))),
     "H200 is listed twice"),
])
def test_fleet_fields_out_of_range_are_named(build, says):
    with pytest.raises(FleetError, match=re.escape(says)):
        build()


# --- model specs ----------------------------------------------------------------------------------

def _table(**change) -> tuple[TableSpec, ...]:
    return (dataclasses.replace(SMALL.tables[0], **change), *SMALL.tables[1:])


def _dense(**change):
    return dataclasses.replace(SMALL.dense, **change)


@pytest.mark.parametrize("build, says", [
    (lambda: dict(tables=()), "needs at least one table"),  # was: IndexError
    (lambda: dict(tables=_table(rows=0)), "table 't0': rows must be a positive integer, got 0"),  # was: ZeroDivision
    (lambda: dict(tables=_table(rows=-5)), "rows must be a positive integer, got -5"),  # was: OverflowError
    (lambda: dict(tables=_table(dim=0)), "dim must be a positive integer, got 0"),
    (lambda: dict(tables=_table(pooling=math.nan)), "pooling must be a finite number of lookups per sample above 0"),
    (lambda: dict(tables=_table(pooling=math.inf)), "pooling must be a finite number"),
    (lambda: dict(tables=_table(pooling=0.0)), "pooling must be a finite number"),
    (lambda: dict(tables=_table(dim=64)), "tables have dims 16, 64"),  # was: a plan with a wrong interaction width
    (lambda: dict(tables=(SMALL.tables[0], SMALL.tables[0])), "table 't0' is listed twice"),
    (lambda: dict(index_distribution="foo"), "index_distribution must be one of uniform, log_uniform, zipf"),
    (lambda: dict(dense=_dense(interaction="mlp")), "interaction must be 'dot' or 'dcnv2'"),  # was: planned
    (lambda: dict(dense=_dense(dcn_rank=0)), "dcnv2 needs dcn_layers >= 1 and dcn_rank >= 1"),
    (lambda: dict(dense=_dense(interaction="dot")), "dcn_layers and dcn_rank are for dcnv2 only"),  # was: planned
    (lambda: dict(dense=_dense(num_dense=0)), "num_dense must be a positive integer"),
    (lambda: dict(dense=_dense(top_mlp=(128, 64))), "top_mlp must end in 1"),
    (lambda: dict(dense=_dense(bottom_mlp=())), "bottom_mlp must end in the embedding dim 16"),
])
def test_model_spec_out_of_range_is_named(build, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        make_plan(dataclasses.replace(SMALL, **build()), H200)


# --- constraints ----------------------------------------------------------------------------------

@pytest.mark.parametrize("change, says", [
    (dict(batch_per_gpu=1000.5), "constraint batch_per_gpu must be an integer >= 1, got 1000.5"),
    (dict(batch_per_gpu=True), "constraint batch_per_gpu must be an integer >= 1, got True"),
    (dict(max_batch_per_gpu=math.nan), "constraint max_batch_per_gpu must be an integer >= 1"),
    (dict(dense_dtype="int8"), "constraint dense_dtype: 'int8'; valid: bf16, fp16, fp32, tf32, fp8"),  # was: KeyError
    (dict(dense_optimizer="lamb"), "constraint dense_optimizer: 'lamb'; valid: sgd, adagrad, adam"),
    (dict(weight_dtypes="fp32"), "constraint weight_dtypes must be a sequence of names, e.g. ('fp32',), got 'fp32'"),
    (dict(weight_dtypes=("fp32", "fp32")), "constraint weight_dtypes: fp32 listed more than once"),  # was: a note
    (dict(optimizers=("sgd", "adam", "sgd")), "constraint optimizers: sgd listed more than once"),  # of 26 demotions
])
def test_constraints_out_of_range_are_named(change, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        PlanConstraints(**change)


# --- plan JSON ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def plan() -> Plan:
    return make_plan(SMALL, parse_fleet("H200x2"))


@pytest.mark.parametrize("edit, where", [
    (lambda d: d["model"]["tables"][0].__setitem__("rows", 0), "plan.model.tables[0]: table 't0': rows"),
    (lambda d: d["model"]["tables"][2].__setitem__("pooling", -1), "plan.model.tables[2]: table 't2': pooling"),
    (lambda d: d["model"].__setitem__("tables", []), "plan.model: model 'dcnv2-small' needs at least one table"),
    (lambda d: d["fleet"].__setitem__("hosts", 0), "plan.fleet: Fleet.hosts must be a positive integer"),
    (lambda d: d["fleet"]["groups"][0].__setitem__("device", "H999"), "plan.fleet.groups[0]: unknown device"),
    (lambda d: d.__setitem__("dense_optimizer", "lamb"), "plan.dense_optimizer: must be one of sgd, adagrad, adam"),
    (lambda d: d.__setitem__("dense_dtype", "int8"), "plan.dense_dtype: must be one of"),
    (lambda d: d.__setitem__("samples_per_s", math.nan), "plan.samples_per_s: expected a finite number, got nan"),
    (lambda d: d["step"].__setitem__("total_ms", math.inf), "plan.step.total_ms: expected a finite number"),
    (lambda d: d["tables"][0].update(sharding="column_wise", ranks=[0, 1, 0]),
     "plan.tables[0].ranks: dim 16 does not split into 3 equal column shards"),
])
def test_bad_numbers_in_a_plan_name_the_field(plan, edit, where):
    with pytest.raises(PlanFormatError) as info:
        Plan.from_json(edited_plan_json(plan, edit))
    assert where in str(info.value)


# --- answers that disagree with themselves ----------------------------------------------------------

def test_notes_name_the_precision_each_demoted_table_got():
    c = PlanConstraints(weight_dtypes=("fp32", "bf16", "fp16"), allow_host_cache=False)
    p = make_plan(MLPERF, parse_fleet("H100"), c)
    by_dtype = {d: [t.table for t in p.tables if t.weight_dtype == d] for d in ("bf16", "fp16")}
    assert by_dtype["bf16"] and by_dtype["fp16"]  # this case mixes both
    note = next(n for n in p.notes if "rows for" in n)
    for dtype, tables in by_dtype.items():
        assert f"{dtype} rows for {', '.join(tables)}" in note, note  # was: "fp16 rows for" every one of them


def _row_shards(rows: int, world: int) -> list[int] | None:
    """Rows of each shard of a one-table model split by ``row_wise_all`` over ``world`` ranks; None: not split."""
    model = dataclasses.replace(SMALL, tables=(TableSpec(name="t0", rows=rows, dim=16, pooling=1.0),))
    splits = strategy_splits(model, "row_wise_all", world, SHARDINGS)
    return None if splits is None else [r for r, _ in mem.shard_shapes(rows, 16, "row_wise", splits[0].shards)]


def test_notes_name_a_fallback_optimizer():
    c = PlanConstraints(optimizers=("adam", "rowwise_adagrad"), weight_dtypes=("fp32",), allow_host_cache=False)
    p = make_plan(MLPERF, H200, c)
    assert {t.optimizer for t in p.tables} == {"rowwise_adagrad"}
    assert "rowwise_adagrad optimizer state to fit (adam's does not fit in HBM)" in p.notes  # was: no word of it


@pytest.mark.parametrize("world", [3, 1500, 2048])
def test_row_wise_shards_all_have_the_minimum_rows(world):
    """Row-wise shards are cut in ranges of ceil(rows / shards): the last ones can come out short, or empty."""
    assert _row_shards(world * MIN_ROWS_PER_SHARD + 1, world) is None  # was: a last shard of 1023 rows, or 0
    assert min(_row_shards(world * world * MIN_ROWS_PER_SHARD, world)) >= MIN_ROWS_PER_SHARD


def test_plans_keep_to_the_shardings_allowed():
    one = dataclasses.replace(SMALL, tables=(TableSpec(name="t0", rows=10**6, dim=16, pooling=1.0),))
    row_wise = PlanConstraints(shardings=("row_wise",))
    assert {t.sharding for t in make_plan(one, parse_fleet("H200x2"), row_wise).tables} == {"row_wise"}
    with pytest.raises(NoFitError, match="Shardings allowed: row_wise"):
        make_plan(SMALL, parse_fleet("H200x2"), row_wise)  # was: a plan with table_wise tables in it


def test_compare_names_a_batch_too_large_for_every_fleet():
    row = what_if(SMALL, ["H200"], PlanConstraints(batch_per_gpu=10**8))[0]
    assert row.fleet is None and "At batch 100,000,000 per GPU the activations and workspace alone take" in row.notes


def test_codesign_keeps_the_largest_batch_allowed():
    result = codesign(SMALL, H200, 0.0, PlanConstraints(max_batch_per_gpu=4096))
    assert result.plan.batch_per_gpu <= 4096  # was: 65536


@pytest.mark.parametrize("target", [math.nan, -1.0, math.inf])
def test_codesign_target_out_of_range_is_named(target):
    with pytest.raises(ValueError, match="target_samples_per_s must be a finite number"):
        codesign(SMALL, H200, target)  # nan was: "even the smallest design misses the target"


def test_codesign_compare_keeps_the_hosts_of_the_fleet():
    result = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--codesign", "--compare", "H200",
                                 "--fleet", "H100x2@2", "--json"])
    assert result.exit_code == 0, result.output
    assert [r["fleet"] for r in json.loads(result.stdout)] == ["H200x2@2"]  # was: H200x2, the hosts dropped


def test_codesign_json_has_what_its_table_shows():
    result = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--codesign", "--json"])
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout)[0]
    assert 0 < row["peak_gb_per_gpu"] < 141  # was: the table's "peak GB/GPU" column missing from the JSON


def test_compare_with_a_fleet_is_refused_not_ignored(tmp_path):
    refused(["plan", "--model", "dcnv2-small", "--compare", "H200", "--fleet", "H200x8@4", "--json", "--out-dir",
             str(tmp_path)], "--compare finds the smallest fleet of each device kind itself, and reads no --fleet")
    assert not list(tmp_path.iterdir())


def test_the_table_list_shows_ranks_out_of_order_as_they_are():
    from polyrec.cli.plan_tables import ranks_text

    assert ranks_text(tuple(range(8, 16))) == "8..15"
    assert ranks_text((3, 7, 1, 5, 2)) == "3,7,1,5,2"  # was: "3..2"


def test_compare_listing_a_device_twice_is_refused(tmp_path):
    with pytest.raises(ValueError, match="H200 is listed twice"):
        what_if(SMALL, ["H200", "h200"])
    refused(["plan", "--model", "dcnv2-small", "--compare", "H200,h200", "--json", "--out-dir", str(tmp_path)],
            "H200 is listed twice")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("extra", [[], ["--codesign", "--compare", "H200"]])
def test_out_dir_outside_compare_is_refused_not_ignored(tmp_path, extra):
    """--out-dir was read by --compare alone and silently ignored by a plain plan and by --codesign."""
    refused(["plan", "--model", "dcnv2-small", "--out-dir", str(tmp_path / "r"), *extra], "--out-dir")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("edit, where", [
    (lambda d: d["memory"].pop(), "plan.memory: must hold one entry per rank 0..1 in order, got ranks [0]"),
    (lambda d: d["memory"][1].__setitem__("rank", 0), "got ranks [0, 0]"),
    (lambda d: d["memory"][1].__setitem__("device", "MI300X"), "plan.memory[1].device: rank 1 is a H200"),
    (lambda d: d["memory"][0].__setitem__("weights", -5), "plan.memory[0].weights: must be >= 0")])
def test_a_plans_memory_entries_must_match_its_fleet(plan, edit, where):
    """Plan.from_json took any memory list, so a hand-edited plan's Plan.fits could say anything."""
    with pytest.raises(PlanFormatError) as info:
        Plan.from_json(edited_plan_json(plan, edit))
    assert where in str(info.value)


def test_host_caching_keeps_the_earliest_optimizer_that_fits_so():
    """Was: the host-cache fallback took the last optimizer listed (adagrad), with every table in the lowest
    precision, where the first (adam) fits with host caches. Neither fits in HBM on an 80 GB H100."""
    h100 = parse_fleet("H100x1")
    for optimizers in (("adam",), ("adam", "adagrad")):
        p = make_plan(MLPERF, h100, PlanConstraints(optimizers=optimizers, weight_dtypes=("fp32", "fp16"),
                                                    batch_per_gpu=16384))
        assert {t.optimizer for t in p.tables} == {"adam"}
        assert any(t.memory == "host_cached" for t in p.tables)
        # the smaller tables back in fp32 where they still fit (was: all 26 in fp16)
        assert sum(t.weight_dtype == "fp32" for t in p.tables) >= 10


def test_a_later_optimizer_in_hbm_comes_before_host_caching():
    """The trainer runs HBM plans only: on an H200 row-wise Adagrad's fp32 tables fit in HBM, Adam's only with host
    caches."""
    p = make_plan(MLPERF, H200, PlanConstraints(optimizers=("adam", "rowwise_adagrad"), weight_dtypes=("fp32",),
                                                batch_per_gpu=16384))
    assert {t.optimizer for t in p.tables} == {"rowwise_adagrad"} and {t.memory for t in p.tables} == {"hbm"}
    assert "rowwise_adagrad optimizer state to fit (adam's does not fit in HBM)" in p.notes


def test_the_largest_batch_allowed_is_tried_itself():
    """Was: only the powers of four up to it (3000 planned at 1024, 60000 at 16384)."""
    for largest in (3000, 60000):
        p = make_plan(SMALL, H200, PlanConstraints(max_batch_per_gpu=largest))
        assert p.batch_per_gpu == largest


def test_the_plan_table_shows_slow_rates_and_no_negative_zero():
    """Was: '0.00M samples/s' for a plan at batch 1, and '-0.000' hidden overlap on every one-GPU plan."""
    from rich.console import Console

    from polyrec.cli.plan_tables import per_second, print_plan

    assert [per_second(r) for r in (3_414_000, 512_300, 950.4, 114.2)] == ["3.41M", "512k", "950", "114"]
    console = Console(width=200, record=True)
    print_plan(make_plan(MLPERF, H200, PlanConstraints(batch_per_gpu=1)), console)
    text = console.export_text()
    assert "-0.000" not in text and " 0.00M" not in text and "samples/s predicted (batch 1/GPU" in text


def test_the_plan_headline_is_one_line_in_a_narrow_terminal():
    """Was: the headline was the step table's title, which rich wrapped to that table's ~34 columns (four lines in a
    120-column terminal)."""
    from rich.console import Console

    from polyrec.cli.plan_tables import plan_headline, print_plan

    plan = make_plan(MLPERF, H200, PlanConstraints())
    console = Console(width=len(plan_headline(plan)) + 1, record=True)
    print_plan(plan, console)
    assert plan_headline(plan) in console.export_text().splitlines()


def test_codesign_refuses_a_kind_compared_twice_as_the_what_if_does():
    """Was: --codesign --compare H200,h200 designed for H200 twice."""
    refused(["plan", "--codesign", "--compare", "H200,h200", "--json"], "--compare H200,h200: H200 is listed twice")
    refused(["plan", "--compare", "H200,h200", "--json"], "--compare H200,h200: H200 is listed twice")


def test_host_memory_without_host_caches_is_refused():
    """Was: --host-memory-gb silently ignored with --no-host-cache (the other mode-only options are refused)."""
    refused(["plan", "--no-host-cache", "--host-memory-gb", "512", "--json"],
            "--host-memory-gb sizes host caches, which --no-host-cache turns off")
