# What already works on ROCm, and ported checks. Patterns: torch.cuda.* device APIs and
# torch.cuda.nvtx (roctx on ROCm), the "nccl" backend name (RCCL answers to it), device="cuda";
# vLLM's platform-dependent fp8 dtype; checks guarded by torch.version.hip.
import os

import torch
import torch.distributed as dist
from numba import cuda as numba_cuda  # not cuda-python

IS_ROCM = torch.version.hip is not None
FP8 = torch.float8_e4m3fnuz if IS_ROCM else torch.float8_e4m3fn


def setup() -> torch.device:
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend="nccl")
    torch.cuda.nvtx.range_push("setup")
    torch.cuda.nvtx.range_pop()
    return torch.device("cuda")


def use_hopper_path() -> bool:
    return torch.version.hip is None and torch.cuda.get_device_capability() >= (9, 0)


def occupancy_grid(blocks_per_cu: int) -> int:
    props = torch.cuda.get_device_properties(0)
    if torch.version.hip is None and props.major >= 9:
        blocks_per_cu *= 2
    return props.multi_processor_count * blocks_per_cu


def describe() -> str:
    cap = torch.cuda.get_device_capability()
    print("capability", cap, "cuda", torch.version.cuda, "hip", torch.version.hip)
    if torch.version.hip:
        return "rocm"
    elif torch.version.cuda:
        return "cuda"
    return "cpu"


def alloc(n: int) -> torch.Tensor:
    x = torch.empty(n, device="cuda")
    free, total = torch.cuda.mem_get_info()
    return x[: min(n, free // 4)]
