"""What the pooled-forward model (polyrec.perfmodel.tbe_lookup) assumes of the compiled kernel, checked
against compiles (CPU, no GPU): the warps Triton's layout puts along a tile's HOTS axis, and the
registers half-precision rows save."""

from __future__ import annotations

import re

import pytest

from polyrec.hardware.catalog import get_device
from polyrec.hardware.compile import compile_for, compile_job
from polyrec.kernels.tbe_select import ForwardConfig, forward_candidates
from polyrec.perfmodel.tbe_lookup import ForwardTile, warps_along_hots

#: (row dtype, BLOCK_D, VEC) of the layouts checked: 16-byte accesses over narrow and wide rows.
ROWS = (("fp16", 64, 8), ("fp32", 64, 4), ("fp16", 128, 8), ("fp32", 256, 4), ("fp32", 16, 4))


def _load_layout_warps(ttgir: str) -> list[int]:
    """warpsPerCTA of the [BAGS, HOTS, BLOCK_D] row loads: the one three-dimensional blocked layout."""
    layouts = re.findall(r"#ttg\.blocked<\{[^}]*warpsPerCTA = \[(\d+), (\d+), (\d+)\][^}]*\}>", ttgir)
    assert len(layouts) == 1, layouts
    return [int(w) for w in layouts[0]]


@pytest.mark.compile
@pytest.mark.parametrize("device", ["H200", "MI300X"])
@pytest.mark.parametrize(("dtype", "block_d", "vec"), ROWS)
def test_warps_along_hots_match_the_compiled_layout(device, dtype, block_d, vec):
    from polyrec.kernels.tbe_compile import forward_job

    spec = get_device(device)
    tiles = [ForwardConfig(bags=4, hots=16, num_warps=4), ForwardConfig(bags=2, hots=16, num_warps=2),
             *forward_candidates(block_d, spec.warp_size)]
    split = 0
    for cfg in tiles:
        warps = _load_layout_warps(compile_job(forward_job(dtype, block_d, cfg, trained=False), spec).asm["ttgir"])
        tile = ForwardTile(bags=cfg.bags, hots=cfg.hots, block_d=block_d, num_warps=cfg.num_warps, vec=vec,
                           elem_bytes=4 if dtype == "fp32" else 2)
        assert warps_along_hots(tile, spec.warp_size) == warps[1], (cfg, warps)
        split += warps[1] > 1
    assert split > 0 or block_d // vec >= spec.warp_size  # narrow rows: some tile splits HOTS across warps


@pytest.mark.compile
def test_half_precision_rows_take_fewer_registers():
    """The HOTS = 4 tiles at D = 128 (MLPerf's picks) compile to fewer registers per thread with fp16 rows
    than with fp32 (HALF_ELEMENT_REGISTERS), for inference and for a trained lookup."""
    from polyrec.kernels.tbe_compile import forward_job

    spec = get_device("H200")
    for cfg in (c for c in forward_candidates(128, 32) if c.hots == 4):
        for trained in (False, True):
            fp32, fp16 = (compile_for(forward_job(dtype, 128, cfg, trained), spec).registers
                          for dtype in ("fp32", "fp16"))
            assert fp16 < fp32, (cfg, trained, fp16, fp32)
