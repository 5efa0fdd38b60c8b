"""Whether the host probe follows the host-bound rows through a run, and what Python's garbage
collector costs them.

planner_accuracy's host-bound rows ran 30-45% slower in its later passes on some machines while the
host probes, timed at the start of each pass in the same process, did not (thirtieth session,
``planner_accuracy_runs_2026-12-01``). Here, in one process, for ``--rounds`` rounds: the two probes
(``polyrec.runtime.host_probe``, one window each), then host-bound rows built and timed as
planner_accuracy builds and times them (dcnv2-small at 4096 and 65536, DLRM Kaggle at 8192), each once
with the collector as it is and once with it frozen and disabled while the row runs
(``gc.freeze()``: every object alive then is left out of later collections), then a GPU-heavy MLPerf
row (tables capped at 1M rows, batch 65536), as planner_accuracy's passes interleave them. Every row
records the seconds the collector ran during it (``gc.callbacks``) and the objects it tracks.

Writes ``$OUT/host_drift_probe.json``.

    PYTHONPATH=.:benchmarks OUT=. python3 benchmarks/host_drift_probe.py --rounds 5
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time
from contextlib import contextmanager

#: (preset, batch) of the host-bound rows: planner_accuracy's rows 14, 16 and 18.
HOST_ROWS = (("dcnv2-small", 4096), ("dcnv2-small", 65536), ("dlrm-criteo-kaggle", 8192))
WARMUP, STEPS = 5, 40


class GcClock:
    """Seconds spent in collections and their count per generation, from ``gc.callbacks``."""

    def __init__(self) -> None:
        self.seconds, self.collections, self._start = 0.0, [0, 0, 0], 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._start
            self.collections[info["generation"]] += 1


@contextmanager
def collector(frozen: bool):
    """Count the collector's time inside; with ``frozen``, freeze and disable it there."""
    clock = GcClock()
    if frozen:
        gc.collect()
        gc.freeze()
        gc.disable()
    gc.callbacks.append(clock)
    try:
        yield clock
    finally:
        gc.callbacks.remove(clock)
        if frozen:
            gc.enable()
            gc.unfreeze()


def row(preset: str, batch: int, *, frozen: bool, steps: int = STEPS, row_cap: int | None = None) -> dict:
    from polyrec.runtime import TrainConfig, bench

    cfg = TrainConfig(preset=preset, data="synthetic:uniform", batch_size=batch, steps=WARMUP + steps, device="cuda",
                      precision="bf16", embedding_optimizer="rowwise_adagrad", row_cap=row_cap, log_every=10**9,
                      cuda_graphs=False)
    with collector(frozen) as clock:
        measured = bench.measure(cfg, label=preset, warmup=WARMUP, steps=steps)
    return {"preset": preset, "batch": batch, "frozen": frozen, "step_ms": bench.step_without_data_ms(measured),
            "gc_s": clock.seconds, "gc_collections": clock.collections, "tracked_objects": len(gc.get_objects())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    import torch

    from polyrec.runtime.host_probe import PROBE_PRESETS, probe_windows_ms

    rows = []
    for r in range(args.rounds):
        for name in PROBE_PRESETS:
            with collector(frozen=False) as clock:
                ms = probe_windows_ms(name, 1)[0]
            rows.append({"round": r, "preset": f"probe {name}", "step_ms": ms, "gc_s": clock.seconds})
            print(rows[-1], flush=True)
        for preset, batch in HOST_ROWS:
            for frozen in (False, True):
                rows.append({"round": r, **row(preset, batch, frozen=frozen)})
                print(rows[-1], flush=True)
        rows.append({"round": r, **row("mlperf-dcnv2", 65536, frozen=False, steps=20, row_cap=1_000_000)})
        print(rows[-1], flush=True)
        torch.cuda.empty_cache()
    with open(os.path.join(os.environ.get("OUT", "."), "host_drift_probe.json"), "w") as f:
        json.dump({"rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
