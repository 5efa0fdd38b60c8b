# Python-side hazards. Patterns: vLLM / TransformerEngine code paths keyed on SM version and
# torch.version.cuda; fp8 e4m3fn constants written for H100 (vLLM's fp8_dtype() fix picks fnuz on
# gfx942); NVML-based memory probes; `nvtx` ranges in training loops.
import subprocess

import nvtx  # expect: PM204
import pynvml  # expect: PM205
import torch
from cuda import cudart  # expect: PM207
from cuda.bindings import driver  # expect: PM207

FP8 = torch.float8_e4m3fn  # expect: PM201
FP8_MAX = torch.finfo(torch.float8_e5m2).max  # expect: PM201


def use_hopper_path() -> bool:
    return torch.cuda.get_device_capability() >= (9, 0)  # expect: PM202


def pick_kernel(device: int) -> str:
    major, minor = torch.cuda.get_device_capability(device)
    if major == 8 and minor == 0:  # expect: PM202
        return "ampere"
    if torch.cuda.get_device_properties(device).major >= 9:  # expect: PM202
        return "hopper"
    return "generic"


def pick_by_properties(device: int) -> str:
    props = torch.cuda.get_device_properties(device)
    sm = props.major * 10 + props.minor
    if props.major >= 9:  # expect: PM202
        return "hopper"
    return "ampere" if sm == 80 else "generic"  # expect: PM202


def backend() -> str:
    if torch.version.cuda:  # expect: PM203
        return "gpu"
    return "cpu"


HAS_CUDA_TOOLKIT = torch.version.cuda is not None  # expect: PM203


def free_memory() -> int:
    pynvml.nvmlInit()
    out = subprocess.check_output(["nvidia-smi", "--query-gpu=memory.free", "--format=csv"])  # expect: PM205
    return int(out.split()[-2])


@nvtx.annotate("step")
def step(x):
    return x * 2
