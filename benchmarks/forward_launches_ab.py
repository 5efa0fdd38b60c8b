"""Explicit launch plans of the MLPerf tables' pooled forward, timed side by side in interleaved rounds.

A forward-model change can change the launches a module plans (``tbe_forward_plan.plan_forward``) where its
constants alone cannot give the old plan back. This times plans written out, each a list of launches
``BAGSxHOTSwWARPS:FEATURES`` joined by ``;`` (FEATURES: comma-separated feature numbers, or ``all``), on the MLPerf
tables (full size unless capped) at one batch size and row dtype, under the benchmark's uniform ids and the
trainer's power-law ids. Writes ``forward_launches_ab_<gpu>_<date>.json``.

    PYTHONPATH=.:benchmarks python3 benchmarks/forward_launches_ab.py --batch 16384 --dtype fp16 \\
        --plan "old=4x4w2:0,1,3;16x1w2:2,4,5" --plan "new=4x4w2:all" [--rounds 5] [--row-cap N]
"""

from __future__ import annotations

import argparse
import re

import torch
from tbe import bench_ms
from tbe_forward_ab import plan_batches, rowwise_module

from polyrec.kernels.jagged import JaggedBatch
from polyrec.kernels.tbe import TableBatchedEmbedding
from polyrec.kernels.tbe_select import ForwardConfig
from polyrec.models.config import preset
from polyrec.results import write_results
from polyrec.runtime.config import EMBEDDING_DTYPES


def parse_plan(text: str, features: int) -> tuple[str, list[tuple[ForwardConfig, list[int]]]]:
    """``NAME=LAUNCH;LAUNCH...`` as (name, [(config, features), ...]); every feature in exactly one launch."""
    name, sep, body = text.partition("=")
    if not sep or not name:
        raise SystemExit(f"--plan {text!r}: expected NAME=BAGSxHOTSwWARPS:FEATURES[;...]")
    launches, seen = [], []
    for part in body.split(";"):
        match = re.fullmatch(r"(\d+)x(\d+)w(\d+):(all|\d+(?:,\d+)*)", part.strip())
        if match is None:
            raise SystemExit(f"--plan {name}: launch {part!r} is not BAGSxHOTSwWARPS:FEATURES")
        bags, hots, warps = map(int, match.groups()[:3])
        ids = list(range(features)) if match[4] == "all" else [int(f) for f in match[4].split(",")]
        launches.append((ForwardConfig(bags=bags, hots=hots, num_warps=warps), ids))
        seen += ids
    if sorted(seen) != list(range(features)):
        raise SystemExit(f"--plan {name}: its launches must read each of the {features} features once, read {seen}")
    return name, launches


def time_plans(module: TableBatchedEmbedding, batch: JaggedBatch, plans: dict, rounds: int) -> dict[str, list[float]]:
    """ms of each plan's launches, ``rounds`` interleaved measurements each."""
    out = torch.empty(batch.batch_size, module.output_dim, device="cuda")
    device_plans = {name: [(cfg, torch.tensor(ids, device="cuda", dtype=torch.int32)) for cfg, ids in launches]
                    for name, launches in plans.items()}

    def run(launches) -> None:
        for cfg, ids in launches:
            module.launch_pooled(batch, out, ids, cfg)

    times = {name: [] for name in plans}
    for _ in range(rounds):
        for name, launches in device_plans.items():
            times[name].append(bench_ms(lambda launches=launches: run(launches)))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=65536)
    parser.add_argument("--dtype", choices=sorted(EMBEDDING_DTYPES), default="fp32")
    parser.add_argument("--plan", action="append", required=True, help="NAME=BAGSxHOTSwWARPS:FEATURES[;...]")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--row-cap", type=int, default=0, help="rows per table at most (0: full size)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("forward_launches_ab times GPU kernels: run it on a GPU")
    config = preset("mlperf-dcnv2")
    if args.row_cap:
        config = config.with_capped_rows(args.row_cap)
    rows = list(config.table_rows)
    plans = dict(parse_plan(text, len(rows)) for text in args.plan)
    module = rowwise_module(rows, EMBEDDING_DTYPES[args.dtype])
    batches = plan_batches(config, args.batch)
    table = []
    for ids, batch in batches.items():
        times = time_plans(module, batch, plans, args.rounds)
        for name, ms in times.items():
            table.append({"ids": ids, "plan": name, "min_ms": min(ms), "ms": ms})
            print(f"{ids:<9} {name:<12} {min(ms):.4f} ms (rounds {', '.join(f'{t:.4f}' for t in ms)})", flush=True)
    write_results("forward_launches_ab", {"rows": table}, rows=[{k: v for k, v in r.items() if k != "ms"}
                                                                 for r in table],
                  summary={"batch": args.batch, "dtype": args.dtype, "row_cap": args.row_cap, "rounds": args.rounds,
                           "plans": args.plan})


if __name__ == "__main__":
    main()
