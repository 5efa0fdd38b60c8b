"""Does ``--cuda-graphs auto`` pick the faster of eager and graphed? Measured on the GPU, per config.

For each configuration auto's choice and reason are asked as the trainer asks them
(``polyrec.runtime.graphs.choose_graphs``; nothing is built or timed), then the trainer is built
eager and graphed (both timed, ``Trainer.benchmark``). A row is right
when auto's choice is the faster measured path, or the two are within ``TIE`` of each other.

    PYTHONPATH=. python3 benchmarks/graphs_auto_check.py [--steps 30]

About 3 minutes on an H200 (tables capped at 4M rows).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc

import torch

from polyrec.models import preset
from polyrec.results import write_results
from polyrec.runtime import TrainConfig, Trainer
from polyrec.runtime.config import resolve
from polyrec.runtime.graphs import choose_graphs
from profiling import PROBE_POOL

#: (preset, batch): host-bound and device-bound steps of the three presets.
CONFIGS = (("mlperf-dcnv2", 16384), ("mlperf-dcnv2", 65536), ("dcnv2-small", 16384), ("dcnv2-small", 65536),
           ("dlrm-criteo-kaggle", 16384), ("dlrm-criteo-kaggle", 65536))
#: Step times this close (relative) count as a tie: either choice is right.
TIE = 0.03


def timed(cfg: TrainConfig, steps: int) -> float:
    """Median step ms of a fresh trainer for ``cfg``."""
    trainer = Trainer(cfg, progress=False)
    ms = trainer.benchmark(warmup=5, steps=steps)["median_step_ms"]
    del trainer
    gc.collect()
    torch.cuda.empty_cache()
    return ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--row-cap", type=int, default=4_000_000)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("graphs_auto_check needs a GPU")
    rows = []
    for name, batch in CONFIGS:
        base = TrainConfig(preset=name, batch_size=batch, row_cap=args.row_cap, steps=10**9, synthetic_pool=PROBE_POOL,
                           device="cuda")
        model = preset(name).with_capped_rows(args.row_cap)  # synthetic data keeps the preset's tables
        choice = choose_graphs(base, resolve(base), model, distributed=False)
        eager = timed(dataclasses.replace(base, cuda_graphs=False), args.steps)
        graphed = timed(dataclasses.replace(base, cuda_graphs=True), args.steps)
        faster = graphed < eager
        rows.append({"preset": name, "batch": batch, "auto_graphs": choice.on, "reason": choice.reason,
                     "eager_ms": eager, "graphed_ms": graphed, "graphed_over_eager": graphed / eager,
                     "right": choice.on == faster or abs(graphed / eager - 1) <= TIE})
        print(rows[-1], flush=True)
    summary = {"rows_right": sum(r["right"] for r in rows), "rows": len(rows), "tie": TIE}
    write_results("graphs_auto_check", {"rows": rows}, rows=rows, summary=summary)
    print(summary)


if __name__ == "__main__":
    main()
