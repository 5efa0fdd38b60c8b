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

``--split``: the same backward as two TBEs, the 100-hot feature's table (``SPLIT_LATE``: 6.55M of the
batch's 10.2M unique rows) and the other 25, the first on the green context beside the GEMMs and the second
on every SM once the GEMMs are done (an order a trainer could give them), against both on one stream.
Writes ``$OUT/partition_probe_split.json``.

    PYTHONPATH=.:benchmarks OUT=. python3 benchmarks/partition_probe.py [--split]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from overlap_probe import gemm_operands, green_stream, launch_gemms, mlperf_tbe, set_carveout  # noqa: E402
from tbe import MLPERF_ROWS  # noqa: E402

#: SMs of the TBE's green context (of the H200's 132).
PARTITIONS = (24, 40, 66)
#: ``--split``: the partitions tried, and the features of the TBE run after the GEMMs. The other 25 take
#: ~40% of the backward, about what the 40-SM partition did beside the GEMMs in the first run (39% of the
#: backward in their 4.19 ms).
SPLIT_PARTITIONS = (40, 66)
SPLIT_LATE = (20,)
ROUNDS = 5


@contextlib.contextmanager
def gemm_library(carveout: int | None):
    """cuBLASLt leaving ``carveout`` SMs free while the GEMMs are launched (None: torch's default path)."""
    blas = torch.backends.cuda.preferred_blas_library()
    if carveout is not None:
        torch.backends.cuda.preferred_blas_library("cublaslt")
    set_carveout(carveout)
    try:
        yield
    finally:
        set_carveout(None)
        torch.backends.cuda.preferred_blas_library(blas)


def _events(n: int) -> list[torch.cuda.Event]:
    return [torch.cuda.Event(enable_timing=True) for _ in range(n)]


class Arm:
    """One placement: the TBE backward on ``tbe_stream`` (None: the current stream, no backward stream),
    the GEMMs (``gemms`` False: not run) on a high-priority stream of the primary context, cuBLASLt with
    ``carveout`` SMs left free when set. ``run`` returns (both, TBE done, GEMMs done) in ms from the start."""

    def __init__(self, name: str, *, tbe_stream=None, gemms: bool = True, carveout: int | None = None,
                 serial: bool = False):
        self.name, self.tbe_stream, self.gemms, self.carveout, self.serial = name, tbe_stream, gemms, carveout, serial
        self.gemm_stream = torch.cuda.Stream(priority=-1)

    def run(self, tbes, ops) -> tuple[float, float, float]:
        (module, batch, grad), = tbes
        main = torch.cuda.current_stream()
        module.backward_stream = self.tbe_stream
        with torch.enable_grad():
            out = module(batch)
        torch.cuda.synchronize()
        start, tbe_end, gemm_end, end = _events(4)
        side = self.tbe_stream or main
        start.record(main)
        try:
            with gemm_library(self.carveout):
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
            module.backward_stream = None
        end.record(main)
        torch.cuda.synchronize()
        return start.elapsed_time(end), start.elapsed_time(tbe_end), (
            start.elapsed_time(gemm_end) if self.gemms else float("nan"))


class SplitArm:
    """The backward of two TBEs (``tbes``: the early features, then the late) and the GEMMs. ``green``: the
    early backward on that stream beside the GEMMs (high priority; cuBLASLt leaving ``carveout`` SMs when
    set), the late one on the current stream once the GEMMs are done. None: both on the current stream,
    the GEMMs after them (``serial``) or beside them at high priority. ``run`` as ``Arm.run``."""

    def __init__(self, name: str, *, green=None, carveout: int | None = None, serial: bool = False):
        self.name, self.green, self.carveout, self.serial = name, green, carveout, serial
        self.gemm_stream = torch.cuda.Stream(priority=-1)

    def run(self, tbes, ops) -> tuple[float, float, float]:
        (early, batch_e, grad_e), (late, batch_l, grad_l) = tbes
        main = torch.cuda.current_stream()
        early.backward_stream = self.green
        with torch.enable_grad():
            out_e, out_l = early(batch_e), late(batch_l)
        torch.cuda.synchronize()
        start, tbe_end, gemm_end, end = _events(4)
        start.record(main)
        try:
            with gemm_library(self.carveout):
                if self.serial:
                    out_e.backward(grad_e)
                    out_l.backward(grad_l)
                    tbe_end.record(main)
                    launch_gemms(ops)
                    gemm_end.record(main)
                else:
                    side = self.green or main
                    side.wait_stream(main)
                    self.gemm_stream.wait_stream(main)
                    with torch.cuda.stream(self.gemm_stream):
                        launch_gemms(ops)
                        gemm_end.record(self.gemm_stream)
                    out_e.backward(grad_e)
                    if self.green is not None:
                        main.wait_stream(self.gemm_stream)
                    out_l.backward(grad_l)
                    main.wait_stream(side)
                    tbe_end.record(main)
                    main.wait_stream(self.gemm_stream)
        finally:
            early.backward_stream = None
        end.record(main)
        torch.cuda.synchronize()
        return start.elapsed_time(end), start.elapsed_time(tbe_end), start.elapsed_time(gemm_end)


def green_streams(partitions: tuple[int, ...], notes: list[str]) -> tuple[list[tuple[int, object]], list]:
    """(SMs, stream) of a green context per partition that could be made (why not: in ``notes``), and the
    contexts, to be kept alive while their streams run."""
    streams, held = [], []
    for c in partitions:
        green, why = green_stream(c)
        if green is None:
            notes.append(f"green context of {c} SMs: {why}")
            continue
        held.append(green[0])
        streams.append((c, green[1]))
    return streams, held


def arms(sms: int, notes: list[str]) -> tuple[list[Arm], list]:
    """The placements measured, and the green contexts they hold."""
    streams, held = green_streams(PARTITIONS, notes)
    out = [Arm("one stream, TBE then GEMMs", serial=True), Arm("TBE alone", gemms=False),
           Arm("GEMMs high priority, TBE on every SM", tbe_stream=None)]
    for c, stream in streams:
        out += [Arm(f"TBE alone on {c} SMs", tbe_stream=stream, gemms=False),
                Arm(f"TBE on {c} SMs, GEMMs cuBLAS on all {sms}", tbe_stream=stream),
                Arm(f"TBE on {c} SMs, GEMMs cuBLASLt leaving {c}", tbe_stream=stream, carveout=c)]
    return out, held


def split_arms(sms: int, notes: list[str]) -> tuple[list[SplitArm], list]:
    """``arms`` of ``--split``."""
    streams, held = green_streams(SPLIT_PARTITIONS, notes)
    out = [SplitArm("one stream, both TBEs then GEMMs", serial=True),
           SplitArm("GEMMs high priority, both TBEs on every SM")]
    for c, stream in streams:
        out += [SplitArm(f"early TBE on {c} SMs, GEMMs cuBLAS on all {sms}", green=stream),
                SplitArm(f"early TBE on {c} SMs, GEMMs cuBLASLt leaving {c}", green=stream, carveout=c)]
    return out, held


def measure(placements, tbes, ops, res: dict) -> None:
    """Warm every placement (an arm that fails is reported and dropped), then time ROUNDS interleaved rounds
    into ``res["rows"]`` (medians) and print them."""
    live = []
    for arm in placements:
        try:
            arm.run(tbes, ops)
            live.append(arm)
        except Exception as e:  # noqa: BLE001 - the probe reports why
            res["notes"].append(f"{arm.name}: {type(e).__name__}: {e}")
    times: dict[str, list] = {a.name: [] for a in live}
    for _ in range(ROUNDS):
        for arm in live:
            times[arm.name].append(arm.run(tbes, ops))
    for name, rows in times.items():
        both, tbe, gemm = (statistics.median(x) for x in zip(*rows))
        res["rows"].append({"case": name, "both_ms": both, "tbe_done_ms": tbe, "gemms_done_ms": gemm})
    print(f"{'case':<52} {'both ms':>8} {'tbe done':>9} {'gemms done':>11}")
    for r in res["rows"]:
        print(f"{r['case']:<52} {r['both_ms']:>8.3f} {r['tbe_done_ms']:>9.3f} {r['gemms_done_ms']:>11.3f}")
    for n in res["notes"]:
        print("note:", n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", action="store_true", help="two TBEs, the first beside the GEMMs on a partition")
    args = parser.parse_args()
    out_dir = Path(os.environ.get("OUT", "/tmp"))
    gen = torch.Generator(device="cuda").manual_seed(0)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    res: dict = {"sms": sms, "torch": torch.__version__, "rows": [], "notes": []}
    if args.split:
        late = list(SPLIT_LATE)
        early = [f for f in range(len(MLPERF_ROWS)) if f not in late]
        tbes = [mlperf_tbe(gen, early), mlperf_tbe(gen, late)]
        res.update(partitions=SPLIT_PARTITIONS, late_features=late)
        placements, held = split_arms(sms, res["notes"])
    else:
        tbes = [mlperf_tbe(gen)]
        res.update(partitions=PARTITIONS)
        placements, held = arms(sms, res["notes"])
    ops = gemm_operands(gen)
    measure(placements, tbes, ops, res)
    res["green_contexts"] = len(held)
    name = "partition_probe_split.json" if args.split else "partition_probe.json"
    (out_dir / name).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
