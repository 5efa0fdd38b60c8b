"""The child side of verification: run or compile a candidate module in a locked-down subprocess.

Started by verify.py as ``python -m polyrec.migrate.sandbox MODE CANDIDATE CASES OUT [BLOCKED]``
under resource limits (CPU seconds, address space, file size). Before the candidate is imported it:

- blocks the network, new processes and native-library loading with an audit hook (``sys.addaudithook``
  cannot be removed once installed);
- blocks importing the reference module (BLOCKED), so the candidate cannot call or read it;
- fills every tensor from torch.empty / empty_like / empty_strided / new_empty with NaN (poisoned
  outputs: a kernel that does not write its output returns NaN).

MODE "run" calls ``run(*inputs)`` on every case and saves the outputs; MODE "compile" intercepts each
Triton launch instead of running it and compiles it for sm_90, gfx942 and gfx950 through
polyrec.hardware.compile.compile_for.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

_BLOCKED_EVENTS = ("socket.connect", "socket.bind", "socket.getaddrinfo", "subprocess.Popen", "os.system",
                   "os.exec", "os.posix_spawn", "os.fork", "ctypes.dlopen", "os.spawn")
#: Devices whose Triton targets a port must compile for: sm_90, gfx942, gfx950.
COMPILE_DEVICES = ("H200", "MI300X", "MI350X")


class _BlockImport(importlib.abc.MetaPathFinder):
    def __init__(self, names: set[str]) -> None:
        self.names = names

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if fullname.split(".")[0] in self.names or fullname in self.names:
            raise ImportError(f"sandbox: importing {fullname} (the reference) is not allowed")


_STATE = {"candidate_done": False}  # compile mode: ptxas / cuobjdump may run once the candidate is done


def _audit(event: str, args: tuple) -> None:
    if _STATE["candidate_done"] and event.startswith(("subprocess.Popen", "os.posix_spawn", "os.fork", "os.exec")):
        return
    if event.startswith(_BLOCKED_EVENTS):
        raise PermissionError(f"sandbox: {event} is not allowed in generated code")


def _poison_allocators(torch: Any) -> None:
    def poisoned(fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            if out.is_floating_point() or out.is_complex():
                out.fill_(float("nan"))
            elif out.dtype != torch.bool:
                out.fill_(torch.iinfo(out.dtype).max)
            return out
        return wrapper

    for name in ("empty", "empty_like", "empty_strided"):
        setattr(torch, name, poisoned(getattr(torch, name)))
    torch.Tensor.new_empty = poisoned(torch.Tensor.new_empty)


def _load_candidate(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location("candidate", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"sandbox: cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, "run", None)):
        raise AttributeError(f"sandbox: {path} defines no run(*inputs) function")
    return module


def _run_cases(module: Any, cases: list[tuple], torch: Any, device: str) -> dict[str, Any]:
    outputs, aliased = [], []
    for inputs in cases:
        inputs = tuple(x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs)
        out = module.run(*inputs)
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"run() returned {type(out).__name__}, expected a torch.Tensor")
        aliased.append(any(isinstance(x, torch.Tensor) and x.numel() and out.numel()
                           and x.untyped_storage().data_ptr() == out.untyped_storage().data_ptr()
                           for x in inputs))
        outputs.append(out.detach().to("cpu").clone())
    return {"outputs": outputs, "aliased": aliased}


def _compile_cases(module: Any, cases: list[tuple]) -> list[dict[str, Any]]:
    from triton.runtime.jit import JITFunction

    from polyrec.migrate.launch_capture import capture_jobs

    jobs = capture_jobs(module, cases, JITFunction)
    _STATE["candidate_done"] = True
    from polyrec.hardware import get_device
    from polyrec.hardware.catalog import UnknownDeviceError
    from polyrec.hardware.compile import compile_for

    reports = []
    for name in COMPILE_DEVICES:
        try:
            spec = get_device(name)
        except UnknownDeviceError as exc:
            reports.append({"device": name, "error": f"no device spec: {exc}"})
            continue
        for job in jobs:
            try:
                r = compile_for(job, spec)
                reports.append({"device": name, "target": r.target, "label": r.label, "shared": r.shared_bytes,
                                "problems": list(r.problems)})
            except Exception as exc:  # a compile error is a verdict about the candidate, not a crash
                reports.append({"device": name, "label": job.label, "error": f"{type(exc).__name__}: {exc}"[:2000]})
    return reports


def main(argv: list[str]) -> int:
    mode, candidate, cases_file, out_file = argv[:4]
    blocked = set(argv[4].split(",")) if len(argv) > 4 and argv[4] else set()
    import torch  # imported (with triton) before the locks: their own import machinery is trusted

    import triton  # noqa: F401

    cases = torch.load(cases_file, weights_only=True)
    sys.meta_path.insert(0, _BlockImport(blocked))
    sys.addaudithook(_audit)
    _poison_allocators(torch)
    module = _load_candidate(Path(candidate))
    if mode == "run":
        device = "cuda" if torch.cuda.is_available() else "cpu"
        torch.save(_run_cases(module, cases, torch, device), out_file)
    elif mode == "compile":
        Path(out_file).write_text(json.dumps(_compile_cases(module, cases)))
    else:
        raise ValueError(f"sandbox: unknown mode {mode!r} (run | compile)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
