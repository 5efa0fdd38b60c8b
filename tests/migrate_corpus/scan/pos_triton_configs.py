# Triton launch options and kernel constants written for 32-lane warps, in the shapes config spaces take.
# Patterns: a warp width as a kernel's constexpr default (`WARP_SIZE: tl.constexpr = 32` in distributed Triton
# kernels: tid(0) // WARP_SIZE); launch options kept in kwargs dicts passed as **opts to a launch or to
# triton.Config; autotune spaces made with itertools.product (`for bx, by, w in itertools.product(...)`).
import itertools
from itertools import product

import triton
import triton.language as tl


@triton.jit
def lane_sum(x_ptr, out_ptr, n, BLOCK: tl.constexpr,
             WARP: tl.constexpr = 32,  # expect: PM101
             NUM_WARPS: tl.constexpr = 32):  # expect: PM110
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs // WARP, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


@triton.jit
def row_max(x_ptr, out_ptr, *, kWarpSize: tl.constexpr = 16 * 2):  # expect: PM101
    tl.store(out_ptr, tl.max(tl.load(x_ptr + tl.arange(0, kWarpSize)), 0))


BIG = dict(num_warps=32, num_stages=2)  # expect: PM110
HOPPER = {"BLOCK_M": 256, "num_warps": 32}  # expect: PM110
CONFIGS = [triton.Config({"BLOCK": 128}, **dict(num_warps=16)),
           triton.Config({"BLOCK": 256}, **{"num_warps": 32})]  # expect: PM110
GRID_SPACE = [triton.Config({"BLOCK_X": bx, "BLOCK_Y": by}, num_warps=w)
              for bx, by, w in itertools.product([32, 64], [16, 32], [4, 8, 16, 32])]  # expect: PM110
SQUARE_SPACE = [dict(BLOCK=b, num_warps=w) for b, w in product([64, 128], [8, 64])]  # expect: PM110
for stages, warps in product([2, 3], [4, 32]):  # expect: PM110
    CONFIGS.append(triton.Config({}, num_stages=stages, num_warps=warps))
for bm, nw in product([8, 64], repeat=2):  # expect: PM110
    CONFIGS.append(triton.Config({"BLOCK_M": bm}, num_warps=nw))


def launch(x, out):
    lane_sum[(1,)](x, out, x.numel(), BLOCK=1024, **BIG)
