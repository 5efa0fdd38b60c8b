"""Each lane-update launch of the profiled steps (the second step's, ncu's CSV here) against the planner's price of it
and the cuda:90 static count of its layout (../lane_counts_2026-12-07/): executed warp instructions over the count
times the launch's active programs' loop trips, the issue slots busy, DRAM throughput.

    PYTHONPATH=.:benchmarks python3 benchmarks/results/lane_ncu_2026-12-07/ncu_vs_counts.py [COUNTS.json] > OUT.txt

COUNTS.json: a ``sass_count --lane-grid`` run (default GRID, the counts before ``loop_path`` took the if-then case).
"""

import csv
import json
import math
import sys
from pathlib import Path

from lane_model_check import lane_price_s
from merge_model_fit import CASES_PER_SEED, RUN_GRAD_BYTES, planned_updates
from tbe_groups_model_check import shard_loads
from tbe_shapes import seed_cases

from polyrec.kernels.tbe_optim import STATE_PER_ELEMENT

HERE = Path(__file__).resolve().parent
GRID = HERE.parent / "lane_counts_2026-12-07" / "sass_count_lane_grid_cpu_2026-12-07.json"


def launches(path: Path) -> list[dict]:
    by_id: dict[str, dict] = {}
    for row in csv.DictReader(line for line in path.open() if not line.startswith("==")):
        by_id.setdefault(row["ID"], {"grid": row["Grid Size"]})[row["Metric Name"]] = float(
            row["Metric Value"].replace(",", ""))
    return [by_id[k] for k in sorted(by_id, key=int)]


def main() -> None:
    grid = Path(sys.argv[1]) if len(sys.argv) > 1 else GRID
    counts = {r["label"].rsplit(" w", 1)[0]: r for r in json.loads(grid.read_text())["results"]["rows"]}
    print(f"{'case':8} {'launch':24} {'ms':>6} {'priced':>6} {'inst M':>8} {'count M':>8} {'ratio':>5} "
          f"{'issue%':>6} {'dram%':>5} {'warps%':>6}")
    for path in sorted(HERE.glob("s*_c*.csv")):
        seed, case_index = (int(x[1:]) for x in path.stem.split("_"))
        case = seed_cases(seed, CASES_PER_SEED)[case_index]
        module, *groups = planned_updates(shard_loads(case), "H100", RUN_GRAD_BYTES)
        groups = groups or [module]
        measured = launches(path)[-len(groups):]  # the second step's launches
        for (shape, kw), got in zip(groups, measured):
            block_d = int(shape.block_d(32))
            form = "one dim" if shape.one_dim else "mixed grouped"
            key = f"lane {form} {case['optimizer']} D{block_d} tile{shape.tile}"
            count = counts.get(key)
            active = math.ceil(kw["nnz"] / (shape.tile * shape.chunks))
            counted = active * shape.chunks * count["loop_path"] * shape.num_warps if count else float("nan")
            inst = got["smsp__inst_executed.sum"]
            priced = lane_price_s(shape, "H100", kw, case["optimizer"]) * 1e3
            label = f"{case['dtype']} {case['optimizer'][:7]} D{block_d} t{shape.tile}"
            print(f"{seed}:{case_index:<5} {label:24} {got['gpu__time_duration.sum'] / 1e6:6.3f} {priced:6.3f} "
                  f"{inst / 1e6:8.1f} {counted / 1e6:8.1f} {inst / counted:5.2f} "
                  f"{got['smsp__issue_active.avg.pct_of_peak_sustained_active']:6.1f} "
                  f"{got['dram__throughput.avg.pct_of_peak_sustained_elapsed']:5.1f} "
                  f"{got['sm__warps_active.avg.pct_of_peak_sustained_active']:6.1f}")


if __name__ == "__main__":
    main()
