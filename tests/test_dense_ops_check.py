"""benchmarks/dense_ops_check.py: its trace reading, its op keys, and the planner's dense inventory
against the calls the fused dense half really makes (CPU: the library path and torch epilogues)."""

from __future__ import annotations

import collections

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from benchmark_util import load_benchmark
from polyrec.models.config import ModelConfig
from polyrec.models.dlrm import DLRM
from polyrec.planner.estimate import Estimator
from polyrec.planner.types import model_spec_from_config, parse_fleet


@pytest.fixture(scope="module")
def check():
    return load_benchmark("dense_ops_check")


def _span(name, ts, dur, cat="gpu_user_annotation"):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur}


def test_a_range_sums_the_kernels_that_start_in_its_span(check):
    """The launch gaps inside a range are not its time; a kernel outside every range counts only in
    the total; two ranges of one key keep one entry each, in issue order."""
    trace = {"traceEvents": [
        _span("op|gemm 8x8x8 none", 10, 20), _span("op|gemm 8x8x8 none", 50, 5),
        _span("cpu range", 0, 100, "user_annotation"),
        _span("k1", 10, 5, "kernel"), _span("k2", 20, 10, "kernel"), _span("memset", 40, 2, "gpu_memset"),
        _span("k3", 50, 5, "kernel")]}
    calls, total = check.op_kernel_ms(trace)
    assert calls == {"gemm 8x8x8 none": [0.015, 0.005]}
    assert total == pytest.approx(0.022)


@pytest.mark.parametrize("kwargs, key", [
    ({}, "gemm 6x5x4 none"),
    ({"trans_b": True}, "gemm 6x4x4 none"),
    ({"bias": torch.zeros(5), "activation": "relu"}, "gemm 6x5x4 bias_relu"),
    ({"residual": torch.zeros(6, 5), "overwrite_residual": True}, "gemm 6x5x4 residual in-place"),
    ({"residual": torch.zeros(6, 5)}, "gemm 6x5x4 residual"),
])
def test_matmul_key_is_the_planners_shape(check, kwargs, key):
    b = torch.zeros(4, 4) if kwargs.get("trans_b") else torch.zeros(4, 5)
    assert check._matmul_key(torch.zeros(6, 4), b, **kwargs) == key


def test_a_transposed_a_is_read_as_k_by_m(check):
    assert check._matmul_key(torch.zeros(6, 4), torch.zeros(6, 5), trans_a=True) == "gemm 4x5x6 none"


def test_the_planner_prices_the_calls_the_dense_half_makes(check):
    """Every GEMM key, cross pass and ReLU backward of one DLRM-DCNv2 training step (polyrec's dense
    path, fused cross network) appears as often among the planner's priced ops as the step calls it."""
    config = ModelConfig(name="t", num_dense=13, table_rows=(50, 60, 70), embedding_dim=16, multi_hot=(1, 2, 3),
                         bottom_mlp=(32, 16), top_mlp=(24, 8, 1), interaction="dcnv2", dcn_layers=2, dcn_rank=8)
    batch = 12
    model = DLRM(config, embedding_backend="torch", dense_backend="polyrec", seed=0)
    dense = torch.randn(batch, config.num_dense)
    emb = torch.randn(batch, 3, 16, requires_grad=True)
    with check.op_ranges(), profile(activities=[ProfilerActivity.CPU]) as prof:
        model.dense_forward(dense, emb).sum().backward()
    called = collections.Counter(e.name[len(check.PREFIX):] for e in prof.events() if e.name.startswith(check.PREFIX))
    est = Estimator(model_spec_from_config(config), parse_fleet("H200"), dense_dtype="bf16", overlap="none")
    priced = {key: len(ops) for key, ops in check.priced_ops(est, batch).items() if key != "other"}
    assert called and dict(called) == priced
