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


def test_children_alternate_and_a_child_past_the_budget_is_skipped_with_results_kept(tmp_path, monkeypatch):
    """Each child takes 100 s here: a 250 s budget runs two (the third would end at 300 s); the file
    written lists them and the skipped ones."""
    import json
    import sys
    import time

    now = [0.0]

    def child_of_100_s(mode, cycles):
        now[0] += 100
        return {"mode": mode, "trainers": [], "compiled": [], "loaded": []}

    monkeypatch.setattr(time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(stress, "run_child", child_of_100_s)
    monkeypatch.setenv("POLYREC_RESULTS_DIR", str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["capture_stress.py", "--children", "2", "--budget-s", "250"])
    assert stress.child_order(2) == ["code", "baseline", "baseline", "code"]
    stress.main()
    doc = json.loads(next(tmp_path.glob("capture_stress_*.json")).read_text())
    assert [c["mode"] for c in doc["results"]["children"]] == ["code", "baseline"]
    assert doc["summary"]["children_skipped"] == ["baseline (3 of 4)", "code (4 of 4)"]
