"""The planner prices fp16 / bf16 embedding rows as the runtime runs them: 8-tile lane programs, the merge
after them, and the stochastic rounding's instructions (``polyrec.perfmodel.tbe.rounding_seconds``, added
after the loads for mixed dims: fitted on one-tile programs, which mixed dims ran until the twenty-third
session); issued in the update's own stream for tables of one dim."""

from __future__ import annotations

from polyrec.hardware.calibrate import ceilings
from polyrec.hardware.catalog import get_device
from polyrec.perfmodel import tbe
from polyrec.planner.shard_cost import ShardLoad, tbe_group_seconds


def _loads(dtype: str, last_dim: int = 128) -> tuple[ShardLoad, ...]:
    """Three tables, the last of dim ``last_dim`` (128: all of one dim, as MLPerf's)."""
    return tuple(ShardLoad(table=f"t{i}", rank=0, rows=rows, dim=dim, accesses=65536 * hot, bags=65536,
                           weight_dtype=dtype, optimizer="rowwise_adagrad", memory="hbm", cache_rows=0, skew="uniform")
                 for i, (rows, hot, dim) in enumerate([(4_000_000, 3, 128), (4_000_000, 100, 128),
                                                       (2_000_000, 27, last_dim)]))


def test_half_rows_pay_the_rounding_and_fp32_rows_do_not(monkeypatch):
    """Mixed dims: the one-tile update adds the rounding after its loads (ROUNDING_ISSUE_FRACTION). Priced
    as one launch at BLOCK_D 128 (the dim groups' launches kept off: ``tbe_select.GROUP_MIN_UPDATE_S``)."""
    from polyrec.kernels import tbe_select

    monkeypatch.setattr(tbe_select, "GROUP_MIN_UPDATE_S", float("inf"))
    spec = get_device("H200")
    ceil = ceilings(spec)
    base = {dt: tbe_group_seconds(_loads(dt, 64), spec, ceil, 2) for dt in ("fp32", "fp16", "bf16")}
    monkeypatch.setattr(tbe, "ROUNDING_ISSUE_FRACTION", tbe.ROUNDING_ISSUE_FRACTION * 2)
    faster = {dt: tbe_group_seconds(_loads(dt, 64), spec, ceil, 2) for dt in ("fp32", "fp16", "bf16")}
    assert faster["fp32"] == base["fp32"]
    for dt in ("fp16", "bf16"):
        assert faster[dt][0] == base[dt][0]  # the forward does not round
        nnz = 65536 * 130
        lane_half = (-(-nnz // 8)) * 8 * 128 * tbe.ROUNDING_INSTRUCTIONS[dt]["lane"] / (
            spec.compute_units * tbe.ISSUE_LANES_PER_CLK["nvidia"] * spec.boost_clock_hz * tbe.ROUNDING_ISSUE_FRACTION)
        # doubling the rate halves the rounding: at least the lane update's half is gone
        assert base[dt][1] - faster[dt][1] >= lane_half * (1 - 1e-9)
        assert base[dt][1] > base["fp32"][1]  # measured: 15.08 vs 9.98 ms embedding phase (capped MLPerf)


def test_half_rows_of_one_dim_issue_their_rounding_in_the_update(monkeypatch):
    """Tables of one dim: the chunked update issues its rounding in its own stream
    (ONE_DIM_ROUNDED_ISSUE_FRACTION), which prices the half-precision rows and not the fp32 ones."""
    spec = get_device("H200")
    ceil = ceilings(spec)
    base = {dt: tbe_group_seconds(_loads(dt), spec, ceil, 2) for dt in ("fp32", "fp16", "bf16")}
    monkeypatch.setattr(tbe, "ONE_DIM_ROUNDED_ISSUE_FRACTION", tbe.ONE_DIM_ROUNDED_ISSUE_FRACTION * 2)
    faster = {dt: tbe_group_seconds(_loads(dt), spec, ceil, 2) for dt in ("fp32", "fp16", "bf16")}
    assert faster["fp32"] == base["fp32"]
    for dt in ("fp16", "bf16"):
        assert faster[dt][0] == base[dt][0] and faster[dt][1] < base[dt][1]


def test_half_rows_take_chunked_programs_as_the_runtime():
    from polyrec.kernels import tbe_select

    spec = get_device("H200")
    cfg = tbe_select.select_update(spec, nnz=65536 * 130, block_d=128, row_bytes=256, state_tiles=0, rounding="fp16",
                                   grad_bytes=2)
    assert cfg.chunks == tbe_select.LANE_CHUNKS and cfg.variant == "lane"
