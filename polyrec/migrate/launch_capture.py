"""Turn the Triton launches a candidate's ``run()`` makes into CompileJobs, without running them.

``JITFunction.run`` is replaced by a recorder while ``run(*inputs)`` executes on CPU tensors, so every
kernel, its argument types and constexpr values and its num_warps / num_stages are captured exactly
as the launcher chose them for that shape.
"""

from __future__ import annotations

import inspect
from typing import Any

from polyrec.hardware.compile import CompileJob

#: torch dtype name -> Triton pointer element type.
_POINTER_TYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64", "int64": "i64",
                  "int32": "i32", "int16": "i16", "int8": "i8", "uint8": "u8", "bool": "i1"}
_LAUNCH_OPTIONS = {"num_warps", "num_stages", "num_ctas", "waves_per_eu", "matrix_instr_nonkdim", "kpack",
                   "grid", "warmup", "maxnreg"}


def _arg_type(value: Any) -> str:
    if hasattr(value, "data_ptr") and hasattr(value, "dtype"):
        name = str(value.dtype).removeprefix("torch.")
        if name not in _POINTER_TYPES:
            raise TypeError(f"launch capture: unsupported tensor dtype {value.dtype}")
        return "*" + _POINTER_TYPES[name]
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -2**31 <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    raise TypeError(f"launch capture: unsupported argument {type(value).__name__}")


def _job(fn: Any, args: tuple, kwargs: dict[str, Any]) -> CompileJob:
    options = {k: kwargs.pop(k) for k in list(kwargs) if k in _LAUNCH_OPTIONS}
    bound = inspect.signature(fn.fn).bind(*args, **kwargs)
    bound.apply_defaults()
    constexpr_names = {p.name for p in fn.params if p.is_constexpr}
    signature, constexprs = {}, {}
    for name, value in bound.arguments.items():
        if name in constexpr_names:
            signature[name], constexprs[name] = "constexpr", value
        else:
            signature[name] = _arg_type(value)
    warps, stages = options.get("num_warps", 4), options.get("num_stages", 3)
    label = f"{fn.__name__} " + " ".join(f"{k}={v}" for k, v in constexprs.items()) + f" w{warps} s{stages}"
    return CompileJob(label=label, kernel=fn, signature=signature, constexprs=constexprs, num_warps=warps,
                      num_stages=stages)


def capture_jobs(module: Any, cases: list[tuple], jit_class: Any) -> list[CompileJob]:
    """Distinct compile jobs of every launch ``module.run`` makes over the cases."""
    jobs: dict[str, CompileJob] = {}
    original = jit_class.run

    def record(self: Any, *args: Any, grid: Any = None, warmup: bool = False, **kwargs: Any) -> None:
        job = _job(self, args, kwargs)
        jobs.setdefault(f"{job.label} {sorted(job.signature.items())}", job)

    jit_class.run = record
    try:
        for inputs in cases:
            module.run(*inputs)
    finally:
        jit_class.run = original
    return list(jobs.values())
