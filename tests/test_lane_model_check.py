"""benchmarks/lane_model_check.py: the lane update's price (estimate's, less its merge) against the lane update +
permute kernels of the committed tbe_device_times runs."""

from __future__ import annotations

import dataclasses
import math

import pytest

from benchmark_util import load_benchmark
from polyrec.hardware.catalog import get_device
from polyrec.perfmodel import tbe, tbe_step


@pytest.fixture(scope="module")
def check():
    return load_benchmark("lane_model_check")


def _shape(**kw) -> tbe.UpdateShape:
    return tbe.UpdateShape(variant="lane", tile=8, num_warps=1, elems_per_thread=32, chunks=8, **kw)


def test_the_one_dim_constants_price_one_dim_tables_without_a_per_element_state():
    block = _shape(one_dim=True).block_d(32)  # 128
    assert tbe.one_dim_priced(_shape(one_dim=True), 4, 32)  # row-wise Adagrad
    assert tbe.one_dim_priced(_shape(one_dim=True), 0, 32)  # SGD
    assert not tbe.one_dim_priced(_shape(one_dim=True), 4 * block, 32)  # Adagrad: a state tile
    assert not tbe.one_dim_priced(_shape(), 4, 32)  # several dims
    assert not tbe.one_dim_priced(dataclasses.replace(_shape(one_dim=True), variant="scan"), 4, 32)


def test_the_copy_fraction_follows_the_one_dim_pricing_and_the_gradient_size():
    bf16 = dataclasses.replace(_shape(), grad_bytes=2)
    assert tbe.update_copy_fraction(_shape(one_dim=True), 4, 32) == tbe.ONE_DIM_UPDATE_COPY_FRACTION[4]
    assert tbe.update_copy_fraction(_shape(), 4, 32) == tbe.UPDATE_COPY_FRACTION[4]
    assert tbe.update_copy_fraction(bf16, 4, 32) == tbe.UPDATE_COPY_FRACTION[2] != tbe.UPDATE_COPY_FRACTION[4]


def test_the_price_is_the_update_less_its_merge_plus_the_per_row_work(check):
    kw = dict(nnz=2_000_000, unique=1_500_000, row_bytes=512, grad_row_bytes=512, state_bytes_per_row=4)
    spec, ceil = get_device("H100"), check.device_ceilings("H100")
    sgd = check.lane_price_s(_shape(), "H100", kw, "sgd")
    merge = tbe.update_merge_seconds(_shape(), spec, ceil, nnz=2_000_000, unique=1_500_000, grad_row_bytes=512)
    assert sgd == pytest.approx(tbe.update_seconds(_shape(), spec, ceil, **kw) - merge)
    assert check.lane_price_s(_shape(), "H100", kw, "rowwise_adagrad") - sgd == pytest.approx(
        tbe_step.row_state_seconds(2_000_000, spec))


def test_datasheet_rates_price_at_the_catalogs_copy_rate(check):
    """``--datasheet``: the lane price at the catalog's rates, not the committed calibration's (the H100's measured
    copy rate is below its datasheet's, so a bytes-bound update is priced cheaper)."""
    assert check.datasheet_ceilings("H100").copy_bandwidth.value == get_device("H100").hbm_bandwidth
    kw = dict(nnz=8_000_000, unique=6_000_000, row_bytes=512, grad_row_bytes=512, state_bytes_per_row=0)
    calibrated = check.lane_price_s(_shape(), "H100", kw, "sgd")
    datasheet = check.lane_price_s(_shape(), "H100", kw, "sgd", check.datasheet_ceilings)
    assert datasheet < calibrated


def test_groups_give_the_mean_and_rms_log_error_of_each(check):
    rows = [{"k": "a", "priced_ms": 2.0, "measured_ms": 1.0}, {"k": "a", "priced_ms": 0.5, "measured_ms": 1.0},
            {"k": "b", "priced_ms": 1.0, "measured_ms": 1.0}]
    out = check.groups(rows, lambda r: r["k"])
    assert out["a"] == {"cases": 2, "mean_log": pytest.approx(0.0), "rms_log": pytest.approx(math.log(2))}
    assert out["b"]["rms_log"] == 0.0


def test_every_one_launch_update_of_a_committed_run_is_checked(check):
    """Seeds 31-36 on the H100: each case whose lane update ran as one launch under the planner's config is a row,
    priced and measured (lane update + permute)."""
    path = sorted((check.RESULTS / "h100_seeds31_36_2026-12-07").glob("tbe_device_times_seed31_*.json"))[0]
    rows = check.run_lanes(path)
    assert 8 <= len(rows) <= 16
    assert all(r["priced_ms"] > 0 and r["measured_ms"] > 0 and r["device"] == "H100" for r in rows)
    assert {r["priced_as"] for r in rows} <= {"one-dim", "mixed-dims"}
    assert {r["ids"] for r in rows} <= {"skewed", "uniform"}


def test_a_grouped_module_is_checked_launch_by_launch_where_each_launch_was_kept(check, tmp_path):
    """A run that kept each lane launch's time (``call_ms``): one row per dim group, priced at the group's ids plus
    its programs over the other groups' ids, measured as its launch plus its share of the module's one permute; the
    same row without ``call_ms`` (older runs) gives none."""
    import json

    src = check.RESULTS / "h100_seeds47_52_2026-12-07" / "tbe_device_times_seed52_nvidia-h100-80gb-hbm3_2026-12-07.json"
    run = json.loads(src.read_text())
    row = dict(run["results"]["rows"][5], kernels=[
        {"kernel": "lane_update_kernel", "calls_per_step": 4.0, "ms_per_step": 10.0, "call_ms": [1.0, 2.0, 3.0, 4.0]},
        {"kernel": "permute_kernel", "calls_per_step": 1.0, "ms_per_step": 0.8}])
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"environment": run["environment"], "results": {"rows": [row]}}))
    rows = check.run_group_launches(path)
    assert [r["group"] for r in rows] == ["D16", "D32", "D64", "D128"]
    case = check.seed_cases(52, check.CASES_PER_SEED)[5]
    module, *launches = check.planned_updates(check.shard_loads(case), "H100", check.RUN_GRAD_BYTES)
    ids = module[1]["nnz"]
    for r, (shape, kw), launch_ms in zip(rows, launches, (1.0, 2.0, 3.0, 4.0)):
        assert r["measured_ms"] == pytest.approx(launch_ms + 0.8 * kw["nnz"] / ids)
        programs = (ids - kw["nnz"]) / (shape.tile * shape.chunks)
        idle = tbe.idle_programs_seconds(shape, get_device("H100"), programs=programs)
        assert r["idle_ms"] == pytest.approx(idle * 1e3) and idle > 0
        assert r["priced_ms"] == pytest.approx(check.lane_price_s(shape, "H100", kw, case["optimizer"]) * 1e3
                                               + r["idle_ms"])
    assert sum(kw["nnz"] for _, kw in launches) == pytest.approx(ids)
    row["kernels"][0].pop("call_ms")
    path.write_text(json.dumps({"environment": run["environment"], "results": {"rows": [row]}}))
    assert check.run_group_launches(path) == []
