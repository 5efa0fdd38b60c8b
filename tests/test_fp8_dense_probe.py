"""benchmarks/fp8_dense_probe.py's inventory and sums (pure Python; the timing needs a GPU)."""

from __future__ import annotations

import pytest

from benchmark_util import load_benchmark

probe = load_benchmark("fp8_dense_probe")


def test_rows_are_the_planners_gemms_and_mark_what_fp8_cannot_take():
    rows = probe.gemm_rows(4096)
    ops = {r["op"]: r for r in rows}
    assert ops["cross.0.v.fwd"] == {"op": "cross.0.v.fwd", "m": 4096, "n": 512, "k": 3456, "backward": False,
                                    "fp8_ok": True}
    assert ops["cross.2.u.wgrad"]["k"] == 4096 and ops["cross.2.u.wgrad"]["backward"]
    assert not ops["top.4.fwd"]["fp8_ok"]  # N = 1: not a multiple of 16
    assert sum(not r["fp8_ok"] for r in rows) == 3  # the last layer's three GEMMs


def test_cast_elements_count_each_layers_input_and_output_gradient():
    # MLPerf per sample: bottom 16+512, 512+256, 256+128; cross 3 x (3456+512 + 512+3456);
    # top 3456+1024, 1024+1024, 1024+512, 512+256 (the last layer, N = 1, stays bf16)
    assert probe.cast_elements(2) == 2 * (1680 + 3 * 7936 + 8832)


def _row(bf16: float, fp8: float | None, backward: bool) -> dict:
    row = {"bf16_ms": bf16, "backward": backward, "fp8_ok": fp8 is not None}
    if fp8 is not None:
        row |= {"fp8_ms": fp8, "fp8_fast_ms": fp8 / 2}
    return row


def test_summary_takes_fast_accumulation_forward_only_and_bf16_where_fp8_cannot_run():
    rows = [_row(1.0, 0.6, False), _row(1.0, 0.6, True), _row(0.1, None, False)]
    got = probe.summarize(rows, elements=10**9, copy_tbps=4.0)
    assert got["bf16_gemm_ms"] == pytest.approx(2.1)
    assert got["fp8_gemm_ms"] == pytest.approx(0.3 + 0.6 + 0.1)
    assert got["fp8_exact_accum_gemm_ms"] == pytest.approx(1.3)
    assert got["cast_floor_ms"] == pytest.approx(1.0)  # 4 GB at 4 TB/s
    assert got["fused_cast_floor_ms"] == pytest.approx(0.5)
    assert got["net_change_ms"] == pytest.approx(1.0 + 1.0 - 2.1)
