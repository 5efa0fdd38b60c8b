"""benchmarks/update_probe_check.py: a probe row's config read back from either form it was recorded in, priced
as the selector prices it, and the verdict per case."""

from __future__ import annotations

import pytest

from benchmark_util import load_benchmark
from polyrec.hardware.catalog import get_device
from polyrec.kernels import tbe_select
from polyrec.perfmodel import tbe


@pytest.fixture(scope="module")
def check():
    return load_benchmark("update_probe_check")


def test_a_label_and_a_repr_name_the_same_config(check):
    cfg = tbe_select.UpdateConfig(tile=64, num_warps=4, variant="scan", chunks=1, merge_chunks=8)
    assert check.parse_config(repr(cfg)) == cfg
    assert check.parse_config("scan t64 c1 m8 w4") == cfg
    assert check.parse_config("lane t8 c8 m1 w2") == tbe_select.UpdateConfig(tile=8, num_warps=2, variant="lane",
                                                                            chunks=8, merge_chunks=1)


def test_several_update_launches_are_refused(check):
    with pytest.raises(SystemExit, match="several update launches"):
        check.parse_config("D32 lane t32 c8 m1 w1 / D128 lane t8 c8 m1 w1")


def test_the_shape_takes_the_config_at_the_planned_row_width(check):
    planned = tbe.UpdateShape(variant="lane", tile=32, num_warps=1, elems_per_thread=16, chunks=8, rounding="bf16",
                              one_dim=True, state_tiles=0, max_registers=128)  # BLOCK_D 16 on a warp of 32
    cfg = tbe_select.UpdateConfig(tile=128, num_warps=4, variant="scan", chunks=1, merge_chunks=1)
    shape = check.config_shape(planned, cfg, "H100")
    assert (shape.variant, shape.tile, shape.num_warps, shape.chunks, shape.max_registers) == ("scan", 128, 4, 1, None)
    assert shape.block_d(get_device("H100").warp_size) == planned.block_d(32) == 16
    assert (shape.rounding, shape.one_dim) == ("bf16", True)


def _row(config, priced, measured, step=0.5):
    return {"seed": 1, "case": 2, "batch": 64, "config": config, "update_priced_ms": priced, "merge_priced_ms": 0.0,
            "update_ms": measured, "merge_ms": 0.001, "step_ms": step}


LANE, SCAN = "lane t32 c8 m1 w1", "scan t64 c1 m1 w4"


def test_the_verdict_compares_update_plus_merge(check):
    (agree,) = check.verdicts([_row(LANE, 0.02, 0.03), _row(SCAN, 0.01, 0.02)])
    assert agree["agree"] and agree["priced_fastest"] == agree["measured_fastest"] == SCAN
    (differ,) = check.verdicts([_row(LANE, 0.01, 0.03), _row(SCAN, 0.02, 0.02)])
    assert not differ["agree"] and differ["priced_fastest"] == LANE


def test_rounds_of_one_config_count_by_their_medians_whatever_its_label(check):
    """The module's own config (its label) and the same config forced (its repr, in older runs) are one config; three
    rounds of each: the scan's median device time (0.02) beats the lane's (0.03) though one lane round ran faster."""
    scan_repr = repr(check.parse_config(SCAN))
    rows = [_row(LANE, 0.01, 0.03, 0.6), _row(LANE, 0.01, 0.005, 0.7), _row(LANE, 0.01, 0.04, 0.8),
            _row(SCAN, 0.02, 0.02, 1.0), _row(scan_repr, 0.02, 0.019, 1.4), _row(SCAN, 0.02, 0.025, 0.9)]
    (verdict,) = check.verdicts(rows)
    assert verdict["measured_fastest"] == SCAN and verdict["priced_fastest"] == LANE and not verdict["agree"]
    assert verdict["step_ms"] == {LANE: 0.7, SCAN: 1.0}
