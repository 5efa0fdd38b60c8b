"""The planner's HBM budget agrees with the estimator's memory (the TBE backward's buffers at the update
tile its selector picks, the sort keys held through the dense half), host caches fill what the estimator
leaves, and host-cached tables fit the memory of their host."""

from __future__ import annotations

import dataclasses

import pytest

from polyrec.models.config import mlperf_dcnv2
from polyrec.planner import NoFitError, PlanConstraints, make_plan, parse_fleet
from polyrec.planner import memory as mem
from polyrec.planner import fitting, no_fit, propose
from polyrec.planner.estimate import Estimator
from polyrec.planner.partition import Storage
from polyrec.planner.types import (
    WEIGHT_BYTES,
    DenseSpec,
    DeviceMemory,
    ModelSpec,
    TablePlan,
    Fleet,
    FleetError,
    TableSpec,
    model_spec_from_config,
)

MLPERF = model_spec_from_config(mlperf_dcnv2())
DOT = DenseSpec(num_dense=13, bottom_mlp=(64, 128), top_mlp=(64, 1), interaction="dot")


def one_table(rows: int) -> ModelSpec:
    """A DLRM with one one-hot table of ``rows`` x 128 (1e9 rows: 516 GB in fp32 with rowwise Adagrad)."""
    return ModelSpec(name="big", tables=(TableSpec(name="t0", rows=rows, dim=128, pooling=1.0),), dense=DOT)


def test_held_key_bytes_by_hand():
    assert mem.held_key_bytes(1000, 1) == 1000 * (4 + 4)  # the forward's sort keys and source positions
    assert mem.held_key_bytes(1000, 2) == 1000 * (4 + 4 + 8 + 4)  # prepare_backward's sorted ids


@pytest.mark.parametrize("model, fleet, batch", [(MLPERF, "H200", 65536), (MLPERF, "MI325X", 1 << 20),
                                                 (one_table(10**9), "H200", 65536)])
def test_budget_is_what_the_estimator_leaves_for_the_tables(model, fleet, batch):
    """One GPU holds every table: its budget is exactly the capacity the estimator leaves beside them (the
    MLPerf rows take the embedding branch of the peak with its TBE buffers, the one-table DLRM the dense
    branch with the held sort keys)."""
    est = Estimator(model, parse_fleet(fleet))
    storage = {t.name: Storage(weight_dtype="fp32", optimizer="rowwise_adagrad") for t in model.tables}
    plans = [TablePlan(table=t.name, sharding="table_wise", ranks=(0,)) for t in model.tables]
    tables = sum(mem.weight_bytes(t.rows, t.dim, "fp32") + mem.state_bytes(t.rows, t.dim, "rowwise_adagrad")
                 for t in model.tables)
    m = est.memory(plans, batch)[0]
    assert no_fit.rank_budgets(est, batch, storage)[0] == m.capacity - m.reserve - (m.used - tables)


@pytest.mark.parametrize("fleet, batch", [("H200", 262144), ("MI325X", 1_000_000)])
def test_mlperf_keeps_fp32_rows_in_hbm_where_the_estimator_fits_them(fleet, batch):
    """The budget once reserved the TBE workspace at tile 1 (59.9 GB at 262144 on an H200, 228.6 GB at 1M
    on an MI325X, where the selected tile's is 9.6 and 23.1 GB): the H200 got fp16 rows and the MI325X fp16
    rows and a host cache (1.32M samples/s), where fp32 rows in HBM fit (124.8 and 178.8 GB)."""
    plan = make_plan(MLPERF, parse_fleet(fleet), PlanConstraints(batch_per_gpu=batch))
    assert plan.fits and all(t.weight_dtype == "fp32" and t.memory == "hbm" for t in plan.tables)
    assert plan.memory[0].used < 0.9 * plan.memory[0].capacity


def test_a_host_cache_that_fills_the_budget_fits():
    """A table that needs a host cache as large as HBM allows: the cache once filled a budget that left out
    the held sort keys, the estimator refused it by 8 B per lookup, and the error said the fleet fits."""
    model, fleet = one_table(10**9), parse_fleet("H200x1")
    plan = make_plan(model, fleet, PlanConstraints())
    (t0,) = plan.tables
    assert plan.fits and t0.memory == "host_cached" and 0 < t0.cache_rows < 10**9
    m = plan.memory[0]
    assert 0 <= m.capacity - m.reserve - m.used < 128 * WEIGHT_BYTES[t0.weight_dtype] + mem.CACHE_META_BYTES_PER_ROW
    assert any("GB of host memory per host" in n for n in plan.notes)
    c = PlanConstraints(batch_per_gpu=1024)
    assert fitting.fits(model, fleet, c) and propose.candidates(model, fleet, c)


def test_host_cached_tables_fit_their_hosts_memory():
    """1e13 rows (2,600 TB in fp16 with their state) once planned as fitting one H200 with all of it in host memory."""
    model, fleet = one_table(10**13), parse_fleet("H200x1")
    c = PlanConstraints(batch_per_gpu=1024)
    assert not fitting.fits(model, fleet, c) and not propose.candidates(model, fleet, c)
    with pytest.raises(NoFitError, match="host memory per host") as info:
        make_plan(model, fleet, c)
    assert "Smallest H200 fleet that fits: none" in str(info.value)


def test_row_wise_host_caches_over_two_hosts():
    """1e11 rows (26 TB in fp16 with their state, 1.6 TB per rank) fit two hosts of 8 H200s row-wise: each host holds
    half, and each rank's cache fills what the estimator leaves (its row-wise shards pool for all samples,
    more than the even share the budget assumes)."""
    plan = make_plan(one_table(10**11), parse_fleet("H200x8@2"), PlanConstraints(batch_per_gpu=1024))
    (t0,) = plan.tables
    assert plan.fits and t0.memory == "host_cached" and t0.sharding == "row_wise" and t0.cache_rows > 0
    hosts = [sum(m.host_bytes for m in plan.memory if plan.fleet.host_of(m.rank) == h) for h in range(2)]
    assert hosts[0] == hosts[1] <= mem.HOST_MEMORY_BYTES


def test_host_memory_is_summed_per_host():
    est = Estimator(one_table(10**9), parse_fleet("H200x2@2"))  # ranks 0, 1 on host 0; 2, 3 on host 1

    def ranks(*host_fractions: float) -> list[DeviceMemory]:
        return [DeviceMemory(rank=r, device="H200", weights=0, optimizer_state=0, activations=0, workspace=0,
                             reserve=0, capacity=141 * 10**9, host_bytes=int(f * mem.HOST_MEMORY_BYTES))
                for r, f in enumerate(host_fractions)]

    assert est.memory_fits(ranks(0.4, 0.4, 0.4, 0.4))
    assert est.memory_fits(ranks(0.6, 0.0, 0.6, 0.0))
    assert not est.memory_fits(ranks(0.6, 0.6, 0.0, 0.0))


def with_host_memory(fleet: str, host_memory_bytes: int | None) -> Fleet:
    return dataclasses.replace(parse_fleet(fleet), host_memory_bytes=host_memory_bytes)


def test_host_memory_limit_is_the_fleets_or_the_upper_bound():
    assert mem.host_memory_limit(parse_fleet("H200x8")) == mem.HOST_MEMORY_BYTES
    assert mem.host_memory_limit(with_host_memory("H200x8", 2 * 10**12)) == 2 * 10**12
    est = Estimator(one_table(10**9), with_host_memory("H200x2@2", 10**12))
    ranks = [DeviceMemory(rank=r, device="H200", weights=0, optimizer_state=0, activations=0, workspace=0, reserve=0,
                          capacity=141 * 10**9, host_bytes=h) for r, h in enumerate((6 * 10**11, 4 * 10**11, 0, 0))]
    assert est.memory_fits(ranks)  # host 0 holds exactly its 1e12 bytes
    ranks[1].host_bytes += 1
    assert not est.memory_fits(ranks)
    assert Estimator(one_table(10**9), parse_fleet("H200x2@2")).memory_fits(ranks)  # the upper bound holds it


def test_hosts_of_the_given_memory_refuse_what_the_upper_bound_holds():
    """The two hosts of test_row_wise_host_caches_over_two_hosts hold 13 TB each under the upper bound; hosts of
    2 TB (a DGX H200) cannot, and the smallest fleet named has hosts of 2 TB too."""
    model, c = one_table(10**11), PlanConstraints(batch_per_gpu=1024)
    assert make_plan(model, parse_fleet("H200x8@2"), c).fits
    fleet = with_host_memory("H200x8@2", 2 * 10**12)
    assert not fitting.fits(model, fleet, c) and not propose.candidates(model, fleet, c)
    with pytest.raises(NoFitError, match=r"2,000\.0 GB of host memory per host \(as given\)") as info:
        make_plan(model, fleet, c)
    assert "Smallest H200 fleet that fits: H200x8@16." in str(info.value)


def test_a_plan_within_the_given_host_memory_says_so():
    """MLPerf on one H100 with fp32 rows only caches t0 and t19 in 41.3 GB of host memory."""
    c = PlanConstraints(weight_dtypes=("fp32",))
    plan = make_plan(MLPERF, with_host_memory("H100x1", 100 * 10**9), c)
    assert plan.fits and plan.fleet.host_memory_bytes == 100 * 10**9
    assert [t.table for t in plan.tables if t.memory == "host_cached"] == ["t0", "t19"]
    assert any(n.endswith("GB of host memory per host (of the 100.0 GB given)") for n in plan.notes)
    with pytest.raises(NoFitError, match=r"40\.0 GB of host memory per host \(as given\)"):
        make_plan(MLPERF, with_host_memory("H100x1", 40 * 10**9), c)


@pytest.mark.parametrize("value", [0, -1, True, 1.5e12, "2TB"])
def test_bad_host_memory_is_refused(value):
    with pytest.raises(FleetError, match=r"Fleet\.host_memory_bytes must be a positive integer .* got"):
        with_host_memory("H200x8", value)
