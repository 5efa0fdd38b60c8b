"""Probe (one H200 run): does the embedding backward overlap the dense weight-gradient GEMMs when the two
get disjoint SMs, the TBE's kernels on a green context of ``c`` SMs?

``overlap_probe.py`` (eighteenth session) put the GEMMs on a green context but left the TBE kernels on
the primary context, where they still took every SM, and its carveout rows ran on the default cuBLAS path,
which ignores the carveout: neither case gave the two kernels' CTAs SMs of their own. Here the TBE
backward (the module's ``backward_stream``: sort, permute, lane update, merge) runs on a stream of a green
context of ``c`` SMs, and the 14 weight-gradient GEMMs of ``mlperf-dcnv2`` (``overlap_probe.WGRADS``) on
the primary context at high priority, either on the default cuBLAS path or on cuBLASLt leaving ``c`` SMs
free (``torch._C._set_sm_carveout_experimental``). Same MLPerf TBE as ``overlap_probe.py`` (full tables,
fp32 rows, row-wise Adagrad, bf16 output gradient, batch 65536, uniform ids). CUDA events, rounds
interleaved, each row the median of its rounds. Writes ``$OUT/partition_probe.json``.

    PYTHONPATH=.:benchmarks OUT=. python3 benchmarks/partition_probe.py
"""
from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from overlap_probe import green_stream, launch_gemms, mlperf_setup, set_carveout  # noqa: E402

#: SMs of the TBE's green context (of the H200's 132).
PARTITIONS = (24, 40, 66)
ROUNDS = 5


class Arm:
    """One placement: the TBE backward on ``tbe_stream`` (None: the current stream, no backward stream),
    the GEMMs (``gemms`` False: not run) on a high-priority stream of the primary context, cuBLASLt with
    ``carveout`` SMs left free when set. ``run`` returns (both, TBE done, GEMMs done) in ms from the start."""

    def __init__(self, name: str, *, tbe_stream=None, gemms: bool = True, carveout: int | None = None,
                 serial: bool = False):
        self.name, self.tbe_stream, self.gemms, self.carveout, self.serial = name, tbe_stream, gemms, carveout, serial
        self.gemm_stream = torch.cuda.Stream(priority=-1)

    def run(self, module, batch, grad, ops) -> tuple[float, float, float]:
        main = torch.cuda.current_stream()
        module.backward_stream = self.tbe_stream
        with torch.enable_grad():
            out = module(batch)
        torch.cuda.synchronize()
        start, tbe_end, gemm_end, end = (torch.cuda.Event(enable_timing=True) for _ in range(4))
        side = self.tbe_stream or main
        start.record(main)
        blas = torch.backends.cuda.preferred_blas_library()
        if self.carveout is not None:
            torch.backends.cuda.preferred_blas_library("cublaslt")
        set_carveout(self.carveout)
        try:
            if self.serial:
                out.backward(grad)
                tbe_end.record(main)
                launch_gemms(ops)
                gemm_end.record(main)
            else:
                side.wait_stream(main)
                if self.gemms:
                    self.gemm_stream.wait_stream(main)
                    with torch.cuda.stream(self.gemm_stream):
                        launch_gemms(ops)
                        gemm_end.record(self.gemm_stream)
                out.backward(grad)
                tbe_end.record(side)
                main.wait_stream(side)
                if self.gemms:
                    main.wait_stream(self.gemm_stream)
        finally:
            set_carveout(None)
            torch.backends.cuda.preferred_blas_library(blas)
            module.backward_stream = None
        end.record(main)
        torch.cuda.synchronize()
        return start.elapsed_time(end), start.elapsed_time(tbe_end), (
            start.elapsed_time(gemm_end) if self.gemms else float("nan"))


def arms(sms: int, notes: list[str]) -> tuple[list[Arm], list]:
    """The placements measured, and the green contexts they hold (kept alive while their streams run)."""
    out = [Arm("one stream, TBE then GEMMs", serial=True), Arm("TBE alone", gemms=False),
           Arm("GEMMs high priority, TBE on every SM", tbe_stream=None)]
    held = []
    for c in PARTITIONS:
        green, why = green_stream(c)
        if green is None:
            notes.append(f"green context of {c} SMs: {why}")
            continue
        held.append(green[0])
        out += [Arm(f"TBE alone on {c} SMs", tbe_stream=green[1], gemms=False),
                Arm(f"TBE on {c} SMs, GEMMs cuBLAS on all {sms}", tbe_stream=green[1]),
                Arm(f"TBE on {c} SMs, GEMMs cuBLASLt leaving {c}", tbe_stream=green[1], carveout=c)]
    return out, held


def main() -> None:
    out_dir = Path(os.environ.get("OUT", "/tmp"))
    module, batch, grad, ops = mlperf_setup(torch.Generator(device="cuda").manual_seed(0))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    res: dict = {"sms": sms, "torch": torch.__version__, "partitions": PARTITIONS, "rows": [], "notes": []}
    placements, held = arms(sms, res["notes"])
    live = []
    for arm in placements:  # warm: compile, select, cuBLAS heuristics; an arm that fails is reported and dropped
        try:
            arm.run(module, batch, grad, ops)
            live.append(arm)
        except Exception as e:  # noqa: BLE001 - the probe reports why
            res["notes"].append(f"{arm.name}: {type(e).__name__}: {e}")
    times: dict[str, list] = {a.name: [] for a in live}
    for _ in range(ROUNDS):
        for arm in live:
            times[arm.name].append(arm.run(module, batch, grad, ops))
    for name, rows in times.items():
        both, tbe, gemm = (statistics.median(x) for x in zip(*rows))
        res["rows"].append({"case": name, "both_ms": both, "tbe_done_ms": tbe, "gemms_done_ms": gemm})
    print(f"{'case':<46} {'both ms':>8} {'tbe done':>9} {'gemms done':>11}")
    for r in res["rows"]:
        print(f"{r['case']:<46} {r['both_ms']:>8.3f} {r['tbe_done_ms']:>9.3f} {r['gemms_done_ms']:>11.3f}")
    for n in res["notes"]:
        print("note:", n)
    res["green_contexts"] = len(held)
    (out_dir / "partition_probe.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
