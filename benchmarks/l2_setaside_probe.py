"""Does an L2 set-aside for persisting accesses keep the update's gradient slices in L2?

The lane update loads each id's output-gradient slice with an evict-last hint (a bag's other ids read the
slice again), yet the gradient misses L2 for ~0.7 ms of the fp32-gradient update (docs/tbe.md, the
twenty-ninth session's folded-gradient run). On NVIDIA GPUs since sm_80 lines marked persisting get a
set-aside part of L2 of their own (``cudaLimitPersistingL2CacheSize``, 0 by default; CUDA programming
guide, "L2 Cache Control"). Whether a PTX evict-last load counts as persisting is not documented, so this
measures it, in one process on the MLPerf tables (full size, fp32 rows, uniform ids, row-wise Adagrad):
the forward and the forward + backward + update (``tbe.time_module``) with the set-aside at 0 and at the
device's maximum, in alternating rounds, for an fp32 output gradient (``tbe.py``'s case) and a bf16 one
(the training step's). The set-aside is set through the driver API (``cuCtxSetLimit`` on torch's
primary context) and read back.

    PYTHONPATH=.:benchmarks python3 benchmarks/l2_setaside_probe.py [--rounds 3] [--grads fp32,bf16] \
        [--setasides-mb 4,8,16]

About two minutes on an H200 (the fp32 tables take 108 GB).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import statistics

import torch
from tbe import BATCHES, DIM, MLPERF_HOTS, MLPERF_ROWS, make_batch, time_module

from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec
from polyrec.results import write_results

#: CUDA driver API enums (cuda.h): CU_LIMIT_PERSISTING_L2_CACHE_SIZE, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE,
#: CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE, CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE.
LIMIT_PERSISTING_L2 = 0x06
ATTR_L2_BYTES, ATTR_MAX_PERSISTING_L2, ATTR_MAX_WINDOW = 38, 108, 109
GRAD_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


class Driver:
    """The few driver calls the probe needs, on the context current on this thread (torch's primary one)."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libcuda.so.1")

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"{what} failed with CUresult {rc}")

    def attribute(self, attr: int, device: int = 0) -> int:
        value = ctypes.c_int()
        self._check(self.lib.cuDeviceGetAttribute(ctypes.byref(value), attr, device), f"cuDeviceGetAttribute({attr})")
        return value.value

    def set_persisting_l2(self, nbytes: int) -> int:
        """Set the persisting set-aside and return what the driver reports back."""
        self._check(self.lib.cuCtxSetLimit(LIMIT_PERSISTING_L2, ctypes.c_size_t(nbytes)), "cuCtxSetLimit")
        value = ctypes.c_size_t()
        self._check(self.lib.cuCtxGetLimit(ctypes.byref(value), LIMIT_PERSISTING_L2), "cuCtxGetLimit")
        return value.value


def measure(grad_name: str, setasides: list[int], driver: Driver, rounds: int, gen: torch.Generator) -> list[dict]:
    """Per round and set-aside (alternating), the forward and the fwd+bwd+update of the MLPerf module."""
    tables = [TableSpec(name=f"t{i}", rows=r, dim=DIM) for i, r in enumerate(MLPERF_ROWS)]
    grad_dtype = GRAD_DTYPES[grad_name]
    module = TableBatchedEmbedding(tables, optimizer=EmbeddingOptimizer(kind="rowwise_adagrad", lr=0.01),
                                   output_dtype=grad_dtype, device="cuda")
    batch_size = 65536
    batches = [make_batch(MLPERF_ROWS, MLPERF_HOTS, batch_size, False, gen) for _ in range(BATCHES)]
    grad = torch.randn(batch_size, DIM * len(tables), device="cuda", generator=gen).to(grad_dtype)
    out = []
    for r in range(rounds):
        for asked in setasides:
            got = driver.set_persisting_l2(asked)
            fwd_ms, step_ms = time_module(module, batches, grad)
            out.append({"grad": grad_name, "round": r, "setaside_asked": asked, "setaside_set": got,
                        "fwd_ms": fwd_ms, "step_ms": step_ms, "bwd_ms": step_ms - fwd_ms})
            print(out[-1], flush=True)
    driver.set_persisting_l2(0)
    del module, batches, grad
    gc.collect()
    torch.cuda.empty_cache()
    return out


def summarize(rows: list[dict]) -> dict:
    """Per gradient dtype and set-aside: median backward (step - forward) and step over the rounds, and the
    backward's change from no set-aside."""
    summary = {}
    for grad in sorted({r["grad"] for r in rows}):
        mine = [r for r in rows if r["grad"] == grad]
        by = {a: [r for r in mine if r["setaside_asked"] == a] for a in sorted({r["setaside_asked"] for r in mine})}
        med = {a: {"bwd_ms": statistics.median(r["bwd_ms"] for r in rs),
                   "step_ms": statistics.median(r["step_ms"] for r in rs)} for a, rs in by.items()}
        base = med[min(med)]["bwd_ms"]
        summary[grad] = {f"setaside_{a}": m | {"bwd_change": m["bwd_ms"] / base - 1} for a, m in med.items()}
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per set-aside (at least 1)")
    parser.add_argument("--grads", default="fp32,bf16", help="output-gradient dtypes, of fp32 and bf16")
    parser.add_argument("--setasides-mb", default="",
                        help="set-asides to compare with none, in MiB, comma-separated (default: the device's maximum)")
    args = parser.parse_args()
    grads = args.grads.split(",")
    if args.rounds < 1 or not grads or any(g not in GRAD_DTYPES for g in grads):
        raise SystemExit("--rounds must be >= 1 and --grads a comma-separated list of fp32, bf16")
    try:
        asked = [int(float(mb) * 2**20) for mb in args.setasides_mb.split(",") if mb]
    except ValueError:
        raise SystemExit(f"--setasides-mb: not a list of numbers: {args.setasides_mb!r}") from None
    if any(a <= 0 for a in asked):
        raise SystemExit("--setasides-mb: each set-aside must be > 0 (none is always measured)")
    torch.cuda.init()
    torch.zeros(1, device="cuda")  # the primary context current on this thread
    driver = Driver()
    device = {"l2_bytes": driver.attribute(ATTR_L2_BYTES),
              "max_persisting_l2": driver.attribute(ATTR_MAX_PERSISTING_L2),
              "max_window": driver.attribute(ATTR_MAX_WINDOW)}
    print(device, flush=True)
    gen = torch.Generator(device="cuda").manual_seed(0)
    if any(a > device["max_persisting_l2"] for a in asked):
        raise SystemExit(f"--setasides-mb: at most {device['max_persisting_l2'] / 2**20:g} MiB on this device")
    setasides = [0, *(asked or [device["max_persisting_l2"]])]
    rows = [row for g in grads for row in measure(g, setasides, driver, args.rounds, gen)]
    summary = device | summarize(rows)
    write_results("l2_setaside_probe", {"rows": rows, "summary": summary}, rows=rows, summary=summary)
    print(summary)


if __name__ == "__main__":
    main()
