"""The planner's op inventory, memory peak, host-launch model and link calibration, on hand-computed cases."""

from __future__ import annotations

import math
import random

import pytest

from polyrec.models.config import preset
from polyrec.perfmodel.collectives import Link, all_reduce_time, all_to_all_time
from polyrec.perfmodel.step import StepParts, step_time
from polyrec.planner import memory as mem
from polyrec.planner import model_spec_from_config
from polyrec.planner.comms import CollectiveSample, fit_link
from polyrec.planner import host
from polyrec.planner.host import HostCosts, Launches, gemm_launches, host_costs
from polyrec.planner.ops import RATE_CLASSES, LayerMemory, activation_peak_per_sample, dense_inventory


def _spec(name: str):
    return model_spec_from_config(preset(name).with_capped_rows(1000))


def test_inventory_issues_the_ops_of_the_autograd_layers():
    """MLPerf DCN-v2: one fused ReLU-mask + bias-sum pass per ReLU layer (7), torch's column sum for
    the last linear, and
    the cross network (polyrec.kernels.dcn): 2 forward and 4 backward GEMMs per layer (the projection
    dgrad priced with the "residual" epilogue), a cross pass in the forward and a CrossGrad pass in the
    backward over the kept product, V's transposed copy for the projection dgrad, and no other
    elementwise op of its own."""
    inv = dense_inventory(_spec("mlperf-dcnv2"), 64, 2)
    names = [op.name for op in inv.ops]
    assert sum(n.endswith(".relu_bias_grad") for n in names) == 7  # the ReLU layers
    assert [n for n in names if n.endswith(".bias_grad") and not n.startswith("cross")] == ["top.4.bias_grad"]
    relu = next(op for op in inv.ops if op.name == "top.0.relu_bias_grad")
    assert relu.bytes == 3 * 64 * 1024 * 2 + 2 * (64 / 256) * 1024 * 4 and relu.triton_ops == 1  # grad, y, out; partials
    cross = [op for op in inv.ops if op.name.startswith("cross.") and op.gemm is None and op.bytes > 0
             and "cast" not in op.name]
    assert sorted({op.name.split(".")[-1] for op in cross}) == ["cat", "cross_grad_pass", "cross_pass", "transpose"]
    transposes = [op for op in cross if op.name.endswith(".transpose")]  # V_l's K-major copy for dlow V + G
    assert len(transposes) == 3 and all(op.bytes == 2 * 512 * 3456 * 2 for op in transposes)
    passes = [op for op in cross if op.name.endswith("_pass")]
    assert len(passes) == 6 and all(op.triton_ops == 1 for op in passes)
    # the first layer of the backward writes x0's gradient without reading it: 5 tensors, not 6
    assert sorted(op.bytes / (64 * 3456 * 2) for op in passes) == [4, 4, 4, 5, 6, 6]
    gemms = [op for op in inv.ops if op.gemm is not None]
    # 3 bottom (the first without dgrad) + 3 cross x 6 + 5 top, fwd/dgrad/wgrad
    assert len(gemms) == (3 * 3 - 1) + 3 * 6 + 5 * 3
    assert {g.gemm.epilogue for g in gemms if g.name.endswith(".product")} == {"none"}
    assert {g.gemm.epilogue for g in gemms if g.name.endswith("v.dgrad")} == {"residual"}
    # the library adds every layer's residual in place: the network's own buffer, and in the top layer
    # the incoming gradient DLRM gives up (polyrec.kernels.dcn's owns_output_grad)
    assert [g.gemm.library_adds_residual for g in gemms if g.name.endswith("v.dgrad")] == [True, True, True]


def test_x0_in_the_lookup_buffer_copies_and_keeps_only_the_bottom_columns():
    """One GPU: the lookup writes the pooled rows into x0's buffer (``x0_in_lookup``), so the cat copies
    the bottom MLP's [B, D] only and x0 keeps D values a sample beyond the pooled output; the rest of
    the inventory is the same."""
    spec = _spec("mlperf-dcnv2")
    cat, shared = dense_inventory(spec, 64, 2), dense_inventory(spec, 64, 2, True)
    op = {i.name: i for i in cat.ops}["cross.cat"]
    op_shared = {i.name: i for i in shared.ops}["cross.cat"]
    assert op.bytes == 2 * 64 * 3456 * 2 and op_shared.bytes == 2 * 64 * 128 * 2
    x0 = {lm.name: lm for lm in cat.layers}["cross.x0"]
    x0_shared = {lm.name: lm for lm in shared.layers}["cross.x0"]
    assert x0.saved == 3456 * 2 and x0_shared.saved == 128 * 2
    assert [o.name for o in cat.ops] == [o.name for o in shared.ops]


def test_elementwise_bytes_scale_with_batch_and_dtype():
    spec = _spec("dcnv2-small")
    small, big = dense_inventory(spec, 128, 2), dense_inventory(spec, 256, 2)
    wide = dense_inventory(spec, 128, 4)
    weight_sized = ("cast", "pad_w", "transpose")  # a weight's copies do not scale with the batch
    by = lambda inv: {op.name: op.bytes for op in inv.ops  # noqa: E731
                      if op.gemm is None and not any(w in op.name for w in weight_sized)}
    for name, b in by(small).items():
        assert by(big)[name] == pytest.approx(2 * b)
        assert by(wide)[name] >= b


def test_activation_peak_walks_the_backward():
    """Two layers: forward keeps 10 + 20; layer 1's backward needs 5 more (peak 35); layer 0's
    backward, after layer 1 freed its 20, needs 8 with a carried 3 (21)."""
    layers = (LayerMemory(name="a", saved=10, backward_peak=8), LayerMemory(name="b", saved=20, backward_peak=5,
                                                                            carried=3))
    from polyrec.planner.ops import DenseInventory

    assert activation_peak_per_sample(DenseInventory(ops=(), layers=layers, autograd_nodes=0)) == 35
    layers = (LayerMemory(name="a", saved=10, backward_peak=30), LayerMemory(name="b", saved=20, backward_peak=5,
                                                                             carried=3, freed_early=20))
    assert activation_peak_per_sample(DenseInventory(ops=(), layers=layers, autograd_nodes=0)) == 10 + 30 + 3


def test_tbe_workspace_by_hand():
    # keys 4 + sources 4 + sorted keys 4 + permutation 8 + iota 8 + radix buffers 4 + 8 + offsets 4 = 44 B
    # per lookup, + ceil(1000 / 8) tiles x 2 partial rows x 128 fp32
    assert mem.tbe_workspace_bytes(lookups=1000, block_d=128, tile=8) == 1000 * 44 + 125 * 2 * 128 * 4
    assert mem.tbe_workspace_bytes(lookups=1000, block_d=128, tile=8, wide_keys=True) == 1000 * 60 + 125 * 1024


def test_dense_activation_bytes_grow_linearly_with_batch():
    spec = _spec("mlperf-dcnv2")
    a1, ws = mem.dense_activation_bytes(spec, 1024, "bf16")
    a2, _ = mem.dense_activation_bytes(spec, 2048, "bf16")
    casts = 2 * sum(m.params for m in __import__("polyrec.planner.dense", fromlist=["x"]).dense_matmuls(spec))
    assert a2 - casts == pytest.approx(2 * (a1 - casts))
    assert ws == mem.BLAS_WORKSPACE_BYTES


def test_gemm_launches_follow_the_backend():
    assert gemm_launches("triton", 1, "bias_relu") == Launches(triton=1, torch_ops=2)
    assert gemm_launches("triton", 4, "none") == Launches(triton=2, torch_ops=3)
    assert gemm_launches("library", 1, "none") == Launches(triton=0, torch_ops=2)  # torch.matmul + wrapper
    assert gemm_launches("library", 1, "cross") == Launches(triton=1, torch_ops=2)  # + the fused pass
    assert gemm_launches("library", 1, "cross_grad") == Launches(triton=1, torch_ops=3)  # + the bias sum


def test_tbe_launches_count_the_selected_merge_levels():
    """The backward issues a permute (for a lane update) and the update launches per module, then the merge levels
    of the config its selector picks by device time: MLPerf DLRM-DCNv2 on one H200 at batch 65536 (one fp32
    module, 14.02M ids, bf16 output gradient, 8-tile lane programs): one tile per merge program, 9 levels (the
    count this replaced took one-tile lane programs: 11)."""
    from polyrec.planner import parse_fleet
    from polyrec.planner.estimate import Estimator
    from polyrec.planner.shard_cost import module_key, shard_loads
    from polyrec.planner.types import TablePlan

    # two modules: forward lookup + ends check each; backward a permute each (each has a lane update), 1 and 3
    # update launches (one module of three dim groups), 4 + 9 merge levels
    assert host.tbe_launches([4, 9], [["lane"], ["scan", "lane", "lane"]]) == (
        Launches(triton=2 * 2, torch_ops=2 * host.TBE_FWD_TORCH_OPS),
        Launches(triton=2 + 4 + 13, torch_ops=2 * host.TBE_BWD_TORCH_OPS))
    # a module whose every update launch is the scan update's has no permute
    assert host.tbe_launches([2], [["scan"]])[1] == Launches(triton=1 + 2, torch_ops=host.TBE_BWD_TORCH_OPS)
    assert host.tbe_launches([], []) == (Launches(), Launches())
    spec = model_spec_from_config(preset("mlperf-dcnv2"))
    est = Estimator(spec, parse_fleet("H200"))
    plans = [TablePlan(table=t.name, sharding="table_wise", ranks=(0,)) for t in spec.tables]
    loads = shard_loads(spec, plans, 65536, 1)
    assert sum(s.accesses for s in loads) == 214 * 65536
    assert est.tbe_merge_levels("H200", module_key(loads)) == 9


def test_a_host_bound_step_is_priced_with_the_merge_levels_the_trainer_then_runs():
    """Where the step is predicted host-bound (dcnv2-small on one H200), the trainer's embedding backward
    selects with the merge levels' host issue (fewer levels): the planner's host time counts those; a
    device-bound step (MLPerf DLRM-DCNv2 at 65536) keeps the device-time choice's count."""
    from polyrec.planner import parse_fleet
    from polyrec.planner.estimate import Estimator
    from polyrec.planner.shard_cost import module_key, shard_loads
    from polyrec.planner.types import TablePlan

    for name, batch, bound in (("dcnv2-small", 16384, True), ("mlperf-dcnv2", 65536, False)):
        spec = model_spec_from_config(preset(name))
        est = Estimator(spec, parse_fleet("H200"))
        plans = [TablePlan(table=t.name, sharding="table_wise", ranks=(0,)) for t in spec.tables]
        loads = shard_loads(spec, plans, batch, 1)
        dense = est.dense_seconds("H200", batch)
        step = est.evaluate(plans, batch).step
        key = module_key(loads)
        assert est.tbe_merge_levels("H200", key, True) < est.tbe_merge_levels("H200", key)
        assert (step.host_s > step.total_s - step.host_excess_s) is bound
        assert step.host_s == pytest.approx(est.host_seconds(0, loads, dense, host_bound=bound))
        assert (step.host_s < est.host_seconds(0, loads, dense)) is bound


def test_a_step_host_bound_only_with_the_device_time_selection_is_priced_with_the_one_that_runs(monkeypatch):
    """Host 10% above the device time with the updates selected by device time, 10% below with the
    host-bound selection: the step is priced device-bound at the latter's host time, and says that its
    updates are to select host-bound (``StepTime.host_bound``: what the trainer then runs)."""
    from polyrec.planner import parse_fleet
    from polyrec.planner.estimate import Estimator
    from polyrec.planner.types import TablePlan

    spec = model_spec_from_config(preset("mlperf-dcnv2"))
    est = Estimator(spec, parse_fleet("H200"))
    plans = [TablePlan(table=t.name, sharding="table_wise", ranks=(0,)) for t in spec.tables]
    before = est.evaluate(plans, 65536).step
    device_s = before.total_s - before.host_excess_s
    assert not before.host_bound and before.host_s < device_s
    monkeypatch.setattr(Estimator, "host_seconds",
                        lambda self, rank, loads, dense, host_bound=False: device_s * (0.9 if host_bound else 1.1))
    step = est.evaluate(plans, 65536).step
    assert step.host_bound and step.host_s == pytest.approx(0.9 * device_s)
    assert step.host_excess_s == 0 and step.total_s == pytest.approx(device_s)


def test_host_costs_are_the_fitted_ones_and_say_so():
    c = host_costs()
    assert (c.triton_launch_s, c.torch_op_s) == (host.FITTED_TRITON_LAUNCH_S, host.FITTED_TORCH_OP_S)
    assert c.origin.startswith("calibrated: fitted")
    assert Launches(triton=3, torch_ops=10).seconds(HostCosts(triton_launch_s=1.0, torch_op_s=0.5, step_fixed_s=0,
                                                              origin="")) == 8.0


def test_host_costs_take_the_scale_measured_on_this_host():
    """A stored host probe scales every fitted cost and says so; another device's store is not used."""
    from polyrec.hardware.calibrate import save_calibration

    save_calibration("H200", {"device": "H200", "host_scale": {"value": 1.25, "date": "2026-11-30"}})
    c = host_costs("H200")
    assert c.triton_launch_s == pytest.approx(1.25 * host.FITTED_TRITON_LAUNCH_S)
    assert c.torch_op_s == pytest.approx(1.25 * host.FITTED_TORCH_OP_S)
    assert c.step_fixed_s == pytest.approx(1.25 * host.DEFAULT_STEP_FIXED_S)
    assert "x 1.250 measured on this host 2026-11-30" in c.origin
    assert host_costs("H100").triton_launch_s == host.FITTED_TRITON_LAUNCH_S


def test_step_takes_the_longer_of_host_and_device():
    kw = dict(embedding_fwd_s=[1e-3], embedding_bwd_s=[2e-3], dense_fwd_s=[1e-3], dense_bwd_s=[1e-3],
              dense_optimizer_s=[0.0], other_s=[0.0], overlap="none")
    assert step_time(StepParts(**kw, host_s=[3e-3])).total_s == pytest.approx(5e-3)
    slow = step_time(StepParts(**kw, host_s=[9e-3]))
    assert slow.total_s == pytest.approx(9e-3) and slow.host_excess_s == pytest.approx(4e-3) and slow.host_s == 9e-3


@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_fit_link_recovers_a_known_link(ranks):
    rng = random.Random(ranks)
    truth = Link(name="nvlink", alpha_s=rng.uniform(1e-6, 8e-6), bandwidth=rng.uniform(1e11, 5e11), topology="switch",
                 overhead_s=rng.uniform(2e-5, 8e-5))
    samples = [CollectiveSample(collective="all_to_all", nbytes=n, seconds=all_to_all_time(n, ranks, truth))
               for n in (8 << 20, 256 << 20)]
    samples += [CollectiveSample(collective="all_reduce", nbytes=n, seconds=all_reduce_time(n, ranks, truth))
                for n in (4 << 20, 256 << 20)]
    fit = fit_link(samples, ranks)
    assert fit["bandwidth"] == pytest.approx(truth.bandwidth, rel=1e-6)
    assert fit["overhead_s"] == pytest.approx(truth.overhead_s, rel=1e-6)
    assert fit["alpha_s"] == pytest.approx(truth.alpha_s, rel=1e-6)


def test_fit_link_weighs_samples_by_their_time():
    # the largest messages 5% slower per byte than the line through the small ones: fitted in
    # absolute seconds they would set the per-call overhead; relative residuals keep the small
    # messages, which pay almost only that overhead, within a few percent
    truth = Link(name="nvlink", alpha_s=0.0, bandwidth=2.9e11, topology="switch", overhead_s=60e-6)
    sizes = {"all_to_all": (8 << 20, 64 << 20, 256 << 20), "all_reduce": (2 << 20, 32 << 20, 256 << 20)}
    timed = {"all_to_all": all_to_all_time, "all_reduce": all_reduce_time}
    samples = [CollectiveSample(collective=k, nbytes=n, seconds=timed[k](n, 2, truth) * (1.05 if n == 256 << 20 else 1))
               for k, ns in sizes.items() for n in ns]
    fit = fit_link(samples, 2)
    link = Link(name="nvlink", alpha_s=fit["alpha_s"], bandwidth=fit["bandwidth"], topology="switch",
                overhead_s=fit["overhead_s"])
    for n in (1 << 20, 4 << 20):
        assert all_reduce_time(n, 2, link) == pytest.approx(all_reduce_time(n, 2, truth), rel=0.03)
    assert all_to_all_time(16 << 20, 2, link) == pytest.approx(all_to_all_time(16 << 20, 2, truth), rel=0.03)
    with pytest.raises(ValueError, match="took 0"):
        fit_link(samples + [CollectiveSample(collective="all_reduce", nbytes=1e6, seconds=0.0)], 2)


def test_fit_link_rejects_what_cannot_determine_it():
    one_kind = [CollectiveSample(collective="all_to_all", nbytes=n, seconds=1e-4 + n / 3e11) for n in (1e6, 1e8)]
    with pytest.raises(ValueError, match="all-to-all and all-reduce"):
        fit_link(one_kind, 2)
    flat = [CollectiveSample(collective=k, nbytes=n, seconds=1e-4) for k in ("all_to_all", "all_reduce")
            for n in (1e6, 1e8)]
    with pytest.raises(ValueError):
        fit_link(flat, 2)
    assert math.isfinite(fit_link(one_kind + [CollectiveSample(collective="all_reduce", nbytes=1e6, seconds=2e-4),
                                             CollectiveSample(collective="all_reduce", nbytes=1e8, seconds=9e-4)],
                                  2)["bandwidth"])


def test_step_host_seconds_add_the_fixed_part_to_the_launches():
    costs = HostCosts(triton_launch_s=1.0, torch_op_s=0.5, step_fixed_s=2.0, origin="")
    assert Launches(triton=3, torch_ops=10).step_seconds(costs) == pytest.approx(10.0)


def test_the_cross_passes_and_the_bias_column_sums_are_priced_as_profiled():
    """The cross network's epilogue passes run at their own rate class, below the copy rate; the step
    issues one torch column sum per biased ReLU layer and per cross layer (10 ``reduce_kernel`` calls
    in the MLPerf step's profile), and no embedding-gradient copy."""
    inv = dense_inventory(_spec("mlperf-dcnv2"), 64, 2)
    assert {op.rate for op in inv.ops if op.name.endswith("_pass")} == {"pass"}
    assert RATE_CLASSES["pass"] < RATE_CLASSES["vector"]
    assert sum(op.column_sums for op in inv.ops) == 10
    assert not any("emb_grad" in op.name for op in inv.ops)


def test_only_the_dense_features_layer_is_padded_to_aligned_rows():
    """MLPerf's 13 dense features: bottom.0's GEMMs see K = 16 (polyrec.models.layers.pad_reduction)
    and its input (bf16) and weight (the fp32 master) copies are priced; no other layer is padded (367-wide inputs with an
    input gradient stay as they are)."""
    inv = dense_inventory(_spec("mlperf-dcnv2"), 64, 2)
    shapes = {op.gemm.op: op.gemm for op in inv.ops if op.gemm is not None}
    assert shapes["bottom.0.fwd"].k == 16 and shapes["bottom.0.wgrad"].n == 16
    pads = {op.name: op.bytes for op in inv.ops if ".pad_" in op.name}
    assert pads == {"bottom.0.pad_x": 64 * (13 + 16) * 2, "bottom.0.pad_w": 512 * (13 + 16) * 4}
    kaggle = dense_inventory(_spec("dlrm-criteo-kaggle"), 64, 2)
    assert [op.name for op in kaggle.ops if ".pad_" in op.name] == ["bottom.0.pad_x", "bottom.0.pad_w"]
    top0 = next(op.gemm for op in kaggle.ops if op.gemm is not None and op.gemm.op == "top.0.fwd")
    assert top0.k % 16 != 0  # its input has a gradient: not padded


def test_kept_copies_leave_only_the_padded_weight_to_cast():
    """bf16 compute: every master weight and bias is cast each step (25 on MLPerf DLRM-DCNv2), unless the
    dense optimizer keeps their copies (``kept_copies``, FusedAdagrad): then only bottom.0's zero-padded
    weight, a new tensor each step, and the dense features; fp32 compute casts nothing."""
    spec = _spec("mlperf-dcnv2")
    casts = [op.name for op in dense_inventory(spec, 64, 2).ops if ".cast" in op.name]
    assert len(casts) == 1 + 25 and "input.cast" in casts
    kept = [op.name for op in dense_inventory(spec, 64, 2, True, kept_copies=True).ops if ".cast" in op.name]
    assert kept == ["input.cast", "bottom.0.cast_w"]
    assert not [op for op in dense_inventory(spec, 64, 4, kept_copies=True).ops if ".cast" in op.name]
