"""benchmarks/l2_setaside_probe.py's summary (pure Python): medians per set-aside, changes against none."""

from __future__ import annotations

import pytest

from benchmark_util import load_benchmark

probe = load_benchmark("l2_setaside_probe")


def _row(grad: str, asked: int, bwd: float, step: float) -> dict:
    return {"grad": grad, "round": 0, "setaside_asked": asked, "setaside_set": asked, "fwd_ms": step - bwd,
            "step_ms": step, "bwd_ms": bwd}


def test_summary_takes_medians_per_set_aside_and_compares_with_none():
    rows = [_row("fp32", 0, 5.0, 7.0), _row("fp32", 0, 5.2, 7.2), _row("fp32", 0, 9.0, 11.0),
            _row("fp32", 8, 4.9, 6.9), _row("fp32", 8, 4.8, 6.8), _row("fp32", 8, 4.7, 6.7),
            _row("bf16", 0, 4.0, 6.0), _row("bf16", 16, 5.0, 7.0)]
    got = probe.summarize(rows)
    assert got["fp32"]["setaside_0"]["bwd_ms"] == 5.2  # the outlier round does not move the median
    assert got["fp32"]["setaside_8"]["bwd_ms"] == 4.8
    assert got["fp32"]["setaside_8"]["bwd_change"] == pytest.approx(4.8 / 5.2 - 1)
    assert got["bf16"]["setaside_16"]["bwd_change"] == pytest.approx(0.25)
    assert got["bf16"]["setaside_0"]["bwd_change"] == 0.0
