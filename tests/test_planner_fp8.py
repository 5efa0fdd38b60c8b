"""The planner's fp8 dense layers (``dense_dtype="fp8"``): the op inventory against what the fp8 layers run,
and the step they price."""

from __future__ import annotations

from unittest import mock

import pytest
import torch
import torch.nn.functional as F

from polyrec.kernels import fp8_dense
from polyrec.models import DLRM, ModelConfig, preset
from polyrec.planner import PlanConstraints, make_plan, model_spec_from_config, parse_fleet
from polyrec.planner.estimate import Estimator
from polyrec.planner.ops import FP8_OP_HOST_TORCH_OPS, RATE_CLASSES, dense_inventory

#: DLRM-DCNv2 and DLRM with fp8-aligned sizes: D = 4 x 16, rank 16; the dot interaction's top MLP input
#: (16 + 4 x 3 / 2 = 22 columns) is not aligned, so that MLP stays bf16.
TINY = {interaction: ModelConfig(name=f"tiny-{interaction}", num_dense=3, table_rows=(11, 5, 17), embedding_dim=16,
                                 multi_hot=(2, 1, 3), bottom_mlp=(32, 16), top_mlp=(32, 16, 1), interaction=interaction,
                                 dcn_layers=2 if interaction == "dcnv2" else 0,
                                 dcn_rank=16 if interaction == "dcnv2" else 0)
        for interaction in ("dcnv2", "dot")}


def _runtime_calls(config: ModelConfig, batch: int) -> tuple[int, int]:
    """(fp8 casts, fp8 GEMMs) of one training step of the dense half once every role has a history."""
    model = DLRM(config, dense_backend="polyrec", dense_fp8=True, seed=5)
    counts = {"cast": 0, "gemm": 0}

    def counting(name, fn):
        def wrapped(*args, **kwargs):
            counts[name] += 1
            return fn(*args, **kwargs)
        return wrapped

    gen = torch.Generator().manual_seed(6)
    for step in range(2):
        dense = torch.rand(batch, config.num_dense, generator=gen)
        emb = torch.randn(batch, len(config.table_rows), config.embedding_dim, generator=gen).requires_grad_()
        labels = torch.randint(0, 2, (batch,), generator=gen).float()
        counts.update(cast=0, gemm=0)
        with mock.patch.multiple(fp8_dense, cast_fp8=counting("cast", fp8_dense.cast_fp8),
                                 scaled_mm=counting("gemm", fp8_dense.scaled_mm)):
            logits = model.dense_forward(dense, emb, torch.bfloat16)
            F.binary_cross_entropy_with_logits(logits, labels).backward()
    return counts["cast"], counts["gemm"]


@pytest.mark.parametrize("interaction", ["dcnv2", "dot"])
def test_the_fp8_inventory_counts_the_casts_and_gemms_the_layers_run(interaction):
    """Steady state (every role with a history): each ``cast_fp8`` the layers call is one cast op, each
    ``scaled_mm`` one fp8 GEMM of the inventory."""
    config, batch = TINY[interaction], 32
    inv = dense_inventory(model_spec_from_config(config), batch, 2, fp8=True)
    casts = [op for op in inv.ops if op.rate == "fp8_cast"]
    gemms = [op for op in inv.ops if op.gemm is not None and op.gemm.fp8]
    assert (len(casts), len(gemms)) == _runtime_calls(config, batch)


def test_mlperf_fp8_inventory_is_the_profiled_steps():
    """MLPerf DLRM-DCNv2 at 65536 on one GPU: 27 casts and 9 torch transposes of masters' copies, as the
    H200 profile of the fp8 step counted (``fp8_cast_kernel`` 27, ``float8_copy`` 9;
    benchmarks/results/top_input_copies_2026-12-04/profile_after); 35 of the 41 GEMMs in fp8 (the three
    residual ``dlow V + G`` and the last top layer's three stay bf16); a batch that is not a multiple of
    16 runs no fp8 op."""
    spec = model_spec_from_config(preset("mlperf-dcnv2"))
    inv = dense_inventory(spec, 65536, 2, True, True, fp8=True)
    assert sum(op.rate == "fp8_cast" for op in inv.ops) == 27
    assert sum(op.name.endswith("transpose_w_fp8") for op in inv.ops) == 9
    gemms = [op.gemm for op in inv.ops if op.gemm is not None]
    assert (len(gemms), sum(g.fp8 for g in gemms)) == (41, 35)
    fp8_ops = [op for op in inv.ops if op.rate == "fp8_cast" or "transpose_w_fp8" in op.name
               or (op.gemm is not None and op.gemm.fp8)]
    assert len(fp8_ops) == 71 and all(op.torch_ops >= 1 + FP8_OP_HOST_TORCH_OPS for op in fp8_ops)
    assert not any(g.fp8 for g in gemms if g.op.endswith(("v.dgrad",)) or g.op.startswith("top.4"))
    odd = dense_inventory(spec, 65528, 2, True, True, fp8=True)
    assert not any(op.rate.startswith("fp8") or (op.gemm is not None and op.gemm.fp8) for op in odd.ops)
    with pytest.raises(ValueError, match="16-bit"):
        dense_inventory(spec, 64, 4, fp8=True)


def test_fp8_prices_less_gemm_time_and_more_copies_than_bf16():
    """At the same ceilings, the fp8 step's GEMMs take less device time than bf16's and its casts and copy
    passes more; the plan says fp8 and a device without fp8 matrices is refused by name."""
    spec = model_spec_from_config(preset("mlperf-dcnv2"))
    fleet = parse_fleet("H200")
    times = {d: Estimator(spec, fleet, dense_dtype=d).dense_op_times("H200", 65536) for d in ("bf16", "fp8")}
    gemm = {d: sum(t.seconds for t in ts if t.op.gemm is not None) for d, ts in times.items()}
    other = {d: sum(t.seconds for t in ts if t.op.gemm is None) for d, ts in times.items()}
    assert gemm["fp8"] < 0.75 * gemm["bf16"] and other["fp8"] > other["bf16"]
    assert all(RATE_CLASSES[r] < 1 for r in ("fp8_cast", "fp8_pass", "fp8_cross_grad", "fp8_relu"))
    plan = make_plan(spec, fleet, PlanConstraints(batch_per_gpu=65536, dense_dtype="fp8", allow_host_cache=False))
    assert plan.dense_dtype == "fp8" and plan.step.total_ms > 0
    with pytest.raises(ValueError, match="A100 has no fp8"):
        Estimator(spec, parse_fleet("A100"), dense_dtype="fp8")


def test_an_fp8_plan_runs_fp8_dense_layers(tmp_path):
    """A plan priced with fp8 dense layers sets the trainer's precision to fp8 (``polyrec train --plan``)."""
    from polyrec.runtime.config import TrainConfig
    from polyrec.runtime.plan_apply import apply_plan

    config = preset("dcnv2-small").with_capped_rows(64)
    plan = make_plan(model_spec_from_config(config), parse_fleet("H200"),
                     PlanConstraints(batch_per_gpu=64, dense_dtype="fp8", allow_host_cache=False))
    path = tmp_path / "plan.json"
    path.write_text(plan.to_json())
    assert apply_plan(TrainConfig(plan=path), plan).precision == "fp8"
