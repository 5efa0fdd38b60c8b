"""benchmarks/sass_count.py on canned nvdisasm text: the per-trip loop path leaves out the rare block its
first conditional branch jumps to; instructions are counted by kind; resident warps follow sm_90's
register allocation."""

from __future__ import annotations

import dataclasses

import pytest

from benchmark_util import load_benchmark

sass_count = load_benchmark("sass_count")

# A loop (head .L_x_2, back-edge at 0x00c0) whose first conditional branch goes to a rare block
# (.L_x_0 .. the join .L_x_1); the common path falls through and jumps over it.
SASS = """
        /*0000*/                   S2R R0, SR_TID.X ;
.L_x_2:
        /*0010*/                   LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0020*/                   ISETP.NE.AND P0, PT, R4, R5, PT ;
        /*0030*/               @P0 BRA `(.L_x_0) ;
        /*0040*/                   IMAD R6, R4, R5, RZ ;
        /*0050*/                   BRA `(.L_x_1) ;
.L_x_0:
        /*0060*/                   SHFL.BFLY PT, R7, R6, 0x1, 0x1f ;
        /*0070*/                   SHFL.BFLY PT, R8, R7, 0x2, 0x1f ;
        /*0080*/                   FADD R9, R7, R8 ;
.L_x_1:
        /*0090*/                   FFMA R10, R6, R9, R4 ;
        /*00a0*/                   STG.E desc[UR4][R2.64], R10 ;
        /*00b0*/                   IADD3 R2, R2, 0x10, RZ ;
        /*00c0*/               @P1 BRA `(.L_x_2) ;
        /*00d0*/                   EXIT ;
"""


def test_loop_path_skips_the_rare_block():
    # head .. the jump over the rare block: LDG, ISETP, @P0 BRA, IMAD, BRA (5); join .. back-edge: 4
    assert sass_count.loop_path(SASS) == 9


# The same loop laid out the other way (as ptxas lays out the lane update at BLOCK_D 16): the first conditional branch
# jumps over the rare block, which falls through from it, to the common path (no jump back from the rare block).
SASS_IF_THEN = """
        /*0000*/                   S2R R0, SR_TID.X ;
.L_x_2:
        /*0010*/                   LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0020*/                   ISETP.NE.AND P0, PT, R4, R5, PT ;
        /*0030*/              @!P0 BRA `(.L_x_1) ;
        /*0040*/                   SHFL.BFLY PT, R7, R6, 0x1, 0x1f ;
        /*0050*/                   SHFL.BFLY PT, R8, R7, 0x2, 0x1f ;
        /*0060*/                   FADD R9, R7, R8 ;
.L_x_1:
        /*0070*/                   FFMA R10, R6, R9, R4 ;
        /*0080*/                   STG.E desc[UR4][R2.64], R10 ;
        /*0090*/               @P1 BRA `(.L_x_2) ;
        /*00a0*/                   EXIT ;
"""


def test_loop_path_skips_a_rare_block_the_branch_jumps_over():
    # head .. the branch: LDG, ISETP, @!P0 BRA (3); its target .. back-edge: FFMA, STG, @P1 BRA (3)
    assert sass_count.loop_path(SASS_IF_THEN) == 6


def test_no_loop_has_no_path():
    assert sass_count.loop_path("        /*0000*/                   EXIT ;\n") is None


def test_instructions_by_kind():
    counts = sass_count.count_sass(SASS)
    assert counts["total"] == 14
    assert (counts["load"], counts["store"], counts["shuffle"], counts["control"]) == (1, 1, 2, 4)
    assert (counts["predicate"], counts["integer"], counts["float"], counts["move"]) == (1, 2, 2, 1)


def test_resident_warps_follow_the_register_allocation_unit():
    # 65536 registers per SM, allocated per warp in units of 256: 152 x 32 = 4864 -> 13 warps,
    # 168 x 32 = 5376 -> 12, 176 x 32 = 5632 -> 11, 221 -> 224 x 32 = 7168 -> 9
    assert [sass_count.resident_warps(r, 1) for r in (152, 168, 176, 221)] == [13, 12, 11, 9]
    assert sass_count.resident_warps(72, 2) == 28


def test_a_job_is_retyped_to_other_rows():
    """--weights: the weights pointer's type and the label change, stochastic rounding follows the precision,
    nothing else moves; a job without a weights pointer is refused."""
    from polyrec.hardware.compile import CompileJob

    job = CompileJob(label="tbe update-lane rowwise_adagrad bf16 D128 tile8", kernel=None, num_warps=1,
                     signature={"weights_ptr": "*bf16", "grad_ptr": "*bf16", "STOCHASTIC": "constexpr"},
                     constexprs={"STOCHASTIC": True, "TILE": 8})
    fp32 = sass_count.with_weights(job, "fp32")
    assert fp32.label == "tbe update-lane rowwise_adagrad fp32 D128 tile8"
    assert fp32.signature == {"weights_ptr": "*fp32", "grad_ptr": "*bf16", "STOCHASTIC": "constexpr"}
    assert fp32.constexprs == {"STOCHASTIC": False, "TILE": 8}
    fp16 = sass_count.with_weights(fp32, "fp16")
    assert fp16.signature["weights_ptr"] == "*fp16" and fp16.constexprs["STOCHASTIC"] is True
    with pytest.raises(SystemExit, match="no weights_ptr"):
        sass_count.with_weights(dataclasses.replace(job, signature={"grad_ptr": "*bf16"}), "fp16")


def test_a_job_takes_another_register_cap():
    """--maxnreg: the cap replaces the job's own (or is added), the label names the new one only, the other
    options stay."""
    from polyrec.hardware.compile import CompileJob

    job = CompileJob(label="tbe update-lane rowwise_adagrad fp32 D128 tile8 chunks8 w1 maxnreg128", kernel=None,
                     num_warps=1, signature={}, constexprs={}, options={"maxnreg": 128, "other": 1})
    capped = sass_count.with_register_cap(job, 96)
    assert capped.label == "tbe update-lane rowwise_adagrad fp32 D128 tile8 chunks8 w1 maxnreg96"
    assert capped.options == {"maxnreg": 96, "other": 1}
    uncapped = dataclasses.replace(job, label="tbe merge-level sgd fp32 D128 tile8 chunks1 w1", options={})
    assert sass_count.with_register_cap(uncapped, 112).label.endswith("chunks1 w1 maxnreg112")


def test_the_lane_grid_takes_every_layout_the_selector_launches():
    """--lane-grid: mixed dims (grouped) for every optimizer and one dim for those without a per-element state tile,
    at every BLOCK_D and TILE, each with the selector's warps and register cap; a missing base job is named."""
    from polyrec.hardware.compile import CompileJob
    from polyrec.kernels import tbe_select
    from polyrec.kernels.tbe_optim import OPTIM_CODE

    base = CompileJob(label=sass_count.LANE_GRID_BASE, kernel=None, num_warps=1, signature={},
                      constexprs={"OPTIM": 1, "BLOCK_D": 32, "TILE": 32, "ONE_DIM": 0, "GROUPED": True,
                                  "HAS_WD": 1, "HAS_SCALE": 1, "CHUNKS": 8})
    grid = sass_count.lane_grid({base.label: base})
    layouts = len(sass_count.LANE_GRID_BLOCK_D) * len(tbe_select.LANE_TILES)
    assert len(grid) == (4 + 2) * layouts and len({j.label for j in grid}) == len(grid)
    adam = next(j for j in grid if j.label.startswith("lane mixed grouped adam D512 tile8"))
    assert adam.constexprs["OPTIM"] == OPTIM_CODE["adam"] and adam.num_warps == tbe_select.lane_warps(512, 32)
    assert adam.constexprs["HAS_WD"] == 0 and adam.constexprs["GROUPED"] and not adam.options.get("maxnreg")
    one = next(j for j in grid if j.label.startswith("lane one dim sgd D128 tile8"))
    assert one.constexprs["ONE_DIM"] == 128 and not one.constexprs["GROUPED"]
    assert one.options["maxnreg"] == tbe_select.lane_register_cap("nvidia", tbe_select.LANE_CHUNKS, 8, 0, True)
    with pytest.raises(SystemExit, match="no compile job"):
        sass_count.lane_grid({})


def test_instructions_per_element_follow_the_tile():
    """Warp instructions x 32 lanes x warps over the tile's elements; None without a loop or a tile."""
    from polyrec.hardware.compile import CompileJob

    job = CompileJob(label="x", kernel=None, num_warps=2, signature={}, constexprs={"TILE": 8, "BLOCK_D": 256})
    assert sass_count.per_element({"loop_path": 1024}, job) == 1024 * 32 * 2 / (8 * 256)
    assert sass_count.per_element({"loop_path": None}, job) is None
    assert sass_count.per_element({"loop_path": 10}, dataclasses.replace(job, constexprs={})) is None
