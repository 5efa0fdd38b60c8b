"""The trainer's CUDA-graph choice (polyrec.runtime.graphs): as asked, or by the planner's host vs
device prediction; eager where the planner does not model the run."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from polyrec.hardware.catalog import get_device
from polyrec.models import preset
from polyrec.runtime import TrainConfig, Trainer
from polyrec.runtime import graphs
from polyrec.runtime.config import resolve


def _rt(device: str = "cuda", emb: str = "polyrec", dense: str = "polyrec"):
    return SimpleNamespace(device=torch.device(device), embedding_backend=emb, dense_backend=dense,
                           compute_dtype=torch.bfloat16, dense_fp8=False)


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_a_choice_other_than_true_false_or_auto_is_refused(value):
    with pytest.raises(ValueError, match="cuda_graphs must be True, False or 'auto'"):
        resolve(TrainConfig(cuda_graphs=value, device="cpu"))


def test_graphs_asked_on_the_cpu_are_refused_and_auto_stays_eager():
    with pytest.raises(ValueError, match="needs a CUDA/ROCm GPU"):
        resolve(TrainConfig(cuda_graphs=True, device="cpu"))
    trainer = Trainer(TrainConfig(device="cpu", batch_size=64, steps=1), progress=False)
    assert trainer.graphs == graphs.GraphChoice(on=False, reason="auto: eager (no GPU)")


def _predict(host: float, graphed: float, device: float, bound: tuple[bool, bool] | None = None):
    """A planner prediction; ``bound`` (eager, graphed) where it differs from host > device (the boundary:
    host-bound by the device-time selection, device-bound by the host-bound selection's count)."""
    eager_bound, graphed_bound = bound or (host > device, graphed > device)
    return lambda *args: graphs.Prediction(host_ms=host, graphed_host_ms=graphed, device_ms=device,
                                           eager_host_bound=eager_bound, graphed_host_bound=graphed_bound)


def test_auto_follows_the_predicted_bound(monkeypatch):
    """Graphed exactly where the predicted host time of the eager step exceeds its device time; the step
    as it then runs is host-bound where its own host time (graphed or eager) exceeds the device's."""
    cfg, model = TrainConfig(), preset("dcnv2-small")
    for host, graphed, device, on, bound in ((7.0, 3.0, 2.0, True, True), (7.0, 3.0, 5.0, True, False),
                                             (5.0, 1.0, 7.0, False, False), (5.0, 1.0, 5.0, False, False)):
        monkeypatch.setattr(graphs, "predicted_ms", _predict(host, graphed, device))
        choice = graphs.choose_graphs(cfg, _rt(), model, distributed=False)
        assert choice.on is on and f"host {host:.1f} ms" in choice.reason and choice.host_bound is bound
    monkeypatch.setattr(graphs, "predicted_ms", _predict(7.0, 3.0, 5.0))
    eager = graphs.choose_graphs(dataclasses.replace(cfg, cuda_graphs=False), _rt(), model, False)
    assert eager == graphs.GraphChoice(on=False, reason="off", host_bound=True)  # asked eager: 7 ms of host
    graphed = graphs.choose_graphs(dataclasses.replace(cfg, cuda_graphs=True), _rt(), model, False)
    assert graphed == graphs.GraphChoice(on=True, reason="asked", host_bound=False)
    assert graphs.choose_graphs(dataclasses.replace(cfg, cuda_graphs=True), _rt("cpu"), model, False) == \
        graphs.GraphChoice(on=True, reason="asked", host_bound=False)  # not modelled: device time alone


def test_an_fp8_run_is_judged_by_the_planners_fp8_step():
    """The planner prices fp8 dense layers: "auto" asks it about the run's fp8 step (dense dtype "fp8"),
    a bf16 run about its bf16 step."""
    fp8 = SimpleNamespace(**{**vars(_rt()), "dense_fp8": True})
    assert graphs.planner_dtype(fp8) == "fp8"
    assert graphs.planner_dtype(SimpleNamespace(**{**vars(_rt()), "dense_fp8": False})) == "bf16"


def test_a_step_device_bound_only_with_the_host_bound_selection_runs_that_selection(monkeypatch):
    """The planner priced the eager step at 4 ms of host (the merge levels of the host-bound selection)
    against 5 ms of device, having found it host-bound with the device-time selection: it stays eager,
    and its embedding updates select as priced (host-bound), not by device time (which would put the
    host back above the device)."""
    monkeypatch.setattr(graphs, "predicted_ms", _predict(4.0, 2.0, 5.0, bound=(True, False)))
    choice = graphs.choose_graphs(TrainConfig(), _rt(), preset("dcnv2-small"), distributed=False)
    assert (choice.on, choice.host_bound) == (False, True)


@pytest.mark.parametrize("change,rt,distributed,why", [
    ({}, _rt("cpu"), False, "no GPU"), ({}, _rt(), True, "several ranks"),
    ({"pipeline": "semi-sync"}, _rt(), False, "semi-sync"), ({}, _rt(emb="torch"), False, "torch layers"),
    ({}, _rt(dense="torch"), False, "torch layers")])
def test_auto_stays_eager_where_the_planner_does_not_model_the_run(monkeypatch, change, rt, distributed, why):
    monkeypatch.setattr(graphs, "predicted_ms", lambda *args: pytest.fail("planner asked"))
    choice = graphs.choose_graphs(dataclasses.replace(TrainConfig(), **change), rt, preset("dcnv2-small"),
                                  distributed)
    assert not choice.on and why in choice.reason


def test_no_prediction_is_named_not_hidden(monkeypatch):
    def refuse(*args):
        raise ValueError("unknown device 'XPU-9'")

    monkeypatch.setattr(graphs, "predicted_ms", refuse)
    choice = graphs.choose_graphs(TrainConfig(), _rt(), preset("dcnv2-small"), False)
    assert not choice.on and "no prediction: unknown device 'XPU-9'" in choice.reason


@pytest.mark.parametrize("name,batch,row_cap,host_bound,graphed_host_bound", [
    ("mlperf-dcnv2", 16384, 4_000_000, True, False), ("dcnv2-small", 16384, None, True, True),
    ("dcnv2-small", 65536, None, True, True), ("mlperf-dcnv2", 65536, None, False, False)])
def test_the_planner_predicts_the_h200_bounds_that_were_measured(monkeypatch, name, batch, row_cap, host_bound,
                                                                 graphed_host_bound):
    """On an H200 (its catalog entry, no calibration), the eager steps measured host-bound (MLPerf
    capped and dcnv2-small at 16384: 6.9-11.6 and 6.0-7.7 ms eager against 5.6 ms graphed / less device
    time) are predicted so, and full-size MLPerf at 65536 (19.5 ms, device-bound) is not. Graphed, the
    small preset stays host-bound (2.8-3.5 ms per step against ~0.8-1.6 ms of device time) and capped
    MLPerf at 16384 becomes device-bound (5.1 ms per step, 3.8 ms of it the dense half on the GPU;
    graphs_auto_check and merge_ab_0d55bb7, 2026-12-01)."""
    h200 = get_device("H200")
    monkeypatch.setattr("polyrec.hardware.detect.detect", lambda index=0: SimpleNamespace(spec=h200))
    model = preset(name) if row_cap is None else preset(name).with_capped_rows(row_cap)
    cfg = TrainConfig(preset=name, batch_size=batch, row_cap=row_cap)
    got = graphs.predicted_ms(cfg, _rt(), model)
    assert got.host_bound(graphed=False) is host_bound, got
    assert got.host_bound(graphed=True) is graphed_host_bound, got
    assert got.graphed_host_ms < got.host_ms


def test_a_one_gpu_plan_says_when_the_trainer_will_graph():
    """`polyrec plan` names the host-bound case the trainer's auto choice graphs (one GPU only: on
    several ranks the trainer stays eager)."""
    from polyrec.planner import PlanConstraints, make_plan, model_spec_from_config, parse_fleet

    spec = model_spec_from_config(preset("dcnv2-small"))
    small = make_plan(spec, parse_fleet("H200"), PlanConstraints(batch_per_gpu=1024, weight_dtypes=("fp32",)))
    assert any("host-bound" in n and "CUDA-graphs" in n for n in small.notes)
    full = make_plan(model_spec_from_config(preset("mlperf-dcnv2")), parse_fleet("H200"),
                     PlanConstraints(batch_per_gpu=65536, weight_dtypes=("fp32",)))
    assert not any("host-bound" in n for n in full.notes)
    pair = make_plan(spec, parse_fleet("H200x2"), PlanConstraints(batch_per_gpu=1024, weight_dtypes=("fp32",)))
    assert not any("CUDA-graphs" in n for n in pair.notes)


def test_the_warm_up_selects_gemms_as_the_capture_will_forward_and_backward(monkeypatch):
    """Every warm-up pass, its backward included, selects GEMMs as the capture will, so none is first compiled
    and loaded inside the capture; after the warm-up the selection is eager's again."""
    from contextlib import nullcontext

    from polyrec.kernels.gemm import _selects_as_captured

    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: nullcontext())
    monkeypatch.setattr(torch.cuda, "Stream", lambda: None)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    on_gpu, seen = SimpleNamespace(is_cuda=True), []

    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            seen.append(("forward", _selects_as_captured(on_gpu)))
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            seen.append(("backward", _selects_as_captured(on_gpu)))
            return grad * 2

    class Loss(torch.nn.Module):
        def forward(self, x):
            return Probe.apply(x).sum()

    graphs.warm_up(Loss(), (torch.ones(3, requires_grad=True),))
    assert seen == [("forward", True), ("backward", True)] * graphs.WARMUP_PASSES
    assert not _selects_as_captured(on_gpu)
