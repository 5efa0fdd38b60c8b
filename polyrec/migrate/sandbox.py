"""The child side of verification: run or compile a candidate module in a locked-down subprocess.

Started by verify.py as ``python -m polyrec.migrate.sandbox MODE CANDIDATE IN OUT [BLOCKED]`` under
resource limits (CPU seconds, address space, file size). Before the candidate is imported it:

- installs an audit hook (``sys.addaudithook`` cannot be removed) that blocks the network, native
  libraries, new processes (compile mode: only the ptxas / cuobjdump binaries Triton resolved before
  the candidate loaded) and every file write outside OUT's folder. Triton's cache is a folder in there
  (TRITON_CACHE_DIR is set before torch / triton load), so a candidate cannot plant compiled kernels that
  another candidate or the caller would load. The hook's decisions depend only on values frozen in its
  closure, nothing the candidate can reach and flip;
- blocks importing the reference module (BLOCKED), so the candidate cannot call or read it;
- fills every tensor from torch.empty / empty_like / empty_strided / new_empty with a poison: NaN for
  floating point, True for bool, the maximum for integers (a kernel that does not write its output
  returns the poison), inside a storage with a poisoned guard band at each end (a store past either end
  changes it: GUARD_BYTES). Tensors from torch.zeros / ones / full, their _like forms and new_zeros /
  new_ones / new_full keep their values and get the same bands; so does a copy of each case's input (bytes,
  shape and strides kept) that run() gets in place of the input: a load past an input's end reads the
  poison, which the output then fails on (NaN, or a wrong value). Not caught: accesses farther than
  GUARD_BYTES out, and races between programs (the interpreter runs them one after another).

MODE "run" calls ``run(*inputs)`` on every case (IN: the cases) and saves the outputs, each Triton
launch (launch_capture), whether each output was written by a launch (an output's storage must be
uniform (poison or one constant) when a launch first takes it, and unchanged between and after its
launches) and which inputs run() wrote to. A case whose output holds the first poison anywhere runs again
with the second (the float maximum, False, the integer minimum) and counts the elements that held the first
poison, then the second: those were left unwritten, though the first poison may match the reference there (a
bool has two values, a saturated int8 output is often 127).
MODE "compile" (IN: the launches the run recorded, JSON) compiles exactly those launches for sm_90,
gfx942 and gfx950 through polyrec.hardware.compile.compile_for; the candidate's run() is not called.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

_BLOCKED_EVENTS = ("socket.connect", "socket.bind", "socket.getaddrinfo", "os.system", "os.exec", "os.fork",
                   "os.spawn", "ctypes.dlopen", "os.forkpty")
_PROCESS_EVENTS = ("subprocess.Popen", "os.posix_spawn")
#: Audit events that change the file system -> positions of their path arguments.
_PATH_EVENTS = {"os.rename": (0, 1), "os.link": (0, 1), "os.symlink": (1,), "os.remove": (0,), "os.rmdir": (0,),
                "os.mkdir": (0,), "os.truncate": (0,), "os.chmod": (0,), "os.chown": (0,), "os.utime": (0,),
                "os.setxattr": (0,), "os.removexattr": (0,), "os.chflags": (0,), "os.lchflags": (0,),
                "os.mkfifo": (0,), "os.mknod": (0,), "shutil.rmtree": (0,), "shutil.copyfile": (1,),
                "shutil.copytree": (1,), "shutil.move": (1,), "shutil.chown": (0,)}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
#: Devices whose Triton targets a port must compile for: sm_90, gfx942, gfx950.
COMPILE_DEVICES = ("H200", "MI300X", "MI350X")


class _BlockImport(importlib.abc.MetaPathFinder):
    def __init__(self, names: set[str]) -> None:
        self.names = names

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if fullname.split(".")[0] in self.names or fullname in self.names:
            raise ImportError(f"sandbox: importing {fullname} (the reference) is not allowed")


def _make_audit(programs: frozenset[str], writable: tuple[str, ...]) -> Any:
    """The audit hook: allows only ``programs`` as new processes and file writes only under ``writable``."""

    def inside(path: Any) -> bool:
        if isinstance(path, int):  # an already-open descriptor: its open was checked
            return True
        if not isinstance(path, (str, bytes, os.PathLike)):
            return False
        real = os.path.realpath(os.fsdecode(path))
        return real == os.devnull or any(real == root or real.startswith(root + os.sep) for root in writable)

    def program(args: tuple) -> Any:
        executable, argv = args[0], args[1]
        if executable is None and isinstance(argv, (list, tuple)) and argv:
            executable = argv[0]
        return os.path.realpath(os.fsdecode(executable)) if isinstance(executable, (str, bytes, os.PathLike)) else None

    def audit(event: str, args: tuple) -> None:
        if event.startswith(_BLOCKED_EVENTS):
            raise PermissionError(f"sandbox: {event} is not allowed in generated code")
        if event in _PROCESS_EVENTS and program(args) not in programs:
            raise PermissionError(f"sandbox: {event} is not allowed in generated code")
        if event == "open":
            mode, flags = args[1], args[2] if len(args) > 2 else 0
            writes = any(c in mode for c in "wax+") if isinstance(mode, str) else bool((flags or 0) & _WRITE_FLAGS)
            if writes and not inside(args[0]):
                raise PermissionError(f"sandbox: writing {args[0]!r} is not allowed in generated code")
        elif event in _PATH_EVENTS:
            for i in _PATH_EVENTS[event]:
                if i < len(args) and not inside(args[i]):
                    raise PermissionError(f"sandbox: {event} on {args[i]!r} is not allowed in generated code")

    return audit


def _programs(mode: str) -> frozenset[str]:
    """The binaries Triton and the compile harness run (compile mode only), resolved before the candidate loads."""
    if mode != "compile":
        return frozenset()
    import triton

    found = set()
    for name in ("ptxas", "cuobjdump"):
        try:
            found.add(os.path.realpath(getattr(triton.knobs.nvidia, name).path))
        except Exception:  # noqa: BLE001 (a missing tool makes its compile fail later, with its own error)
            continue
    return frozenset(found)


#: Bytes of poison on each side of every tensor the torch allocators return and of every input: a store past
#: either end (a mask off by one, `offs <= n`, or by a block) lands there and fails the case, and a load there
#: reads the poison. 64 KiB holds a whole block of 16384 fp32 (8192 fp64) elements, the widest ``tl.arange`` a
#: 1-D kernel commonly takes (4 KiB, one block of 1024 fp32, missed a store one block of 8192 out); an access
#: farther out is not seen (the CPU heap has no guard pages between tensors). Verify's cases are small: two bands
#: per tensor cost 128 KiB of host memory and a fill.
GUARD_BYTES = 64 * 1024
#: The torch allocators whose tensors are filled with the poison, and those that keep the values they were
#: asked for (zeros, ones, a fill value): both kinds get guard bands.
_EMPTY_ALLOCATORS = ("empty", "empty_like", "empty_strided")
_VALUE_ALLOCATORS = ("zeros", "ones", "full", "zeros_like", "ones_like", "full_like")
_EMPTY_METHODS = ("new_empty",)
_VALUE_METHODS = ("new_zeros", "new_ones", "new_full")


def _bytes(torch: Any, tensor: Any) -> Any:
    """The bytes of ``tensor``'s whole storage, as a uint8 tensor (NaN-safe to compare)."""
    return torch.tensor([], dtype=torch.uint8, device=tensor.device).set_(tensor.untyped_storage())


class _Poison:
    """What fresh tensors are filled with: the first poison, or the second while ``second`` is set; and the guard
    bands around them and around the inputs (``GUARD_BYTES``), which must still hold the poison when ``run()``
    returns."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.empty = torch.empty  # the unpatched allocator (made before _poison_allocators runs)
        self.second = False
        self.guards: list[tuple[Any, bool]] = []  # (guard band, second poison?) of this case's storages
        self.bodies: dict[int, Any] = {}  # storage address -> the storage between its bands, typed, 1-D

    def reset(self) -> None:
        """Forget the last case's guarded storages."""
        self.guards, self.bodies = [], {}

    def value(self, dtype: Any, second: bool) -> Any:
        """The first (NaN, True, integer maximum) or second (float maximum, False, integer minimum) poison."""
        if dtype.is_floating_point or dtype.is_complex:
            return self.torch.finfo(dtype).max if second else float("nan")
        if dtype == self.torch.bool:
            return not second
        info = self.torch.iinfo(dtype)
        return info.min if second else info.max

    def fill(self, tensor: Any) -> None:
        tensor.fill_(self.value(tensor.dtype, self.second))

    def holds(self, tensor: Any, second: bool) -> Any:
        """Which elements of ``tensor`` equal the first or second poison (any NaN for the first, floating point)."""
        if not second and (tensor.is_floating_point() or tensor.is_complex()):
            return tensor.isnan()
        return tensor == self.value(tensor.dtype, second)

    def _storage(self, tensor: Any, keep: bool, second: bool) -> Any:
        """A poisoned storage ``GUARD_BYTES`` longer at each end than ``tensor``'s, holding a copy of its bytes
        between the bands when ``keep``; the bands are kept to check with ``overrun``. [pad + span + pad]"""
        size, nbytes = tensor.element_size(), tensor.untyped_storage().nbytes()
        pad, span = -(-GUARD_BYTES // size), -(-nbytes // size)
        buf = self.empty((pad + span + pad,), dtype=tensor.dtype, device=tensor.device)
        buf.fill_(self.value(tensor.dtype, second))
        if keep:
            _bytes(self.torch, buf)[pad * size:pad * size + nbytes].copy_(_bytes(self.torch, tensor))
        self.guards += [(buf[:pad], second), (buf[pad + span:], second)]
        self.bodies[buf.untyped_storage().data_ptr()] = buf[pad:pad + span]
        return buf

    def _view(self, buf: Any, tensor: Any) -> Any:
        """``tensor``'s shape, strides and offset in guarded ``buf``."""
        pad = -(-GUARD_BYTES // tensor.element_size())
        inner = buf.as_strided(tensor.size(), tensor.stride(), pad + tensor.storage_offset()).detach()
        return inner.requires_grad_(tensor.requires_grad)

    def guarded(self, tensor: Any, keep: bool) -> Any:
        """``tensor`` moved into a guarded storage (``_storage``): its values too when ``keep``, else poison."""
        return self._view(self._storage(tensor, keep, self.second), tensor)

    def guard_inputs(self, inputs: tuple) -> tuple:
        """A copy of each tensor input in a guarded storage, bytes, shape and strides kept (so a load past its end
        reads the poison); inputs sharing a storage share the copy. Their bands hold the other poison than this
        run's allocations: a value loaded past an input's end and stored past an output's (``offs <= n`` on both)
        must change the output's band, which the same poison (NaN into NaN) left as it was."""
        copies: dict[tuple[int, Any], Any] = {}

        def guard(x: Any) -> Any:
            if not isinstance(x, self.torch.Tensor) or not x.numel():
                return x
            key = (x.untyped_storage().data_ptr(), x.dtype)
            if key not in copies:
                copies[key] = self._storage(x, keep=True, second=not self.second)
            return self._view(copies[key], x)

        return tuple(guard(x) for x in inputs)

    def body(self, tensor: Any) -> Any | None:
        """The part of ``tensor``'s storage between its guard bands (None when it has none)."""
        return self.bodies.get(tensor.untyped_storage().data_ptr())

    def clobbered(self, inputs: tuple, copies: tuple) -> list[int]:
        """Which of ``inputs`` differ in their guarded ``copies`` (bytes between the bands) after ``run()``."""
        return [i for i, (x, c) in enumerate(zip(inputs, copies, strict=True))
                if isinstance(x, self.torch.Tensor) and x.numel()
                and not self.torch.equal(self.body(c).view(self.torch.uint8)[:x.untyped_storage().nbytes()],
                                         _bytes(self.torch, x))]

    def overrun(self) -> str | None:
        """Why a guard band of this case's storages no longer holds its poison (a store outside a tensor); None."""
        hit = sum(not bool(self.holds(band, second).all()) for band, second in self.guards)
        return (f"a store landed outside {hit} tensor(s), inputs or allocated with torch.empty*/zeros*/ones*/full* "
                f"(within {GUARD_BYTES} bytes of an end): an out-of-bounds write (a mask off by one, "
                "`offs <= n`?)") if hit else None


def _poison_allocators(torch: Any, poison: _Poison) -> None:
    def guarding(fn: Any, keep: bool) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            if out.numel() and "out" not in kwargs:  # `out=t` resizes t: it must stay t
                return poison.guarded(out, keep)
            if not keep:
                poison.fill(out)
            return out
        return wrapper

    for names, methods, keep in ((_EMPTY_ALLOCATORS, _EMPTY_METHODS, False),
                                 (_VALUE_ALLOCATORS, _VALUE_METHODS, True)):
        for name in names:
            setattr(torch, name, guarding(getattr(torch, name), keep))
        for name in methods:
            setattr(torch.Tensor, name, guarding(getattr(torch.Tensor, name), keep))


def _load_candidate(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location("candidate", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"sandbox: cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, "run", None)):
        raise AttributeError(f"sandbox: {path} defines no run(*inputs) function")
    return module


def _kernel_classes() -> tuple[Any, ...]:
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    return JITFunction, InterpretedFunction


class _WriteTracker:
    """Which storages Triton launches wrote: uniform when first launched on (between their guard bands, where they
    have them: ``_Poison.body``), and their bytes after the last launch."""

    def __init__(self, torch: Any, poison: _Poison) -> None:
        self.torch = torch
        self.poison = poison
        self.launches: dict[str, dict[str, Any]] = {}
        self.fresh: dict[int, bool] = {}  # storage address -> uniform when a launch first took it
        self.after: dict[int, Any] = {}  # storage address -> its bytes after its last launch
        self.between: set[int] = set()  # storage addresses changed between two launches (by torch?)

    def _storage(self, tensor: Any) -> Any:
        """``tensor``'s storage as a 1-D tensor of its dtype: between its guard bands where it has them."""
        body = self.poison.body(tensor)
        if body is not None:
            return body
        if tensor.untyped_storage().nbytes() % tensor.element_size():
            return tensor.detach().reshape(-1)
        return self.torch.tensor([], dtype=tensor.dtype, device=tensor.device).set_(tensor.untyped_storage())

    def bytes_of(self, tensor: Any) -> Any:
        """The bytes of ``tensor``'s whole storage (NaN-safe to compare)."""
        return _bytes(self.torch, tensor)

    def _tensors(self, args: tuple, kwargs: dict[str, Any]) -> list[Any]:
        return [v for v in (*args, *kwargs.values()) if isinstance(v, self.torch.Tensor) and v.numel()]

    def on_launch(self, fn: Any, args: tuple, kwargs: dict[str, Any]) -> None:
        from polyrec.migrate.launch_capture import describe_launch

        record = describe_launch(fn, args, kwargs)
        self.launches.setdefault(json.dumps(record, sort_keys=True), record)
        for t in self._tensors(args, kwargs):
            key = t.untyped_storage().data_ptr()
            if key in self.after and not self.torch.equal(self.bytes_of(t), self.after[key]):
                self.between.add(key)
            if key not in self.fresh:
                flat = self._storage(t).detach()
                uniform = bool((flat == flat[0]).all()) or (flat.is_floating_point() and bool(flat.isnan().all()))
                self.fresh[key] = uniform

    def after_launch(self, fn: Any, args: tuple, kwargs: dict[str, Any]) -> None:
        for t in self._tensors(args, kwargs):
            key = t.untyped_storage().data_ptr()
            if self.fresh.get(key):
                self.after[key] = self.bytes_of(t).clone()

    def unwritten(self, out: Any) -> str | None:
        """Why ``out`` was not produced by a Triton launch; None when it was."""
        if not out.numel():
            return None
        key = out.untyped_storage().data_ptr()
        if key not in self.fresh:
            return "the output was not written by any Triton launch (computed by torch?)"
        if not self.fresh[key]:
            return "the output already held data when a Triton launch first took it (computed by torch?)"
        if key in self.between:
            return "the output was changed between two Triton launches (by torch?)"
        if not self.torch.equal(self.bytes_of(out), self.after[key]):
            return "the output was changed after its last Triton launch (by torch?)"
        return None

    def reset(self) -> None:
        self.fresh, self.after, self.between = {}, {}, set()


def _run_case(module: Any, inputs: tuple, torch: Any, tracker: _WriteTracker,
              poison: _Poison) -> tuple[Any, tuple, str | None]:
    """``run()`` once on guarded copies of ``inputs`` (``_Poison.guard_inputs``): its output, the copies, and why
    the output was not written by Triton launches or a store landed outside a guarded tensor (None when neither)."""
    tracker.reset()
    poison.reset()
    copies = poison.guard_inputs(inputs)
    out = module.run(*copies)
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"run() returned {type(out).__name__}, expected a torch.Tensor")
    return out, copies, poison.overrun() or tracker.unwritten(out)


def _second_poison_run(module: Any, inputs: tuple, out: Any, torch: Any, tracker: _WriteTracker,
                       poison: _Poison) -> str | None:
    """Run the case again with the second poison when ``out`` holds the first anywhere; why (elements no launch
    wrote: the first poison in the first output, the second in the second), None when none or not run again.
    Element by element, so a kernel whose other elements differ between runs (atomics) is not flagged."""
    first = poison.holds(out, second=False)
    if not bool(first.any()):
        return None
    poison.second = True
    try:
        again, _, unwritten = _run_case(module, inputs, torch, tracker, poison)
    finally:
        poison.second = False
    if unwritten:
        return f"on the second run: {unwritten}"
    if again.shape != out.shape or again.dtype != out.dtype:
        return f"the second run returned {tuple(again.shape)} {again.dtype}, the first {tuple(out.shape)} {out.dtype}"
    left = int((first & poison.holds(again, second=True)).sum())
    return f"{left} of {out.numel()} held the first poison, then the second" if left else None


def _run_cases(module: Any, cases: list[tuple], torch: Any, device: str, tracker: _WriteTracker,
               poison: _Poison) -> dict[str, Any]:
    outputs, aliased, unwritten, clobbered, second_poison = [], [], [], [], []
    for inputs in cases:
        inputs = tuple(x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs)
        out, copies, why = _run_case(module, inputs, torch, tracker, poison)
        unwritten.append(why)
        aliased.append(any(isinstance(x, torch.Tensor) and x.numel() and out.numel()
                           and x.untyped_storage().data_ptr() == out.untyped_storage().data_ptr()
                           for x in copies))
        clobbered.append(poison.clobbered(inputs, copies))
        outputs.append(out.detach().to("cpu").clone())
        checked = why is None and not aliased[-1] and not clobbered[-1]
        second_poison.append(_second_poison_run(module, inputs, out, torch, tracker, poison) if checked else None)
    return {"outputs": outputs, "aliased": aliased, "unwritten": unwritten, "clobbered": clobbered,
            "second_poison": second_poison, "launches": list(tracker.launches.values())}


def _compile_launches(module: Any, launches: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from triton.runtime.jit import JITFunction

    from polyrec.hardware import get_device
    from polyrec.hardware.catalog import UnknownDeviceError
    from polyrec.hardware.compile import compile_for
    from polyrec.migrate.launch_capture import job_from_launch

    reports, jobs = [], []
    for launch in launches:
        kernel = getattr(module, launch["kernel"], None)
        if not isinstance(kernel, JITFunction):
            reports.append({"device": "-", "label": launch["kernel"],
                            "error": f"kernel {launch['kernel']} is not a module-level @triton.jit function"})
            continue
        jobs.append(job_from_launch(kernel, launch))
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
    mode, candidate, in_file, out_file = argv[:4]
    if mode not in ("run", "compile"):
        raise ValueError(f"sandbox: unknown mode {mode!r} (run | compile)")
    blocked = set(argv[4].split(",")) if len(argv) > 4 and argv[4] else set()
    out_path = Path(out_file).resolve()
    os.environ["TRITON_CACHE_DIR"] = str(out_path.parent / "triton-cache")  # this candidate's own cache
    import torch  # imported (with triton) before the locks: their own import machinery is trusted

    import triton  # noqa: F401

    private_tmp = out_path.parent / f"{mode}-tmp"
    private_tmp.mkdir(exist_ok=True)
    tempfile.tempdir = str(private_tmp)  # ptxas / cuobjdump scratch files land where writes are allowed
    if mode == "run":
        payload: Any = torch.load(in_file, weights_only=True)
    else:
        payload = json.loads(Path(in_file).read_text())
    from polyrec.migrate.launch_capture import describe_launch, recording  # noqa: F401 (imported before the locks)

    kernel_classes = _kernel_classes()
    sys.meta_path.insert(0, _BlockImport(blocked))
    sys.addaudithook(_make_audit(_programs(mode), (os.path.realpath(out_path.parent),)))
    poison = _Poison(torch)
    _poison_allocators(torch, poison)
    if mode == "run":
        tracker = _WriteTracker(torch, poison)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        with recording(kernel_classes, tracker.on_launch, tracker.after_launch):
            module = _load_candidate(Path(candidate))
            result = _run_cases(module, payload, torch, device, tracker, poison)
        torch.save(result, out_path)
    else:
        module = _load_candidate(Path(candidate))
        out_path.write_text(json.dumps(_compile_launches(module, payload)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
