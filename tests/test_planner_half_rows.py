"""The planner prices fp16 / bf16 embedding rows as the runtime runs them: one-tile lane programs, the
merge after them, and the stochastic rounding's instructions (``polyrec.perfmodel.tbe.rounding_seconds``)."""

from __future__ import annotations

from polyrec.hardware.calibrate import ceilings
from polyrec.hardware.catalog import get_device
from polyrec.perfmodel import tbe
from polyrec.planner.estimate import ShardLoad, _tbe_group_seconds


def _loads(dtype: str) -> tuple[ShardLoad, ...]:
    return tuple(ShardLoad(table=f"t{i}", rank=0, rows=rows, dim=128, accesses=65536 * hot, bags=65536,
                           weight_dtype=dtype, optimizer="rowwise_adagrad", memory="hbm", cache_rows=0, skew="uniform")
                 for i, (rows, hot) in enumerate([(4_000_000, 3), (4_000_000, 100), (2_000_000, 27)]))


def test_half_rows_pay_the_rounding_and_fp32_rows_do_not(monkeypatch):
    spec = get_device("H200")
    ceil = ceilings(spec)
    base = {dt: _tbe_group_seconds(_loads(dt), spec, ceil, 2) for dt in ("fp32", "fp16", "bf16")}
    monkeypatch.setattr(tbe, "ROUNDING_ISSUE_FRACTION", tbe.ROUNDING_ISSUE_FRACTION * 2)
    faster = {dt: _tbe_group_seconds(_loads(dt), spec, ceil, 2) for dt in ("fp32", "fp16", "bf16")}
    assert faster["fp32"] == base["fp32"]
    for dt in ("fp16", "bf16"):
        assert faster[dt][0] == base[dt][0]  # the forward does not round
        nnz = 65536 * 130
        lane_half = (-(-nnz // 8)) * 8 * 128 * tbe.ROUNDING_INSTRUCTIONS["lane"] / (
            spec.compute_units * tbe.ISSUE_LANES_PER_CLK["nvidia"] * spec.boost_clock_hz * tbe.ROUNDING_ISSUE_FRACTION)
        # doubling the rate halves the rounding: at least the lane update's half is gone
        assert base[dt][1] - faster[dt][1] >= lane_half * (1 - 1e-9)
        assert base[dt][1] > base["fp32"][1]  # measured: 15.08 vs 9.98 ms embedding phase (capped MLPerf)


def test_half_rows_take_one_tile_programs_as_the_runtime():
    from polyrec.kernels import tbe_select

    spec = get_device("H200")
    cfg = tbe_select.select_update(spec, nnz=65536 * 130, block_d=128, row_bytes=256, state_tiles=0, stochastic=True,
                                   grad_bytes=2)
    assert cfg.chunks == 1 and cfg.variant == "lane"
