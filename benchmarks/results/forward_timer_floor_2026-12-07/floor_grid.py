"""The forward model's fit with a timer floor on every ``do_bench``-timed lookup (CPU only, nothing measured): the
fitted cases of ``forward_model_fit`` (its gather sweep and draws 101-102 with the floor; the MLPerf sweeps without:
0.3 ms and more) and the unseen draws 103-112 (with it), under the committed constants, then under the least
``objective`` of a coarse grid of the four constants; the modules' rms log error beside (profiler-timed: no floor).

    PYTHONPATH=.:benchmarks python3 benchmarks/results/forward_timer_floor_2026-12-07/floor_grid.py FLOOR_US
"""

import itertools
import math
import sys

import forward_model_fit as fit

from polyrec.perfmodel import tbe_lookup

GRID = ((0.0, 0.25, 0.5, 0.75), (1.5, 1.75, 2.0, 2.25), (1.5, 2.0, 2.5), (0.1, 0.2, 0.4))


def geomean_pick(picks) -> float:
    return math.exp(sum(math.log(p[1]) for p in picks) / len(picks))


def show(tag: str, cases, checks) -> None:
    rms, picks = fit.score(cases)
    unseen_rms, unseen_picks = fit.score(checks)
    errs = fit.log_errors(checks)
    print(f"{tag}: fitted cases rms {rms:.3f}, picks {geomean_pick(picks):.3f} | unseen rms {unseen_rms:.3f}, mean "
          f"{sum(errs) / len(errs):+.3f}, picks {geomean_pick(unseen_picks):.3f} | modules rms H200 "
          f"{fit.module_rms('H200'):.3f}, H100 {fit.module_rms('H100'):.3f}")


def objective_at(consts: tuple[float, ...], cases) -> float:
    """``forward_model_fit.objective`` of ``cases`` under the four constants ``consts`` (left set)."""
    fit.set_constants(*consts)
    return fit.objective(*fit.score(cases))


def main() -> None:
    floor = float(sys.argv[1]) / 1e3
    cases = [*fit.gather_cases(fit.GATHER, floor), *fit.plan_ab_cases(fit.PLAN_AB), *fit.power_law_cases(fit.POWER_LAW),
             *(c for path in fit.FIT_DRAWS for c in fit.gather_cases(path, floor))]
    checks = [c for path in fit.UNSEEN_DRAWS for c in fit.gather_cases(path, floor)]
    committed = (tbe_lookup.FORWARD_SETUP_TRIPS, tbe_lookup.FORWARD_TRIPS_PER_ITER,
                 tbe_lookup.FORWARD_CROSS_WARP_TRIPS, tbe_lookup.L2_HIT_LATENCY_FRACTION)
    show(f"floor {floor * 1e3:g} us, committed constants {committed}", cases, checks)
    best = min(itertools.product(*GRID), key=lambda consts: objective_at(consts, cases))
    fit.set_constants(*best)
    show(f"floor {floor * 1e3:g} us, least objective {best}", cases, checks)


if __name__ == "__main__":
    main()
