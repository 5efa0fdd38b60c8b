# Look-alikes that fit AMD: warp tilings and block sizes as constexpr defaults, kwargs dicts within 16 warps,
# 32 as another option (num_stages, a block size), product spaces whose 32 is no warp count.
# Pattern: Triton's AMD matmul tutorial configs (num_warps <= 8), written as dicts and products.
import itertools

import triton
import triton.language as tl


@triton.jit
def tiled(a_ptr, c_ptr, BLOCK_M: tl.constexpr = 32, WARP_M: tl.constexpr = 32, WARP_ID: tl.constexpr = 32,
          WARP_SIZE: tl.constexpr = 64, WARPS_PER_SM: tl.constexpr = 32):
    offs = tl.arange(0, BLOCK_M) + WARP_M * WARP_ID
    tl.store(c_ptr + offs, tl.load(a_ptr + offs) * WARP_SIZE * WARPS_PER_SM)


def helper(x, warp_size=None, block=32):
    return x, warp_size, block


SMALL = dict(num_warps=8, num_stages=32)
AMD = {"BLOCK_M": 32, "num_warps": 4, "num_stages": 32}
CONFIGS = [triton.Config({"BLOCK": 32}, **dict(num_warps=16)), triton.Config({"BLOCK": 32}, **SMALL)]
SPACE = [triton.Config({"BLOCK_M": m}, num_warps=w, num_stages=s)
         for m, w, s in itertools.product([32, 64], [4, 8], [2, 32])]
SPLITS = [dict(num_splits=ns, BLOCK_N=bn) for ns, bn in itertools.product([4, 8, 16, 32], [64, 128])]
for block, warps in itertools.product([32, 64], repeat=2):
    CONFIGS.append(triton.Config({"BLOCK": block}, num_warps=warps // 8))
