"""Fit and check the pooled-forward cost model (``polyrec.perfmodel.tbe_lookup.forward_seconds``) on the committed
H200 forward sweeps, offline (CPU).

Rows, each a pooled-forward launch measured under one config as the kernel runs today (HOTS = 1 tiles
with staged loads, the others without), all from one H200 (``benchmarks/results/gather_rate_2026-12-01/``
unless named):

- ``gather_rate_*``: 10 row sizes (dims 8-256, fp32 / fp16), 4 features of 16-id bags, uniform ids
  over 8 GiB, batch 65536, every candidate config;
- ``forward_plan_ab_*``: the full MLPerf tables, fp32 and fp16 rows, uniform and power-law ids, every
  candidate as one launch;
- ``tbe_forward_groups_nvidia-h200_2026-11-30``: the MLPerf tables of each world-2 rank under power-law
  ids (HOTS = 1 from its staged-loads rows). Its world-1 case and the 2026-11-29 uniform sweep are
  left out: the forward_plan_ab sweeps measure the same features with today's kernel;
- ``gather_rate_draw101_*``, ``gather_rate_draw102_*``: 24 random lookups (dims 8-256, fp32 / fp16 /
  bf16, 1-8 features of 1-64-id bags, batch 8192-131072). Draws 103 and 104 are reported apart, as
  checks the constants were not fitted on.

For each constants' set it prints the rms log error of the predictions and, for each case, how much
slower than its fastest candidate the model's pick was measured. ``--grid`` searches the forward
constants (setup trips, trips per iteration, cross-warp trips, L2-hit latency fraction) for the least
``objective`` (rms log error and the picks' slowdowns; ``--modules``: plus the rms log error of the H200's
``module_forward_check`` rows, the planner's price of whole modules; the H100's rows are reported as a check).
``--gather FILE --only``: a ``gather_rate --draw`` file's cases alone (a check on cases the constants were not fitted
on). A ``gather_rate`` time holds, beside the kernel's device time that the model prices, what the timer adds to a
lookup's launch, more where the lookup fills the L2; each case is priced with its run's measure of both
(``run_timer_floor_ms``, ``run_timer_sweep_ms``; ``--timer-floor-us`` and ``--timer-sweep-us`` for runs that did not
measure them). ``--shapes FILE...``: ``forward_shapes`` files (random ``tbe_shapes`` cases: ragged bags,
small tables, trained forwards), priced with and without the batch's loop trips.

    PYTHONPATH=.:benchmarks python3 benchmarks/forward_model_fit.py [--grid [--modules]] [--gather FILE [--only]]
        [--timer-floor-us US] [--timer-sweep-us US] [--constants S,I,C[,L]]
    PYTHONPATH=.:benchmarks python3 benchmarks/forward_model_fit.py --shapes FILE [FILE ...] [--tag T]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import json
import math
import re
from pathlib import Path

from polyrec.hardware.catalog import get_device
from polyrec.kernels import tbe_select
from polyrec.kernels.tbe_forward import block_d, vector_width
from polyrec.models.config import mlperf_dcnv2
from polyrec.perfmodel import tbe_lookup as model
from polyrec.perfmodel.tbe_lookup import ForwardTile
from polyrec.perfmodel.tbe_reads import TableLoad, hit_fraction, random_read_bytes
from polyrec.perfmodel.tbe_step import SORT_KEY_BYTES_PER_ID
from polyrec.results import write_results

import module_forward_check
from gather_rate import TIMER_CHECK_TABLE_ROWS
from sort_model_fit import device_of

RESULTS = Path(__file__).resolve().parent / "results"
GATHER = RESULTS / "gather_rate_2026-12-01" / "gather_rate_nvidia-h200_2026-12-01.json"
PLAN_AB = RESULTS / "gather_rate_2026-12-01" / "forward_plan_ab_nvidia-h200_2026-12-01.json"
#: ``gather_rate --draw`` files fitted on, and those kept as checks (not fitted on).
FIT_DRAWS = tuple(RESULTS / "gather_rate_2026-12-01" / f"gather_rate_draw{s}_nvidia-h200_2026-12-01.json"
                  for s in (101, 102))
CHECK_DRAWS = tuple(RESULTS / "gather_rate_2026-12-01" / f"gather_rate_draw{s}_nvidia-h200_2026-12-01.json"
                    for s in (103, 104))
#: Every ``gather_rate --draw`` run no constant was fitted on: draws 103-106 (H200s) and 107-112 (H100s).
UNSEEN_DRAWS = (*CHECK_DRAWS,
                *sorted((RESULTS / "forward_layout_2026-12-01").glob("gather_rate_draw10[56]_nvidia-h200_*.json")),
                *sorted((RESULTS / "h100_forward_2026-12-07").glob("gather_rate_draw1*_nvidia*.json")),
                *sorted((RESULTS / "h100_seeds60_65_2026-12-07").glob("gather_rate_draw*_nvidia*.json")))
POWER_LAW = RESULTS / "tbe_forward_groups_nvidia-h200_2026-11-30.json"
#: ``module_forward_check`` runs (each module's forward as the planner prices it, the full MLPerf table sets): the
#: H200's, fitted on with ``--modules``, and the H100's, a check.
MODULES = {"H200": RESULTS / "module_forward_check_2026-12-06c" / "module_forward_check_nvidia-h200_2026-12-06.json",
           "H100": RESULTS / "module_forward_check_2026-12-06b"
           / "module_forward_check_nvidia-h100-80gb-hbm3_2026-12-06.json"}
#: The power-law sweep's features (MLPerf tables) and samples (as tests/test_tbe_perfmodel.py names them).
POWER_LAW_CASES = {"world-2 rank 0": ([0, 8, 16, 17, 18, 20], 131072),
                   "world-2 rank 1": ([1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15, 19, 21, 22, 23, 24, 25], 131072)}


@dataclasses.dataclass(frozen=True, eq=False)
class Case:
    """A set of features measured under several configs."""

    name: str
    batch: int
    bag_lengths: tuple[float, ...]
    table_rows: tuple[int, ...]
    dim: int
    elem_bytes: int
    measured: dict[tuple[int, int, int], float]  # (bags, hots, warps) -> ms
    skew: str = "uniform"  # the ids' distribution (``perfmodel.tbe_reads.SKEWS``)
    device: str = "H200"  # the catalog device it was measured on (its price's spec)
    timer_floor_ms: float = 0.0  # what the run's timer holds of every launch beside the kernel's work: priced in
    timer_sweep_ms: float = 0.0  # what it holds beyond that of a lookup that fills the L2: priced by ``l2_share``

    @property
    def block_d(self) -> int:
        return block_d([self.dim])

    @property
    def vec(self) -> int:
        return vector_width([self.dim], self.elem_bytes)


def parse_config(name: str) -> tuple[int, int, int]:
    """(bags, hots, warps) of a config named as the results files name it ("BAGSxHOTS wWARPS")."""
    bags, hots, warps = map(int, re.match(r"(\d+)x(\d+) w(\d+)", name).groups())
    return bags, hots, warps


def run_timer_floor_ms(run: dict, default_ms: float) -> float:
    """What a ``gather_rate`` run's timer adds to a lookup's launch: the least of its ``timer_check`` rows (short
    lookups timed by ``do_bench`` less their kernels' profiled time, since 65c3c00; noise only adds to a row), else
    ``default_ms``. The check is the lookups' own launch path: on an H100 its least row was 5.6-6.2 us where the
    summary's ``timer_floor_ms`` (``do_bench`` of a one-program kernel) took 4.2-4.5 us in all
    (``results/latency_probe_2026-12-07/``); every committed run with that summary has the rows."""
    checks = [r["timer_ms"] for r in run["results"]["rows"] if r["kind"] == "timer_check"]
    return min(checks) if checks else default_ms


def check_case(row: dict, device: str) -> Case:
    """The lookup a ``timer_check`` row timed (one fp32 feature of TIMER_CHECK_TABLE_ROWS rows), unmeasured."""
    bags = tuple(float(b) for b in row["bags"])
    return Case(f"timer check D{row['dim']}", row["batch"], bags, (TIMER_CHECK_TABLE_ROWS,) * len(bags), row["dim"], 4,
                {}, device=device)


def run_timer_sweep_ms(run: dict, default_ms: float) -> float:
    """What a ``gather_rate`` run's timer adds, beyond ``run_timer_floor_ms``, to a lookup that fills the L2: the least
    of its ``timer_check`` rows whose lookup fills it (``l2_share`` 1) less that floor, else ``default_ms``. On an H100
    2.5-3.7 us for a lookup that moved 100 MB (``results/latency_probe_2026-12-07/``): the timer (``do_bench``)
    empties the L2 before each call by writing a 256 MB buffer, and the lookup's own lines evict those dirty ones
    (emptied by a read instead, the same lookup took 7.1-7.2 us less there, the short ones 1.3-1.4 us less)."""
    device = device_of(run["environment"]["gpu"])
    full = [r["timer_ms"] for r in run["results"]["rows"]
            if r["kind"] == "timer_check" and l2_share(check_case(r, device)) >= 1.0]
    return min(full) - run_timer_floor_ms(run, 0.0) if full else default_ms


def gather_cases(path: Path, timer_floor_ms: float = 0.0, timer_sweep_ms: float = 0.0) -> list[Case]:
    """The lookups of a ``gather_rate`` run, each on the device the run measured it on, priced with what the run's
    timer adds to a launch (``run_timer_floor_ms``, ``run_timer_sweep_ms``; ``timer_floor_ms`` and ``timer_sweep_ms``
    where the run did not measure them)."""
    run = json.loads(path.read_text())
    device, rows = device_of(run["environment"]["gpu"]), run["results"]["rows"]
    floor, sweep = run_timer_floor_ms(run, timer_floor_ms), run_timer_sweep_ms(run, timer_sweep_ms)
    out = []
    for r in rows:
        if r["kind"] != "lookup":
            continue
        elem = r["row_bytes"] // r["dim"]
        lengths = tuple(float(b) for b in r.get("bags", (16,) * 4))  # the first run's rows: 4 features of 16
        batch = r.get("batch", 65536)
        table_rows = r.get("table_rows", (8 << 30) // (len(lengths) * r["row_bytes"]))
        measured = {}
        for name, ms in r["configs_ms"].items():
            measured[parse_config(name)] = ms
        out.append(Case(f"D{r['dim']} {r['dtype']} bags {r.get('bags', 16)} B {batch}", batch, lengths,
                        (table_rows,) * len(lengths), r["dim"], elem, measured, device=device, timer_floor_ms=floor,
                        timer_sweep_ms=sweep))
    return out


def plan_ab_cases(path: Path) -> list[Case]:
    """The single-launch sweeps of ``forward_plan_ab`` (full MLPerf tables, batch 65536)."""
    config = mlperf_dcnv2()
    out = []
    for r in json.loads(path.read_text())["results"]["rows"]:
        measured = {}
        for name, ms in r["sweep_ms"].items():
            measured[parse_config(name)] = ms
        elem = 4 if r["case"].startswith("float32") else 2
        out.append(Case(f"mlperf {r['case']}", 65536, tuple(float(h) for h in config.multi_hot),
                        tuple(config.table_rows), 128, elem, measured,
                        "zipf" if "power-law" in r["case"] else "uniform"))
    return out


def power_law_cases(path: Path) -> list[Case]:
    config = mlperf_dcnv2()
    rows = json.loads(path.read_text())["results"]["rows"]
    out = []
    for case, (tables, batch) in POWER_LAW_CASES.items():
        measured = {}
        for r in rows:
            if r["case"] != case or r["plan"] not in ("one launch", "one launch, staged loads"):
                continue
            bags, hots, warps = map(int, re.search(r"bags=(\d+), hots=(\d+), num_warps=(\d+)", r["config"]).groups())
            if (hots == 1) == (r["plan"] == "one launch, staged loads"):
                measured[(bags, hots, warps)] = r["ms"]
        out.append(Case(f"power-law {case}", batch, tuple(float(config.multi_hot[t]) for t in tables),
                        tuple(config.table_rows[t] for t in tables), 128, 4, measured, "zipf"))
    return out


@functools.cache
def hit_of(case: Case, skew: str) -> float:
    """The case's row reads that hit L2 under ids of ``skew`` (uniform: the least reuse, as the module's
    forward plan prices any ids; the planner knows the skew)."""
    loads = [TableLoad(rows=r, row_bytes=case.block_d * case.elem_bytes, accesses=case.batch * h, skew=skew)
             for r, h in zip(case.table_rows, case.bag_lengths, strict=True)]
    return hit_fraction(loads, get_device(case.device))


@functools.cache
def l2_share(case: Case) -> float:
    """How much of its device's L2 the lookup ``case`` fills, at most 1: its row reads that miss L2 under uniform ids
    (each at least RANDOM_READ_MIN_BYTES, as the model prices them) and its fp32 output, over the L2's bytes."""
    row_reads = random_read_bytes(case.block_d * case.elem_bytes) * (1.0 - hit_of(case, "uniform"))
    moved = case.batch * sum(length * row_reads + case.dim * 4 for length in case.bag_lengths)
    return min(1.0, moved / get_device(case.device).l2_bytes)


def predict_ms(case: Case, key: tuple[int, int, int], skew: str = "uniform") -> float:
    """Predicted ms of ``case`` under config ``key`` on its device, its rows' L2 hits as under ids of ``skew``, plus
    what the case's timer adds to its launch (``Case.timer_floor_ms``, and ``Case.timer_sweep_ms`` by ``l2_share``)."""
    spec = get_device(case.device)
    row_bytes = case.block_d * case.elem_bytes
    hit = hit_of(case, skew)
    tile = ForwardTile(bags=key[0], hots=key[1], block_d=case.block_d, num_warps=key[2], vec=case.vec,
                       elem_bytes=case.elem_bytes)
    return 1e3 * model.forward_seconds(tile, spec, tbe_select.ceilings(spec), batch_size=case.batch,
                                       bag_lengths=list(case.bag_lengths), row_bytes=row_bytes, out_bytes=4,
                                       hit_fraction=hit) + case.timer_floor_ms + case.timer_sweep_ms * l2_share(case)


def log_errors(cases: list[Case]) -> list[float]:
    """log(predicted / measured) of every config of ``cases``, each priced at its ids' L2 hits (as the planner
    prices it)."""
    return [math.log(predict_ms(case, k, case.skew) / ms) for case in cases for k, ms in case.measured.items()]


def rms(errs: list[float]) -> float:
    """Root mean square of log errors."""
    return math.sqrt(sum(e * e for e in errs) / len(errs))


def score(cases: list[Case]) -> tuple[float, list[tuple[str, float, str]]]:
    """(rms log error over every row, per case: (name, measured pick / measured best candidate, pick)). The
    errors price each case at its ids' L2 hits (as the planner does), the picks at the least (as the module)."""
    return rms(log_errors(cases)), picks_of(cases)


def picks_of(cases: list[Case]) -> list[tuple[str, float, str]]:
    """Per case: (name, measured pick / measured best candidate, pick), the candidates priced at the least L2
    hits (as the module picks)."""
    picks = []
    for case in cases:
        preds = {k: predict_ms(case, k) for k in case.measured}
        cands = {(c.bags, c.hots, c.num_warps) for c in tbe_select.forward_candidates(case.block_d, 32)}
        timed = [k for k in case.measured if k in cands]
        pick = min(timed, key=preds.get)
        best = min(case.measured[k] for k in timed)
        picks.append((case.name, case.measured[pick] / best, "%dx%d w%d" % pick))
    return picks


def steps(lo: float, hi: float, per_unit: int) -> list[float]:
    """lo, lo + 1/per_unit, ... up to hi."""
    return [lo + k / per_unit for k in range(int((hi - lo) * per_unit) + 1)]


def set_constants(setup: float, per_iter: float, cross: float, l2_fraction: float = 1.0) -> None:
    """The forward model's constants; ``l2_fraction`` 1.0: L2 hits do not shorten a round trip (the
    model before the L2 term)."""
    model.FORWARD_SETUP_TRIPS, model.FORWARD_TRIPS_PER_ITER, model.FORWARD_CROSS_WARP_TRIPS = setup, per_iter, cross
    model.L2_HIT_LATENCY_FRACTION = l2_fraction


def objective(rms: float, picks: list[tuple[str, float, str]]) -> float:
    """What ``--grid`` minimises: the rms log error, plus twice the log of the picks' geometric-mean slowdown
    against the fastest candidate, plus a fifth of the log of the worst (one slow pick on a 10 us
    lookup must not decide the constants alone)."""
    logs = [math.log(p[1]) for p in picks]
    return rms + 2 * sum(logs) / len(logs) + 0.2 * max(logs)


@functools.cache
def module_run(device: str) -> dict:
    """The ``module_forward_check`` run of ``MODULES[device]``, read once (the grid prices it at every point)."""
    return json.loads(MODULES[device].read_text())


def module_rms(device: str) -> float:
    """Rms log error of the planner's price of each module of ``MODULES[device]``, priced with the constants as they
    are now (the device's stored calibration where there is one, else its datasheet)."""
    tbe_select.clear_cache()  # its selections were made under other constants
    run = module_run(device)
    config, batch, spec = mlperf_dcnv2(), run["summary"]["batch"], get_device(device)
    sets = {name: (tables, dtype) for name, tables, dtype in module_forward_check.cases(config.table_rows)}
    errs = []
    for r in run["results"]["rows"]:
        tables, dtype = sets[r["case"]]
        ms, _ = module_forward_check.predicted([config.table_rows[t] for t in tables],
                                               [config.multi_hot[t] for t in tables], dtype, batch, spec)
        errs.append(math.log(ms / r["measured_ms"]))
    return math.sqrt(sum(e * e for e in errs) / len(errs))


def report_modules() -> None:
    print("   modules (module_forward_check): rms log error " + ", ".join(
        f"{device} {module_rms(device):.3f}" for device in MODULES))


def report(label: str, cases: list[Case]) -> None:
    errs, picks = log_errors(cases), picks_of(cases)
    worst = max(p[1] for p in picks)
    print(f"{label}: rms log error {rms(errs):.3f} (mean {sum(errs) / len(errs):+.3f}), pick / fastest: geomean "
          f"{math.exp(sum(math.log(p[1]) for p in picks) / len(picks)):.3f}, worst {worst:.3f}")
    for name, ratio, pick in picks:
        print(f"   {name:<26} {ratio:6.3f}  ({pick})")


def shapes_score(rows: list[dict], trained: bool, counted: bool) -> tuple[float, float, float, float]:
    """(rms log error, mean log error, pick / fastest geomean, worst pick) of ``forward_shapes`` rows:
    every candidate priced at its ids' L2 hits, as the planner prices them (errors and picks alike;
    ``counted``: the batch's loop trips, as the module takes them, else bags of their mean length), against
    its inference time or, ``trained``, its trained time priced as the planner prices the sort keys
    (``perfmodel.tbe_step.SORT_KEY_BYTES_PER_ID`` more)."""
    spec = get_device("H200")
    ceil = tbe_select.ceilings(spec)
    errs, picks = [], []
    for r in rows:
        elem = {"fp32": 4, "fp16": 2, "bf16": 2}[r["dtype"]]
        skew = "log_uniform" if r["skew"] else "uniform"
        hit = hit_fraction([TableLoad(rows=n, row_bytes=d * elem, accesses=r["batch"] * length, skew=skew)
                            for n, d, length in zip(r["rows"], r["dims"], r["bag_lengths"], strict=True)], spec)
        keys_ms = 1e3 * r["nnz"] * SORT_KEY_BYTES_PER_ID / ceil.copy_bandwidth.value if trained else 0.0
        measured = r["configs_trained_ms" if trained else "configs_ms"]
        preds = {}
        for name in measured:
            bags, hots, warps = parse_config(name)
            tile = ForwardTile(bags=bags, hots=hots, block_d=r["block_d"], num_warps=warps, vec=r["vec"],
                               elem_bytes=elem)
            preds[name] = 1e3 * model.forward_seconds(
                tile, spec, ceil, batch_size=r["batch"], bag_lengths=r["bag_lengths"],
                row_bytes=r["block_d"] * elem, out_bytes=4, hit_fraction=hit,
                loop_trips=r["iterations"][f"{bags}x{hots}"] if counted else None) + keys_ms
        errs += [math.log(preds[k] / ms) for k, ms in measured.items()]
        picks.append(measured[min(preds, key=preds.get)] / min(measured.values()))
    logs = [math.log(p) for p in picks]
    return (math.sqrt(sum(e * e for e in errs) / len(errs)), sum(errs) / len(errs),
            math.exp(sum(logs) / len(logs)), max(picks))


def report_shapes(paths: list[Path], tag: str) -> None:
    """Each file's cases scored four ways (``shapes_score``), printed and written as ``forward_model_shapes``."""
    table = []
    for path in paths:
        rows = json.loads(path.read_text())["results"]["rows"]
        print(f"{path.name}: {len(rows)} cases")
        for trained, counted in itertools.product((False, True), (False, True)):
            rms, mean, pick, worst = shapes_score(rows, trained, counted)
            table.append({"file": path.name, "forward": "trained" if trained else "inference",
                          "bags": "counted trips" if counted else "mean length", "rms_log_error": rms,
                          "mean_log_error": mean, "pick_over_fastest": pick, "worst_pick": worst})
            print(f"   {table[-1]['forward']:<9} {table[-1]['bags']:<13} rms log error {rms:.3f}, mean {mean:+.3f}, "
                  f"pick / fastest {pick:.3f} (worst {worst:.2f})")
    write_results("forward_model_shapes" + (f"_{tag}" if tag else ""), {}, rows=table,
                  summary={"files": [p.name for p in paths]})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", action="store_true", help="search the four constants")
    parser.add_argument("--gather", type=Path, default=GATHER, help="a gather_rate results file")
    parser.add_argument("--only", action="store_true", help="the --gather file's cases alone (a check on new cases)")
    parser.add_argument("--shapes", type=Path, nargs="+", default=None,
                        help="forward_shapes results files alone: each candidate's inference and trained time "
                             "priced with and without the batch's loop trips")
    parser.add_argument("--tag", default="", help="with --shapes: suffix of the results name")
    parser.add_argument("--modules", action="store_true",
                        help="with --grid: the H200's module_forward_check rows in the objective too (their rms log "
                             "error added); the modules' errors are reported either way")
    parser.add_argument("--timer-floor-us", type=float, default=0.0,
                        help="what the --gather run's timer adds to each launch, priced in, where the run did not "
                             "measure it (gather_rate before a6793fe; default 0)")
    parser.add_argument("--timer-sweep-us", type=float, default=0.0,
                        help="what it adds beyond that to a lookup that fills the L2, priced by the share of the L2 "
                             "each lookup fills, where the run did not measure it (gather_rate before 65c3c00; "
                             "default 0)")
    parser.add_argument("--constants", default=None,
                        help="setup,per_iter,cross_warp trips[,L2-hit latency fraction, default 1] "
                             "instead of the committed")
    args = parser.parse_args()
    if args.shapes:
        report_shapes(args.shapes, args.tag)
        return
    fitted = [] if args.only else (plan_ab_cases(PLAN_AB) + power_law_cases(POWER_LAW)
                                   + [c for path in FIT_DRAWS for c in gather_cases(path)])
    for name, us in (("--timer-floor-us", args.timer_floor_us), ("--timer-sweep-us", args.timer_sweep_us)):
        if us < 0:
            parser.error(f"{name} must be 0 or more, got {us}")
    cases = gather_cases(args.gather, args.timer_floor_us / 1e3, args.timer_sweep_us / 1e3) + fitted
    checks = [] if args.only else [c for path in CHECK_DRAWS for c in gather_cases(path)]
    if args.constants:
        set_constants(*map(float, args.constants.split(",")))
    report("constants " + (args.constants or "as committed"), cases)
    if checks:
        report("   checks (draws 103, 104)", checks)
        report_modules()
    if not args.grid:
        return
    best = None
    fractions = [k / 10 for k in range(0, 11)]
    for consts in itertools.product(steps(0, 3, 4), steps(1, 3, 4), steps(0, 3, 4), fractions):
        set_constants(*consts)
        key = objective(*score(cases)) + (module_rms("H200") if args.modules else 0.0)
        if best is None or key < best[0]:
            best = (key, *consts)
    set_constants(*best[1:])
    report("least objective at setup {}, per iteration {}, cross-warp {}, L2-hit latency {}".format(
        *best[1:]), cases)
    if checks:
        report("   checks (draws 103, 104)", checks)
        report_modules()


if __name__ == "__main__":
    main()
