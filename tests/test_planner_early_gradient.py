"""Planner, several ranks: the embedding gradient's all-to-all starting inside the dense backward
(DLRM-DCNv2), priced from the ops the backward runs after the cross network's input gradient is final."""

from __future__ import annotations

import pytest

from polyrec.hardware.catalog import get_device
from polyrec.kernels import gemm_select
from polyrec.models.config import dlrm_criteo_kaggle, mlperf_dcnv2
from polyrec.planner import parse_fleet
from polyrec.perfmodel.step import NCCL_CONTENTION, beside
from polyrec.planner.estimate import Estimator, runs_after_cross_input_grad
from polyrec.planner.ops import COLUMN_SUM_S, MIN_KERNEL_S, dense_inventory
from polyrec.planner.shard_cost import shard_loads
from polyrec.planner.types import TablePlan, model_spec_from_config

MLPERF = model_spec_from_config(mlperf_dcnv2(), index_distribution="log_uniform")
BATCH = 65536


def _table_wise(model, world: int) -> list[TablePlan]:
    return [TablePlan(table=t.name, sharding="table_wise", ranks=(i % world,)) for i, t in enumerate(model.tables)]


def test_the_tail_is_layer_0s_weight_gradients_and_the_bottom_mlp():
    ops = dense_inventory(MLPERF, 64, 2).ops
    gemms = {op.name for op in ops if op.gemm is not None and runs_after_cross_input_grad(op)}
    assert gemms == {"cross.0.u.wgrad", "cross.0.v.wgrad", "bottom.0.wgrad", "bottom.1.dgrad", "bottom.1.wgrad",
                     "bottom.2.dgrad", "bottom.2.wgrad"}  # bottom.0 has no input gradient
    others = {op.name for op in ops if op.gemm is None and runs_after_cross_input_grad(op)}
    assert {f"bottom.{i}.relu_bias_grad" for i in range(3)} <= others
    assert not any(n.startswith("cross.") for n in others)  # the masters' gradients need no cast
    assert not any(n.startswith("top.") for n in others)
    assert not any(runs_after_cross_input_grad(op) for op in ops if op.phase == "fwd")


def test_the_tail_is_priced_as_its_ops():
    est = Estimator(MLPERF, parse_fleet("H200x2"))
    dense = est.dense_seconds("H200", BATCH)
    spec, copy = get_device("H200"), est.ceilings["H200"].copy_bandwidth.value
    by_hand = 0.0
    for op in dense_inventory(MLPERF, BATCH, 2).ops:
        if not runs_after_cross_input_grad(op):
            continue
        if op.gemm is None:  # the tail's memory ops are vector-rate casts and ReLU passes
            assert op.rate == "vector"
            by_hand += (max(op.bytes / copy, MIN_KERNEL_S) if op.bytes else 0.0) + op.column_sums * COLUMN_SUM_S
        else:
            choice = gemm_select.select_gemm(op.gemm.m, op.gemm.n, op.gemm.k, "bf16", spec, epilogue="none")
            by_hand += choice.gpu_seconds
    assert dense.after_input_grad_s == pytest.approx(by_hand, rel=1e-12)
    assert 0 < dense.after_input_grad_s < 0.2 * dense.bwd_s


def test_mlperf_on_two_ranks_hides_the_tail_under_the_gradient_exchange_instead_of_the_optimizer(monkeypatch):
    est = Estimator(MLPERF, parse_fleet("H200x2"))
    plans = _table_wise(MLPERF, 2)
    now = est.evaluate(plans, BATCH).step
    dense = est.dense_seconds("H200", BATCH)
    grad_a2a = est.collective_seconds(shard_loads(MLPERF, plans, BATCH, 2), BATCH)[2]
    monkeypatch.setattr(Estimator, "gradient_tail", lambda self, tail: None)  # the exchange after the backward
    before = Estimator(MLPERF, parse_fleet("H200x2")).evaluate(plans, BATCH).step
    tail, opt, c = dense.after_input_grad_s, dense.optimizer_s, NCCL_CONTENTION
    # NCCL's exchange slows the compute beside it (perfmodel.step.beside): the tail's GEMMs, else the optimizer
    gained = beside(grad_a2a, tail, c.compute_bound) - beside(grad_a2a, opt, c.memory_bound)
    assert gained > 0
    assert before.total_s - now.total_s == pytest.approx(gained, rel=1e-9)
    assert now.overlap_s - before.overlap_s == pytest.approx(gained, rel=1e-9)


def test_no_early_exchange_with_the_dot_interaction_or_on_one_rank():
    kaggle = model_spec_from_config(dlrm_criteo_kaggle())
    assert Estimator(kaggle, parse_fleet("H200x2")).gradient_tail([1e-3, 1e-3]) is None
    assert Estimator(MLPERF, parse_fleet("H200")).gradient_tail([1e-3]) is None
    assert Estimator(MLPERF, parse_fleet("H200x2")).gradient_tail([1e-3, 2e-3]) == [1e-3, 2e-3]
