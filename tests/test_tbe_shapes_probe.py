"""benchmarks/tbe_shapes_probe.py: the forced update configs take the selector's warps for their variant."""

from __future__ import annotations

import pytest

from benchmark_util import load_benchmark
from polyrec.kernels import tbe_select


@pytest.fixture(scope="module")
def probe():
    return load_benchmark("tbe_shapes_probe")


def test_a_forced_lane_config_takes_the_lane_warps_and_its_cap(probe):
    cfg = probe.parse_force("lane:8:8:1:152", 256)
    assert (cfg.variant, cfg.tile, cfg.chunks, cfg.merge_chunks, cfg.max_registers) == ("lane", 8, 8, 1, 152)
    assert cfg.num_warps == tbe_select.lane_warps(256, 32) == 2


def test_a_forced_scan_config_takes_its_candidates_warps(probe):
    for cand in tbe_select.scan_candidates(64, 32):
        cfg = probe.parse_force(f"scan:{cand.tile}:1:{cand.merge_chunks}", 64)
        assert (cfg.variant, cfg.tile, cfg.num_warps, cfg.max_registers) == ("scan", cand.tile, cand.num_warps, None)


def test_a_scan_tile_no_candidate_has_is_refused(probe):
    with pytest.raises(SystemExit, match="no scan candidate has tile 8 at BLOCK_D 64"):
        probe.parse_force("scan:8:1:1", 64)


def test_rounds_alternate_the_order_of_the_configs(probe):
    assert probe.round_order(["own", "lane", "scan"], 3) == [(0, "own"), (0, "lane"), (0, "scan"),
                                                              (1, "scan"), (1, "lane"), (1, "own"),
                                                              (2, "own"), (2, "lane"), (2, "scan")]
    assert probe.round_order(["own"], 1) == [(0, "own")]
