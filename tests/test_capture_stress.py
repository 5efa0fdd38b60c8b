"""benchmarks/capture_stress.py's pieces that run without a GPU: its summary, and its baseline undoing the
warm-up's selection as captured."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from benchmark_util import load_benchmark

stress = load_benchmark("capture_stress")


def test_summary_counts_failures_and_kernels_in_capture_per_mode():
    ok, failed = {"trainer": "graphed", "error": None}, {"trainer": "graphed", "error": "RuntimeError: invalidated"}
    results = [{"mode": "code", "trainers": [ok, ok], "compiled": [], "loaded": []},
               {"mode": "baseline", "trainers": [ok, failed], "compiled": ["gemm_kernel"], "loaded": ["gemm_kernel"]},
               {"mode": "baseline", "crashed": "Segmentation fault"}]
    got = stress.summarize(results)
    assert (got["code_children"], got["code_trainers"], got["code_trainers_failed"]) == (1, 2, 0)
    assert (got["baseline_children"], got["baseline_children_crashed"], got["baseline_trainers_failed"]) == (2, 1, 1)
    assert (got["baseline_compiled_in_capture"], got["baseline_loaded_in_capture"]) == (1, 1)


def test_the_baseline_warms_up_selecting_as_an_eager_step(monkeypatch):
    import polyrec.runtime.cold_start as cold_start
    import polyrec.runtime.graphs as graphs
    from polyrec.kernels.gemm import _selects_as_captured

    monkeypatch.setattr(graphs, "selecting_as_captured", graphs.selecting_as_captured)
    monkeypatch.setattr(cold_start, "selecting_as_captured", cold_start.selecting_as_captured)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    stress.use_baseline()
    with graphs.selecting_as_captured(), cold_start.dense_selection(SimpleNamespace(graphs=SimpleNamespace(on=True))):
        assert not _selects_as_captured(SimpleNamespace(is_cuda=True))
