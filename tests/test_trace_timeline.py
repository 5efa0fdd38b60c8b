"""benchmarks/trace_timeline.py: ranks' GPU timelines from Chrome traces, on one clock."""

from __future__ import annotations

import json

import pytest

from benchmark_util import load_benchmark


@pytest.fixture(scope="module")
def timeline():
    return load_benchmark("trace_timeline")


def _trace(path, events):
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "args": {"stream": stream}}
        for cat, name, ts, dur, stream in events] + [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 9}]}))


def test_window_keeps_long_main_stream_work_and_side_stream_traffic(tmp_path, timeline):
    _trace(tmp_path / "rank0.json", [("kernel", "gemm", 1000, 500, 7), ("kernel", "tiny", 1600, 10, 7),
                                     ("kernel", "gemm", 2000, 500, 7), ("gpu_memcpy", "Memcpy PtoP", 2100, 30, 25),
                                     ("kernel", "late", 9000, 500, 7)])
    events = timeline.gpu_events(tmp_path / "rank0.json")
    assert [e["name"] for e in events] == ["gemm", "tiny", "gemm", "Memcpy PtoP", "late"]  # the cpu op left out
    assert timeline.main_stream(events) == 7
    got = timeline.window(events, origin_us=1000, start_ms=0.0, end_ms=2.0, min_us=60, side_min_us=20)
    assert got == [(7, 0.0, 0.5, "gemm"), (7, 1.0, 0.5, "gemm"), (25, 1.1, 0.03, "Memcpy PtoP")]
