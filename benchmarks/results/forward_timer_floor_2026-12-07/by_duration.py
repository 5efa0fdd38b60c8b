"""The forward's log error by how long the lookup ran, timed two ways (CPU only, nothing measured):

- the unseen ``gather_rate --draw`` lookups (draws 103-112, H200 and H100), each at the config the model picks, timed
  by ``do_bench`` (``tbe.bench_ms``): a launch between two events;
- the H100 modules' pooled-lookup kernels (seeds 43-65, ``tbe_groups_model_check`` at datasheet rates, re-priced
  with this commit's model into this folder), timed by the profiler: the kernels' device time alone.

    PYTHONPATH=.:benchmarks python3 benchmarks/results/forward_timer_floor_2026-12-07/by_duration.py
"""

import json
import math

import forward_model_fit as fit

MODULE_CHECKS = sorted(fit.RESULTS.glob("forward_timer_floor_2026-12-07/tbe_groups_model_check_h100_seeds43_65_*.json"))
BANDS_MS = ((0.02, "< 0.02 ms"), (0.05, "0.02-0.05 ms"), (0.2, "0.05-0.2 ms"), (1.0, "0.2-1 ms"), (math.inf, ">= 1 ms"))


def band(ms: float) -> str:
    return next(label for top, label in BANDS_MS if ms < top)


def show(title: str, pairs: list[tuple[float, float]]) -> None:
    """Mean and rms log error of (predicted, measured) ms pairs by the measured time's band."""
    by: dict[str, list[float]] = {}
    for predicted, measured in pairs:
        by.setdefault(band(measured), []).append(math.log(predicted / measured))
    print(title)
    for _, label in BANDS_MS:
        errs = by.get(label, [])
        if errs:
            print(f"  {label:>12}: {len(errs):3d}, mean {sum(errs) / len(errs):+.3f}, "
                  f"rms {math.sqrt(sum(e * e for e in errs) / len(errs)):.3f}")


def at_pick(cases: list[fit.Case]) -> list[tuple[float, float]]:
    """(predicted, measured) ms of each case at the config the model picks."""
    out = []
    for case in cases:
        key = min(case.measured, key=lambda k: fit.predict_ms(case, k, case.skew))
        out.append((fit.predict_ms(case, key, case.skew), case.measured[key]))
    return out


def main() -> None:
    picked = at_pick([c for path in fit.UNSEEN_DRAWS for c in fit.gather_cases(path)])
    show(f"unseen lookups at the model's pick, do_bench ({len(fit.UNSEEN_DRAWS)} draws)", picked)
    rows = [r for path in MODULE_CHECKS for r in json.loads(path.read_text())["rows"]]
    show(f"H100 modules' pooled-lookup kernels, profiler ({len(rows)} modules)",
         [(r["fwd_predicted_ms"], r["fwd_measured_ms"]) for r in rows if r["fwd_measured_ms"]])


if __name__ == "__main__":
    main()
