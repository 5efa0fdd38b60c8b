"""Record the Triton launches a candidate's ``run()`` makes, and turn the records into CompileJobs.

The numerics run wraps ``run`` of the kernel classes (``JITFunction`` on a GPU, ``InterpretedFunction``
under TRITON_INTERPRET) with a recorder that describes each launch before it executes: kernel name,
argument types, constexpr values, num_warps / num_stages, exactly as the launcher chose them. The
compile stage compiles those records, so the launches compiled are the launches that ran.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from polyrec.hardware.compile import CompileJob

#: torch dtype name -> Triton pointer element type.
_POINTER_TYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64", "int64": "i64",
                  "int32": "i32", "int16": "i16", "int8": "i8", "uint8": "u8", "bool": "i1"}
_LAUNCH_OPTIONS = {"num_warps", "num_stages", "num_ctas", "waves_per_eu", "matrix_instr_nonkdim", "kpack",
                   "maxnreg"}


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


def _constexpr_names(fn: Any) -> set[str]:
    if hasattr(fn, "params"):  # JITFunction
        return {p.name for p in fn.params if p.is_constexpr}
    return {name for name, p in inspect.signature(fn.fn).parameters.items()  # InterpretedFunction
            if "constexpr" in str(p.annotation)}


def _encode_constexpr(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if type(value).__name__ == "dtype" and type(value).__module__.startswith("triton"):
        return {"tl_dtype": str(value)}
    raise TypeError(f"launch capture: unsupported constexpr value {type(value).__name__}")


def describe_launch(fn: Any, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
    """A JSON-able record of one launch: kernel name, signature, constexprs and launch options."""
    kwargs = dict(kwargs)
    options = {k: kwargs.pop(k) for k in list(kwargs) if k in _LAUNCH_OPTIONS}
    bound = inspect.signature(fn.fn).bind(*args, **kwargs)
    bound.apply_defaults()
    constexpr_names = _constexpr_names(fn)
    signature, constexprs = {}, {}
    for name, value in bound.arguments.items():
        if name in constexpr_names:
            signature[name], constexprs[name] = "constexpr", _encode_constexpr(value)
        else:
            signature[name] = _arg_type(value)
    return {"kernel": fn.fn.__name__, "signature": signature, "constexprs": constexprs,
            "num_warps": int(options.pop("num_warps", 4)), "num_stages": int(options.pop("num_stages", 3)),
            "options": options}


def job_from_launch(kernel: Any, launch: dict[str, Any]) -> CompileJob:
    """The CompileJob of a recorded launch, for ``kernel`` (the JITFunction named in the record)."""
    import triton.language as tl

    constexprs = {k: getattr(tl, v["tl_dtype"]) if isinstance(v, dict) else v for k, v in launch["constexprs"].items()}
    warps, stages = launch["num_warps"], launch["num_stages"]
    label = f"{launch['kernel']} " + " ".join(f"{k}={v}" for k, v in constexprs.items()) + f" w{warps} s{stages}"
    return CompileJob(label=label, kernel=kernel, signature=dict(launch["signature"]), constexprs=constexprs,
                      num_warps=warps, num_stages=stages, options=dict(launch["options"]))


@contextmanager
def recording(kernel_classes: tuple[Any, ...], on_launch: Callable[[Any, tuple, dict[str, Any]], None],
              after_launch: Callable[[Any, tuple, dict[str, Any]], None]) -> Iterator[None]:
    """Call ``on_launch(fn, args, kwargs)`` before and ``after_launch(fn, args, kwargs)`` after every launch."""
    originals = {cls: cls.run for cls in kernel_classes}

    def wrap(original: Any) -> Any:
        def run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
            if warmup:
                return original(self, *args, grid=grid, warmup=warmup, **kwargs)
            on_launch(self, args, kwargs)
            result = original(self, *args, grid=grid, warmup=warmup, **kwargs)
            after_launch(self, args, kwargs)
            return result
        return run

    for cls, original in originals.items():
        cls.run = wrap(original)
    try:
        yield
    finally:
        for cls, original in originals.items():
            cls.run = original
