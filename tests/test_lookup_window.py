"""benchmarks/lookup_window.py: the GPU events before the last step's lookup, from a Chrome trace."""

from __future__ import annotations

import gzip
import json

import pytest

from benchmark_util import load_benchmark


@pytest.fixture(scope="module")
def window():
    return load_benchmark("lookup_window")


def _events(*spans):
    """Kernel events (name, start us, duration us), and a host op the reader must leave out."""
    kernels = [{"ph": "X", "cat": "kernel", "name": n, "ts": ts, "dur": d, "args": {"stream": 7}} for n, ts, d in spans]
    return kernels + [{"ph": "X", "cat": "cpu_op", "name": "aten::cat", "ts": 0, "dur": 5}]


STEP = [("adagrad_kernel", 0, 10), ("cat", 15, 20), ("index", 40, 5), ("pooled_forward_kernel", 50, 100),
        ("bag_ends_kernel", 151, 1), ("fill", 153, 2), ("pooled_forward_kernel", 156, 80), ("gemm", 240, 500)]


def test_the_last_step_is_read_with_both_modules_launches(tmp_path, window):
    later = [(n, ts + 1000, d) for n, ts, d in STEP]
    path = tmp_path / "trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": _events(*STEP, *later)}).encode()))
    events = window.read_events(path)
    assert len(events) == 2 * len(STEP)  # the host op left out
    mark, split, lookup = window.last_lookup(events, "adagrad_kernel")
    assert (mark["name"], mark["ts"]) == ("adagrad_kernel", 1000)
    assert [e["name"] for e in split] == ["cat", "index"]
    assert [e["ts"] for e in split] == [1015, 1040]  # the second step's
    assert [e["name"] for e in lookup][0] == "pooled_forward_kernel" and lookup[-1]["ts"] == 1156
    rows = window.gap_rows(split, 1010)
    assert [(gap, dur) for gap, dur, _ in rows] == [(5, 20), (5, 5)]


def test_a_trace_without_the_mark_is_refused(tmp_path, window):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": _events(*STEP[1:])}))
    with pytest.raises(SystemExit, match="no adagrad_kernel before a pooled_forward_kernel"):
        window.last_lookup(window.read_events(path), "adagrad_kernel")
