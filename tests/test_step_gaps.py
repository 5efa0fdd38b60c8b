"""benchmarks/step_gaps.py's idle-time count over a profiler trace's GPU events (pure Python)."""

from __future__ import annotations

import pytest

from benchmark_util import load_benchmark


@pytest.fixture(scope="module")
def gaps():
    return load_benchmark("step_gaps")


def test_idle_is_where_no_stream_runs(gaps):
    """A side-stream event covering the main stream's gap leaves no idle there; a gap after the last
    running event is counted from the latest end, with the event that ended last before it."""
    events = [{"ts": 0, "dur": 10, "name": "a"}, {"ts": 5, "dur": 20, "name": "side"},
              {"ts": 12, "dur": 3, "name": "inside"}, {"ts": 30, "dur": 5, "name": "b"},
              {"ts": 100, "dur": 1, "name": "c"}]
    assert gaps.idle_gaps(events) == [(25, 5, "side", "b"), (35, 65, "b", "c")]
    summary, rows = gaps.summarize(events, steps=1)
    assert summary["idle_ms_per_step"] == 0.07 and summary["idle_ms_per_step_in_gaps_over_20us"] == 0.065
    assert rows == [{"at_ms": 0.035, "gap_us": 65, "before": "b", "after": "c"}]


def test_no_events_no_gaps(gaps):
    assert gaps.idle_gaps([]) == []
    assert gaps.summarize([], steps=1)[0]["idle_ms_per_step"] == 0.0
