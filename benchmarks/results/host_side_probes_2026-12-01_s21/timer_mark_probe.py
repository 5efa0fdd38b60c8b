"""The trainer's phase timer marks (a CUDA event per phase start and stop) with the current stream looked
up without a device (``event.record()``, before) and for the timer's device index (after): per-call
host time of the two lookups, then one trainer per config timing blocks of steps with each, alternating;
JSON to argv[1].

    PYTHONPATH=<checkout> python3 timer_mark_probe.py OUT.json
"""
import json
import statistics
import sys
import time

import torch

from polyrec.runtime import TrainConfig, Trainer
from polyrec.runtime import metrics

CONFIGS = (("dcnv2-small", 16384, True), ("mlperf-dcnv2", 16384, False))
ROUNDS, WARMUP, STEPS = 6, 2, 30


def per_call_us(fn, calls: int = 20000) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return 1e6 * (time.perf_counter() - start) / calls


def mark_before(self):
    event = torch.cuda.Event(enable_timing=True)
    event.record()
    return event


def main() -> None:
    torch.cuda.init()
    out = {"current_stream_us": {"no device": per_call_us(lambda: torch.cuda.current_stream()),
                                 "device index": per_call_us(lambda: torch.cuda.current_stream(0))},
           "rows": []}
    print(out["current_stream_us"], flush=True)
    after = metrics.PhaseTimer._mark
    for preset, batch, graphs in CONFIGS:
        trainer = Trainer(TrainConfig(preset=preset, batch_size=batch, row_cap=4_000_000, steps=10**6,
                                      synthetic_pool=4, cuda_graphs=graphs), progress=False)
        trainer.benchmark(warmup=5, steps=5)
        for r in range(ROUNDS):
            for name in (("before", "after") if r % 2 == 0 else ("after", "before")):
                metrics.PhaseTimer._mark = mark_before if name == "before" else after
                got = trainer.benchmark(warmup=WARMUP, steps=STEPS)
                out["rows"].append({"preset": preset, "batch": batch, "cuda_graphs": graphs, "round": r,
                                    "mark": name, "median_step_ms": got["median_step_ms"],
                                    "ms_per_step": got["ms_per_step"]})
        metrics.PhaseTimer._mark = after
        for name in ("before", "after"):
            mine = [x["ms_per_step"] for x in out["rows"] if x["preset"] == preset and x["mark"] == name]
            print(preset, batch, "graphs" if graphs else "eager", name, "ms/step median", round(statistics.median(mine), 3),
                  [round(v, 3) for v in mine], flush=True)
        del trainer
        torch.cuda.empty_cache()
    with open(sys.argv[1], "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
