"""The embedding update's price against the committed kernel rows, offline (CPU).

``perfmodel.tbe_step.estimate`` prices a module's backward as the radix sort plus ``update_seconds`` (lane update,
permute and merge) plus row-wise Adagrad's per-row work. This takes the lane update + permute + merge levels
measured per step by ``tbe_breakdown`` on the H200 (``benchmarks/results/tbe_lane_ab_2026-11-30/``: the one-dim
kernel of the sixteenth session on the full MLPerf tables, uniform and skewed ids, fp32 and bf16 gradients;
each optimizer on tables capped at 4M rows, bf16 gradient; and the table-looking-up kernel that mixed dims
run, full tables; ``update_model_2026-12-01/``: three rows of today's kernel measured in the twenty-ninth
session), prices each row as ``estimate`` does (the update config ``tbe_select`` picks,
the tables' distinct rows from ``perfmodel.tbe_reads``, the committed calibration's copy rate) and prints the
error of each and their rms log error. Nothing is measured here.

    PYTHONPATH=.:benchmarks python3 benchmarks/update_model_check.py [--tag T]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from polyrec.hardware.calibrate import ceilings
from polyrec.hardware.catalog import get_device
from polyrec.kernels import tbe_select
from polyrec.perfmodel import tbe, tbe_step
from polyrec.perfmodel.tbe_lookup import ForwardTile
from polyrec.perfmodel.tbe_reads import TableLoad, unique_rows
from polyrec.planner import memory as mem
from polyrec.results import write_results
from tbe import DIM, MLPERF_HOTS, MLPERF_ROWS

RESULTS = Path(__file__).resolve().parent / "results"
CALIBRATION = RESULTS / "calibrate_nvidia-h200_2026-11-29.json"
BATCH = 65536
UPDATE_KERNELS = ("lane_update_kernel", "permute_kernel", "merge_level_kernel")
#: (label, tbe_breakdown file under benchmarks/results, optimizer, gradient element bytes, row cap (0: full),
#: ids, tables of one dim); the skewed rows' ids are tbe.py's (log-uniform ranks). The last three were
#: measured in the twenty-ninth session, after the update forms it tried were fitted (checks on new rows).
ROWS = (("one dim, fp32 gradient", "tbe_lane_ab_2026-11-30/s16c_F128_fp32_1", "rowwise_adagrad", 4, 0, "uniform", True),
        ("one dim, bf16 gradient", "tbe_lane_ab_2026-11-30/s16c_F128_bf16_1", "rowwise_adagrad", 2, 0, "uniform", True),
        ("one dim, fp32 gradient, skewed", "tbe_lane_ab_2026-11-30/s16c_F128_skewed_1", "rowwise_adagrad", 4, 0,
         "log_uniform", True),
        ("capped, SGD", "tbe_lane_ab_2026-11-30/s16d_N_sgd", "sgd", 2, 4_000_000, "uniform", True),
        ("capped, row-wise Adagrad", "tbe_lane_ab_2026-11-30/s16d_N_rowwise_adagrad", "rowwise_adagrad", 2, 4_000_000,
         "uniform", True),
        ("capped, Adagrad (152 cap)", "tbe_lane_ab_2026-11-30/s16d_N152_adagrad", "adagrad", 2, 4_000_000, "uniform",
         True),
        ("capped, Adam", "tbe_lane_ab_2026-11-30/s16d_N_adam", "adam", 2, 4_000_000, "uniform", True),
        ("table lookup, fp32 gradient", "tbe_lane_ab_2026-11-30/s16ab_E_fp32_1", "rowwise_adagrad", 4, 0, "uniform",
         False),
        ("table lookup, bf16 gradient", "tbe_lane_ab_2026-11-30/s16ab_E_bf16_1", "rowwise_adagrad", 2, 0, "uniform",
         False),
        ("table lookup, fp32 gradient, skewed", "tbe_lane_ab_2026-11-30/s16ab_E_skewed_1", "rowwise_adagrad", 4, 0,
         "log_uniform", False),
        ("full, SGD (new)", "update_model_2026-12-01/tbe_breakdown_full_sgd_gradbf16_nvidia-h200_2026-12-01", "sgd", 2,
         0, "uniform", True),
        ("capped 16M, Adam (new)", "update_model_2026-12-01/tbe_breakdown_cap16M_adam_gradbf16_nvidia-h200_2026-12-01",
         "adam", 2, 16_000_000, "uniform", True),
        ("capped 1M, fp32 gradient, skewed (new)",
         "update_model_2026-12-01/tbe_breakdown_cap1M_skewed_nvidia-h200_2026-12-01", "rowwise_adagrad", 4, 1_000_000,
         "log_uniform", True))


def kernel_ms(name: str, kernels: tuple[str, ...]) -> float:
    """ms per step of ``kernels`` (name prefixes) in a ``tbe_breakdown`` file (path under benchmarks/results)."""
    rows = json.loads((RESULTS / f"{name}.json").read_text())["results"]["kernels"]
    return sum(k["ms_per_step"] for k in rows if k["kernel"].startswith(kernels))


def measured_ms(name: str) -> float:
    """Lane update + permute + merge levels of a row; the s16ab rounds kept the lane update alone, so theirs
    come from the same call's s16c_A file of the case (the same table-looking-up permute and merge)."""
    if "/s16ab_E_" in name:
        return kernel_ms(name, UPDATE_KERNELS[:1]) + kernel_ms(name.replace("/s16ab_E_", "/s16c_A_"), UPDATE_KERNELS[1:])
    return kernel_ms(name, UPDATE_KERNELS)


def priced_ms(optimizer: str, grad_bytes: int, cap: int, skew: str, one_dim: bool) -> float:
    """``estimate``'s backward of the MLPerf tables less its sort and launch latencies: update + merge + the
    per-row work, in ms."""
    spec = get_device("H200")
    ceil = ceilings(spec, json.loads(CALIBRATION.read_text())["results"]["measured"])
    rows = [min(r, cap) if cap else r for r in MLPERF_ROWS]
    tables = [TableLoad(rows=r, row_bytes=4 * DIM, accesses=BATCH * h, skew=skew) for r, h in zip(rows, MLPERF_HOTS)]
    nnz = sum(t.accesses for t in tables)
    state_tiles = mem.STATE_PER_ELEMENT[optimizer]
    cfg = tbe_select.select_update(spec, nnz=nnz, block_d=DIM, row_bytes=4 * DIM, state_tiles=state_tiles,
                                   unique=sum(unique_rows(t) for t in tables), grad_bytes=grad_bytes,
                                   one_dim=one_dim)
    shape = tbe.UpdateShape(variant=cfg.variant, tile=cfg.tile, num_warps=cfg.num_warps, chunks=cfg.chunks,
                            merge_chunks=cfg.merge_chunks, grad_bytes=grad_bytes, one_dim=one_dim,
                            elems_per_thread=cfg.tile * DIM / (cfg.num_warps * spec.warp_size),
                            state_tiles=state_tiles, max_registers=cfg.max_registers)
    one_launch = [(ForwardTile(bags=4, hots=4, block_d=DIM, num_warps=2, vec=4, elem_bytes=4), range(len(tables)))]
    est = tbe_step.estimate(tables, batch_size=BATCH, out_dim=DIM * len(tables), out_bytes=4,
                            state_bytes_per_row=4 * (mem.STATE_PER_ROW[optimizer] + state_tiles * DIM), spec=spec,
                            ceil=ceil, fwd=one_launch, bwd=shape, row_state=mem.STATE_PER_ROW[optimizer] > 0)
    return 1e3 * (est.backward_s - est.sort_s - 2 * ceil.launch_latency.value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tag", default="", help="suffix of the results name")
    args = parser.parse_args()
    table = []
    for label, name, optimizer, grad_bytes, cap, skew, one_dim in ROWS:
        measured = measured_ms(name)
        predicted = priced_ms(optimizer, grad_bytes, cap, skew, one_dim)
        table.append({"row": label, "file": name, "measured_ms": measured, "predicted_ms": predicted,
                      "error": predicted / measured - 1})
        print(f"{label:<40} measured {measured:6.3f} ms, priced {predicted:6.3f} ({predicted / measured - 1:+.1%})")
    rms = math.sqrt(sum(math.log(1 + r["error"]) ** 2 for r in table) / len(table))
    print(f"rms log error {rms:.3f}")
    write_results("update_model_check" + (f"_{args.tag}" if args.tag else ""), {}, rows=table,
                  summary={"rms_log_error": rms, "rows": len(table)})


if __name__ == "__main__":
    main()
