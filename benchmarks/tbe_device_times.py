"""Device time of forward + backward + update of ``tbe_shapes`` cases under the default selection, for
checking the cost model on cases it was not fitted on (``tbe_groups_model_check`` prices them offline).

Each case of ``--seed`` (drawn as ``tbe_shapes`` draws them) is built as the module builds it by default,
stepped on fresh batches, and its kernels summed by the torch profiler (the device time of a step; every
kernel's time is kept, where runs of the code up to c021ade kept the ten heaviest, and before 2026-12-07 eight;
since the seventy-second session each update launch of a step apart too, ``call_ms``: one per dim group);
``do_bench`` gives the step's wall time beside it (``tbe_shapes_probe.time_config``; the committed
seeds 21-22 run took 200 repetitions for it where time_config takes 300). Writes
``tbe_device_times_<gpu>_<date>.json``.

    PYTHONPATH=.:benchmarks python3 benchmarks/tbe_device_times.py --seed 21 [--seed 22] [--cases 16]
"""

from __future__ import annotations

import argparse

import torch
from tbe_shapes import make_batch, seed_cases
from tbe_shapes_probe import time_config

from polyrec.results import write_results


def measure(seed: int, index: int, case: dict, gen: torch.Generator) -> dict:
    batches = [make_batch(case, gen) for _ in range(3)]
    timed = time_config(case, batches, (case["batch"], sum(case["dims"])), None, gen)  # one pooled feature per table
    return {"seed": seed, "case": index, "dims": "/".join(str(d) for d in sorted(set(case["dims"]))),
            "batch": case["batch"], "dtype": case["dtype"], "optimizer": case["optimizer"], "nnz": batches[0].nnz,
            "update": timed["config"], "device_ms": timed["device_ms"], "step_ms": timed["step_ms"],
            "kernels": timed["kernels"]}  # all: the sort's memsets and the merge are light but priced


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, action="append", default=[])
    parser.add_argument("--cases", type=int, default=16, help="cases drawn per seed (as tbe_shapes --cases)")
    args = parser.parse_args()
    rows = []
    for seed in args.seed or [21]:
        cases = seed_cases(seed, args.cases)
        gen = torch.Generator(device="cuda").manual_seed(seed)
        for index, case in enumerate(cases):
            row = measure(seed, index, case, gen)
            rows.append(row)
            print(f"seed {seed} case {index:>2} {row['dims']:>16} B={row['batch']:>5} {row['dtype']} {row['optimizer']:>15}: "
                  f"device {row['device_ms']:7.3f} ms, step {row['step_ms']:7.3f} ms ({row['update']})", flush=True)
            torch.cuda.empty_cache()
    write_results("tbe_device_times", {"rows": rows}, rows=[{k: v for k, v in r.items() if k != "kernels"} for r in rows],
                  summary={"seeds": args.seed or [21], "cases": len(rows)})


if __name__ == "__main__":
    main()
