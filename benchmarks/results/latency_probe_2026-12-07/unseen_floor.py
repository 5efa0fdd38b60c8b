"""The unseen lookups' log error by how long they ran, each priced with what its run's timer adds to a launch, its
floor alone (``floor_only``: the sweep came after this script, ``timer_sweep.py``; CPU only, nothing measured):

- draws 113-115 (H100, this folder) with their own measure (``forward_model_fit.run_timer_floor_ms``: the least of
  their ``timer_check`` rows);
- draws 103-112 (``forward_model_fit.UNSEEN_DRAWS``; H200 and H100), which measured none, with the mean of draws
  113-115's (an H100's: the H200's is not measured).

    PYTHONPATH=.:benchmarks python3 benchmarks/results/latency_probe_2026-12-07/unseen_floor.py
"""

import dataclasses
import json
import statistics
import sys
from pathlib import Path

import forward_model_fit as fit

sys.path.insert(0, str(fit.RESULTS / "forward_timer_floor_2026-12-07"))
from by_duration import at_pick, show  # noqa: E402  (a results folder's script, not a package)

HERE = Path(__file__).parent
#: The unseen draws of this folder (the second call's draw 113 repeats the first's cases: left out).
NEW_DRAWS = [HERE / "draw113" / "gather_rate_draw113_nvidia-h100-80gb-hbm3_2026-12-07.json",
             HERE / "draw114" / "gather_rate_draw114_nvidia-h100-80gb-hbm3_2026-12-07.json",
             HERE / "b49943d" / "draw115" / "gather_rate_draw115_nvidia-h100-80gb-hbm3_2026-12-07.json"]


def floor_only(cases: list[fit.Case]) -> list[fit.Case]:
    """``cases`` priced with their timer's floor alone (no ``timer_sweep_ms``)."""
    return [dataclasses.replace(c, timer_sweep_ms=0.0) for c in cases]


def main() -> None:
    floors = []
    for path in NEW_DRAWS:
        run = json.loads(path.read_text())
        checks = [f"{r['timer_ms'] * 1e3:.2f}" for r in run["results"]["rows"] if r["kind"] == "timer_check"]
        floors.append(fit.run_timer_floor_ms(run, 0.0))
        print(f"{path.name}: one-program launch {run['summary']['timer_floor_ms'] * 1e3:.2f} us, timer_check rows "
              f"{' '.join(checks)} us: priced with {floors[-1] * 1e3:.2f} us")
    assumed = statistics.mean(floors)
    new = floor_only([c for path in NEW_DRAWS for c in fit.gather_cases(path)])
    show("draws 113-115 at the model's pick, their own timer", at_pick(new))
    every = [(fit.predict_ms(c, k, c.skew), ms) for c in new for k, ms in c.measured.items()]
    show("all configs of draws 113-115, their own timer", every)
    old = [c for path in fit.UNSEEN_DRAWS for c in fit.gather_cases(path, assumed)]
    show(f"draws 103-112 at the model's pick, {assumed * 1e3:.2f} us", at_pick(old))
    bare = [c for path in fit.UNSEEN_DRAWS for c in fit.gather_cases(path)]
    show("draws 103-112 at the model's pick, no timer", at_pick(bare))


if __name__ == "__main__":
    main()
