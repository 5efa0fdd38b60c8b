"""CUDA-graph captures under stress: many graphed trainers in one process, with the graph's warm-up and the
precompile's dry steps selecting their GEMMs as the capture will (``gemm.selecting_as_captured``, the code)
and as the eager step would (the baseline: the fiftieth session's code, where the GEMMs only the capture
selects compiled and first loaded inside it).

The fiftieth session saw a capture fail once in four runs of ``tests/gpu/test_cold_start_gpu.py``
(``cudaErrorStreamCaptureInvalidated`` at the capture's first Triton GEMM, the process's fifth graphed
trainer). Each child here is a fresh process with an empty ``TRITON_CACHE_DIR`` that builds that file's
sequence of trainers (``SEQUENCE``) ``--cycles`` times, ``STEPS`` steps each, and counts the Triton kernels
compiled, and first loaded (``CompiledKernel._init_handles``), while a capture is in progress, and each
trainer that failed. Children alternate code / baseline. Writes ``capture_stress_<gpu>_<date>.{json,md}``
after each child; a child that would end after ``--budget-s`` is not started (listed as skipped).

    PYTHONPATH=.:benchmarks python3 benchmarks/capture_stress.py [--children 4] [--cycles 2] [--budget-s 480]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from typing import Any

from polyrec.results import write_results

STEPS = 6
#: (label, TrainConfig changes): the trainers of ``tests/gpu/test_cold_start_gpu.py`` in the order it makes them.
SEQUENCE = [("eager", dict(cuda_graphs=False)),
            ("eager, no precompile", dict(cuda_graphs=False, precompile=False)),
            ("fp8 graphed", dict(embedding_dtype="bf16", precision="fp8", cuda_graphs=True)),
            ("fp8 graphed, no precompile", dict(embedding_dtype="bf16", precision="fp8", cuda_graphs=True,
                                                precompile=False)),
            ("graphed", dict(cuda_graphs=True)),
            ("graphed", dict(cuda_graphs=True))]
MODES = ("code", "baseline")


def use_baseline() -> None:
    """The warm-up and the dry steps select GEMMs as an eager step (the code before ``selecting_as_captured``)."""
    import polyrec.runtime.cold_start as cold_start
    import polyrec.runtime.graphs as graphs

    graphs.selecting_as_captured = nullcontext
    cold_start.selecting_as_captured = nullcontext


def count_in_capture() -> dict[str, list[str]]:
    """Lists that fill with the kernels compiled, and first loaded, while the current stream is capturing."""
    import torch
    from triton.compiler.compiler import CompiledKernel
    from triton.runtime.jit import JITFunction

    found: dict[str, list[str]] = {"compiled": [], "loaded": []}
    do_compile, init_handles = JITFunction._do_compile, CompiledKernel._init_handles

    def compile_counted(self, *args):
        if torch.cuda.is_current_stream_capturing():
            found["compiled"].append(self.fn.__qualname__)
        return do_compile(self, *args)

    def load_counted(self):
        if self.module is None and torch.cuda.is_current_stream_capturing():
            found["loaded"].append(self.name)
        return init_handles(self)

    JITFunction._do_compile, CompiledKernel._init_handles = compile_counted, load_counted
    return found


def child(mode: str, cycles: int) -> None:
    from polyrec.runtime import TrainConfig, Trainer

    if mode == "baseline":
        use_baseline()
    found = count_in_capture()
    trainers = []
    for _ in range(cycles):
        for label, changes in SEQUENCE:
            cfg = TrainConfig(preset="dcnv2-small", data="synthetic:uniform", batch_size=2048, steps=STEPS,
                              device="cuda", embedding_backend="polyrec", dense_backend="polyrec", log_every=10**9,
                              **changes)
            try:
                trainer = Trainer(cfg, progress=False)
                for _ in range(STEPS):
                    float(trainer.train_step())
                trainers.append({"trainer": label, "error": None})
            except RuntimeError as exc:  # a failed capture: recorded, and the next trainer is tried
                trainers.append({"trainer": label, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0]}"})
    print(json.dumps({"trainers": trainers, **found}))


def run_child(mode: str, cycles: int) -> dict[str, Any]:
    env = {**os.environ, "TRITON_CACHE_DIR": tempfile.mkdtemp(prefix="polyrec-capture-")}
    proc = subprocess.run([sys.executable, __file__, "--child", mode, "--cycles", str(cycles)], env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return {"mode": mode, "crashed": proc.stderr[-2000:]}
    return {"mode": mode, **json.loads(proc.stdout.strip().splitlines()[-1])}


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per mode: children, children crashed, trainers, trainers failed, kernels compiled / first loaded in a capture."""
    summary: dict[str, Any] = {}
    for mode in MODES:
        runs = [r for r in results if r["mode"] == mode]
        done = [r for r in runs if "trainers" in r]
        summary[f"{mode}_children"] = len(runs)
        summary[f"{mode}_children_crashed"] = len(runs) - len(done)
        summary[f"{mode}_trainers"] = sum(len(r["trainers"]) for r in done)
        summary[f"{mode}_trainers_failed"] = sum(t["error"] is not None for r in done for t in r["trainers"])
        summary[f"{mode}_compiled_in_capture"] = sum(len(r["compiled"]) for r in done)
        summary[f"{mode}_loaded_in_capture"] = sum(len(r["loaded"]) for r in done)
    return summary


def write(results: list[dict[str, Any]], skipped: list[str]) -> tuple:
    """The results file of the children run so far (rewritten after each: a run cut short keeps them)."""
    rows = [{"mode": r["mode"], "crashed": "crashed" in r, "trainers": len(r.get("trainers", [])),
             "failed": sum(t["error"] is not None for t in r.get("trainers", [])),
             "compiled_in_capture": len(r.get("compiled", [])), "loaded_in_capture": len(r.get("loaded", []))}
            for r in results]
    summary = summarize(results) | {"children_skipped": skipped}
    return summary, write_results("capture_stress", {"children": results}, rows=rows, summary=summary)


def child_order(children: int) -> list[str]:
    """The modes of the children in run order: code and baseline alternate which goes first."""
    return [mode for i in range(children) for mode in (MODES if i % 2 == 0 else MODES[::-1])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--children", type=int, default=4, help="fresh processes per mode")
    parser.add_argument("--cycles", type=int, default=2, help="times each child makes the trainers' sequence")
    parser.add_argument("--budget-s", type=float, default=480.0,
                        help="wall seconds: a child that would end after them is not started")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.cycles)
        return
    start, results, skipped = time.perf_counter(), [], []
    order = child_order(args.children)
    for i, mode in enumerate(order):
        elapsed = time.perf_counter() - start
        if results and elapsed * (len(results) + 1) / len(results) > args.budget_s:
            skipped = [f"{m} ({j + 1} of {len(order)})" for j, m in enumerate(order) if j >= i]
            break
        results.append(run_child(mode, args.cycles))
        row = results[-1]
        print({"mode": mode, "crashed": "crashed" in row, "failed": [t for t in row.get("trainers", []) if t["error"]],
               "compiled_in_capture": row.get("compiled"), "loaded_in_capture": row.get("loaded"),
               "seconds": round(time.perf_counter() - start - elapsed, 1)}, flush=True)
        write(results, skipped)
    summary, paths = write(results, skipped)
    print(json.dumps(summary, indent=1))
    print("wrote", *paths)


if __name__ == "__main__":
    main()
