"""The unseen lookups' log error by how long they ran, priced with what the timer adds to a launch (the floor), and
with and without what it adds beyond that by the share of the L2 each lookup fills (the sweep; CPU only, nothing
measured):

- draws 113-117 (H100s, this folder and ``8580b0f/``) with their own measures
  (``forward_model_fit.run_timer_floor_ms``, ``run_timer_sweep_ms``);
- draws 103-112 (``forward_model_fit.UNSEEN_DRAWS``; H200s and H100s), which measured neither, with the means of draws
  113-117's (H100s: the H200's timer is not measured).

    PYTHONPATH=.:benchmarks python3 benchmarks/results/latency_probe_2026-12-07/timer_sweep.py
"""

import json
import math
import statistics
import sys
from pathlib import Path

import forward_model_fit as fit

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(fit.RESULTS / "forward_timer_floor_2026-12-07"))
from by_duration import at_pick, show  # noqa: E402  (results folders' scripts, not packages)
from unseen_floor import NEW_DRAWS, floor_only  # noqa: E402

DRAWS = [*NEW_DRAWS, *(HERE / "8580b0f" / f"draw{s}" / f"gather_rate_draw{s}_nvidia-h100-80gb-hbm3_2026-12-07.json"
                       for s in (116, 117))]


def overall(title: str, cases: list[fit.Case]) -> None:
    """Rms and mean log error over every config of ``cases`` (``forward_model_fit.log_errors``)."""
    errs = fit.log_errors(cases)
    print(f"{title}: {len(errs)} configs, rms log error {fit.rms(errs):.3f}, mean {sum(errs) / len(errs):+.3f}")


def main() -> None:
    floors, sweeps = [], []
    for path in DRAWS:
        run = json.loads(path.read_text())
        floors.append(fit.run_timer_floor_ms(run, 0.0))
        sweeps.append(fit.run_timer_sweep_ms(run, 0.0))
        print(f"{path.name}: floor {floors[-1] * 1e3:.2f} us, sweep {sweeps[-1] * 1e3:.2f} us")
    floor, sweep = statistics.mean(floors), statistics.mean(sweeps)
    new = [c for path in DRAWS for c in fit.gather_cases(path)]
    old = [c for path in fit.UNSEEN_DRAWS for c in fit.gather_cases(path, floor, sweep)]
    for label, cases in (("draws 113-117, their own timer", new),
                         (f"draws 103-112, floor {floor * 1e3:.2f} us, sweep {sweep * 1e3:.2f} us", old)):
        for how, priced in (("floor only", floor_only(cases)), ("floor and sweep", cases)):
            show(f"{label}, {how}, at the model's pick", at_pick(priced))
            overall(f"{label}, {how}, every config", priced)
            picks = [p[1] for p in fit.picks_of(priced)]
            print(f"  picks / fastest: geomean {math.exp(sum(map(math.log, picks)) / len(picks)):.3f}")


if __name__ == "__main__":
    main()
