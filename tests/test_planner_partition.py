"""The partitioner places shards where the estimator's own peak of each rank fits: a rank holding a whole table
serves the global batch's lookups of it, more activations and TBE buffers than an even share, which the
planner's budget once assumed (it refused placements that fit and made placements that did not)."""

from __future__ import annotations

import dataclasses

import pytest

from polyrec.models.config import mlperf_dcnv2
from polyrec.planner import PlanConstraints, make_plan, parse_fleet
from polyrec.planner import fitting, no_fit
from polyrec.planner.enumerate import STRATEGIES, strategy_splits
from polyrec.planner.estimate import Estimator
from polyrec.planner.shard_cost import shard_loads
from polyrec.planner.partition import Storage, within_budgets
from polyrec.planner.types import DenseSpec, ModelSpec, TablePlan, TableSpec, model_spec_from_config

MLPERF = model_spec_from_config(mlperf_dcnv2())
FP32_HBM = PlanConstraints(weight_dtypes=("fp32",), allow_host_cache=False)


def storage_of(model: ModelSpec, weight_dtype: str) -> dict[str, Storage]:
    return {t.name: Storage(weight_dtype=weight_dtype, optimizer="rowwise_adagrad") for t in model.tables}


def even_share_fits(est: Estimator, splits, storage, batch: int) -> bool:
    """Whether the budget of an even share of the lookups places the shards where the estimator fits them."""
    budgets = within_budgets(no_fit.rank_budgets(est, batch, storage))
    placed = fitting.placement(est.model, splits, storage, est, batch, budgets)
    return placed is not None and est.memory_fits(est.memory(placed.tables, batch))


@pytest.mark.parametrize("fleet, batch", [("H100x4", 393216), ("A100x2", 163840), ("H100x8", 458752)])
def test_places_what_an_even_share_refused(fleet, batch):
    est = Estimator(MLPERF, parse_fleet(fleet))
    storage = storage_of(MLPERF, "fp32")
    gained = []
    for strategy in STRATEGIES:
        splits = strategy_splits(MLPERF, strategy, est.fleet.world_size, FP32_HBM.shardings)
        placed = fitting.placement(MLPERF, splits, storage, est, batch) if splits else None
        if placed is not None and not even_share_fits(est, splits, storage, batch):
            assert est.memory_fits(est.memory(placed.tables, batch)), strategy
            gained.append(strategy)
    assert gained


@pytest.mark.parametrize("fleet", ["H100x2", "H100x3", "H200x2", "A100x4", "MI300Xx2", "H100x8"])
@pytest.mark.parametrize("weight_dtype", ["fp32", "fp16"])
def test_every_placement_fits_and_none_is_lost(fleet, weight_dtype):
    """Over batches up to and past where the tables stop fitting: whatever the partitioner places, the estimator
    fits; whatever the even-share budget placed and the estimator fitted, the partitioner places too."""
    est = Estimator(MLPERF, parse_fleet(fleet))
    storage = storage_of(MLPERF, weight_dtype)
    for strategy in STRATEGIES:
        splits = strategy_splits(MLPERF, strategy, est.fleet.world_size, FP32_HBM.shardings)
        for batch in (8192, 65536, 163840, 327680, 524288, 786432):
            placed = fitting.placement(MLPERF, splits, storage, est, batch) if splits else None
            if placed is not None:
                assert est.memory_fits(est.memory(placed.tables, batch)), (strategy, batch)
            elif splits:
                assert not even_share_fits(est, splits, storage, batch), (strategy, batch)


def test_largest_batch_is_one_the_even_share_refused():
    """MLPerf in fp32 on 8 H100s: the largest batch per GPU that fits is one at which no sharding fitted by the
    even-share budget (619,114 per GPU before; the estimator fits more on the rank given the 100-hot table)."""
    fleet = parse_fleet("H100x8")
    largest = fitting.largest_batch(MLPERF, fleet, FP32_HBM, 1 << 21)
    assert make_plan(MLPERF, fleet, dataclasses.replace(FP32_HBM, batch_per_gpu=largest)).fits
    assert not fitting.fits(MLPERF, fleet, dataclasses.replace(FP32_HBM, batch_per_gpu=largest + 1))
    est = Estimator(MLPERF, fleet)
    storage = storage_of(MLPERF, "fp32")
    assert not any(even_share_fits(est, splits, storage, largest) for s in STRATEGIES
                   if (splits := strategy_splits(MLPERF, s, 8, FP32_HBM.shardings)))


def two_tables() -> ModelSpec:
    dense = DenseSpec(num_dense=13, bottom_mlp=(64, 128), top_mlp=(64, 1), interaction="dot")
    return ModelSpec(name="two", tables=tuple(TableSpec(name=f"t{i}", rows=10**6, dim=128, pooling=4.0)
                                              for i in range(2)), dense=dense)


def table_wise_on_rank_0(model: ModelSpec, est: Estimator, batch: int):
    plans = [TablePlan(table=t.name, sharding="table_wise", ranks=(0,)) for t in model.tables]
    return shard_loads(model, plans, batch, est.fleet.world_size)


@pytest.mark.parametrize("fleet", ["H200x1", "H200x2"])
def test_a_rank_peak_never_falls_as_shards_are_added(fleet):
    """The partitioner checks each rank with the shard it adds; that covers the rank's earlier shards only if a
    peak never falls as shards are added (their rows aside). On one GPU it fell once: a rank with some of the tables counted the
    all-to-all's buffer of its samples' features, which one GPU never has, and dropped it with the last table."""
    model = two_tables()
    est = Estimator(model, parse_fleet(fleet))
    loads = table_wise_on_rank_0(model, est, 4096)
    memory = [est.rank_memory(0, loads[:k], 4096) for k in range(len(loads) + 1)]
    beside_tables = [m.activations + m.workspace for m in memory]
    assert beside_tables == sorted(beside_tables)


def test_the_exchanged_features_count_on_every_rank_of_several():
    """On two GPUs rank 0 holds the exchanged features of its own 4096 samples (two tables of 128) besides its
    pooled outputs for all 8192: they went uncounted where the two were the same size (one table of two)."""
    model, batch = two_tables(), 4096
    est = Estimator(model, parse_fleet("H200x2"))
    (t0, _) = table_wise_on_rank_0(model, est, batch)
    lookups, bags, pooled = 2 * batch * 4, 2 * batch, 2 * batch * 128
    by_hand = (8 * (lookups + bags + 1) + 2 * pooled  # int64 ids and offsets, bf16 pooled outputs
               + 2 * batch * 256 + 4 * batch * 14)  # bf16 exchanged features, fp32 dense inputs and labels
    peak, _ = est.backward_peak("H200", {("fp32", "rowwise_adagrad"): float(lookups)}, 128, pooled, batch)
    assert est.rank_memory(0, [t0], batch).activations == by_hand + peak
