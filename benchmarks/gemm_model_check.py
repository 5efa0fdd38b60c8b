"""Offline re-scoring of the GEMM model against a committed H200 sweep (CPU only, no GPU run).

``benchmarks/results/gemm_selection_nvidia-h200_2026-11-29.json`` holds, for each swept shape, the
measured median time of every config (classic and TMA), torch.matmul's time alone and with the
epilogue (since the TMA kernel: polyrec's library path, torch.matmul + the fused pass, timed).
This script re-runs the *current* model and selector on those shapes (with the ceilings calibrated
on the H200 during that sweep) and scores them with the measured times: the selected config's
measured time (a config outside the swept set is counted as unmeasured and listed), best/selected
geomean, p10, worst, Kendall tau of predicted vs measured, rank of the best, and the library choice
against min(best Triton, library). The library path is torch.matmul + one fused Triton epilogue pass:
its measured time where the sweep timed it, else (older sweeps) torch.matmul's measured time + the
pass's bytes at the copy rate (``fused_pass_seconds``), an estimate.

``--sweep PATH`` scores another gemm_selection file (default: the committed one). ``--min-with PATH``
scores against, per config, the lower time of the two sweeps (same device, same config labels) and
reports each shape's ``slowdown_vs_other``: the second H200 run (commit ef4430d) measured some short
kernels 1.2-5x slower than the first while long ones agree within 4%, i.e. interference added time.
The first run's file is in git history: ``git show 9b53d9a:benchmarks/results/gemm_selection_nvidia-h200_2026-11-29.json``.

Validation folds: the shape names sorted; fold A = even positions, fold B = odd positions (each
family — forward / dgrad / wgrad / square / skinny / odd — lands in both). Constants fitted by
``--fit`` are fitted on one fold and scored on the other, both ways.

Run on the CPU: ``.venv/bin/python benchmarks/gemm_model_check.py`` (about 1 s); ``--fit`` adds the
grid search of the fitted constants (a few minutes); ``--quick`` scores 6 shapes (a smoke test).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import re
import statistics
import sys
from pathlib import Path

from polyrec.hardware import get_device
from polyrec.hardware.types import Ceiling, Ceilings
from polyrec.kernels.gemm_configs import GemmConfig, config_space, configs_for_shape, pass_partial_rows
from polyrec.kernels.gemm_select import choose, problem_tma
from polyrec.perfmodel import gemm as model
from polyrec.perfmodel.gemm_library import fused_pass_seconds
from polyrec.results import write_results
from stats import kendall_tau

SWEEP = Path(__file__).parent / "results" / "gemm_selection_nvidia-h200_2026-11-29.json"
LABEL = "offline re-scoring of the 2026-11-29 H200 sweep on the CPU, not a GPU run"
#: Constants ``--fit`` searches, with the grid of each (their units are in polyrec/perfmodel/gemm.py);
#: "NAME[key]" is one entry of a dict constant. TRITON_MAINLOOP_EFFICIENCY is not searched: it is the
#: fold-A ratio torch / best Triton, computed directly.
FIT_GRID: dict[str, tuple[float, ...]] = {
    "SCALAR_LOAD_BYTES_PER_CLOCK": (1.5, 3.0),
    "EPILOGUE_OVERLAP": (0.75, 1.0),
    "MEMORY_LATENCY_S[nvidia]": (0.8e-6, 1.0e-6, 1.2e-6),
    "WGMMA_HELD_BUFFERS": (0, 1),
    "L2_OPERAND_OVER_PROBE[nvidia]": (1.0, 1.2, 1.4),
    "KMAJOR_B_WIDE_TILE_FACTOR[sm_90]": (1.0, 1.2),
}


def get_constant(name: str):
    """A model constant by FIT_GRID name ("NAME" or "NAME[key]")."""
    base, _, key = name.rstrip("]").partition("[")
    value = getattr(model, base)
    return value[key] if key else value


def set_constant(name: str, value) -> None:
    """Set a model constant by FIT_GRID name; a dict constant is replaced by an updated copy."""
    base, _, key = name.rstrip("]").partition("[")
    setattr(model, base, getattr(model, base) | {key: value} if key else value)


def parse_label(label: str) -> GemmConfig:
    """GemmConfig from its label: "BM128 BN64 BK64 G8 SK1 w4 s3", or a TMA config's
    "TMA BM128 BN256 BK64 G8 w8 s3 c1 sub"."""
    f = dict(re.findall(r"([A-Za-z]+)(\d+)", label))
    tma = label.startswith("TMA ")
    return GemmConfig(block_m=int(f["BM"]), block_n=int(f["BN"]), block_k=int(f["BK"]), group_m=int(f["G"]),
                      split_k=int(f.get("SK", 1)), num_warps=int(f["w"]), num_stages=int(f["s"]),
                      persistent_tma=tma, ctas_per_sm=int(f.get("c", 1)), epilogue_subtile=label.endswith(" sub"))


def sweep_ceilings(summary: dict) -> Ceilings:
    """The ceilings the sweep's model used (calibrated on the H200 in that run), from its summary."""
    text = summary["ceilings"]
    value = {name: float(v) for name, v in re.findall(r"'?(\w+)'?[=:] ?Ceiling\(value=([0-9.e+-]+)", text)}
    origin = "calibrated 2026-11-29 (gemm_selection sweep summary)"
    return Ceilings(device="H200", copy_bandwidth=Ceiling(value=value["copy_bandwidth"], origin=origin),
                    l2_bandwidth=Ceiling(value=value["l2_bandwidth"], origin=origin),
                    matmul_flops={d: Ceiling(value=value[d], origin=origin) for d in ("bf16", "fp16", "tf32", "fp32")},
                    launch_latency=Ceiling(value=value["launch_latency"], origin=origin))


def folds(rows: list[dict]) -> dict[str, list[dict]]:
    names = sorted(r["shape"] for r in rows)
    fold_a = set(names[0::2])
    return {"A": [r for r in rows if r["shape"] in fold_a], "B": [r for r in rows if r["shape"] not in fold_a]}


def min_of_runs(rows: list[dict], other: list[dict]) -> list[dict]:
    """``rows`` with each config's time replaced by the lower of the two runs (same device and config
    labels) and ``slowdown_vs_other`` (geomean time ratio over the configs both measured) added.
    Interference (host launch overhead, another process) only ever adds time, so the minimum is the
    closer estimate of the kernel's own time: derived from two measurements, not a third one."""
    times = {r["shape"]: {s["config"]: s["measured_ms"] for s in r["sweep"]} for r in other}
    out = []
    for row in rows:
        theirs = times.get(row["shape"], {})
        sweep, logs = [], []
        for s in row["sweep"]:
            t = theirs.get(s["config"], math.inf)
            if math.isfinite(t) and math.isfinite(s["measured_ms"]):
                logs.append(math.log(s["measured_ms"] / t))
            sweep.append(s | {"measured_ms": min(s["measured_ms"], t)})
        slowdown = math.exp(sum(logs) / len(logs)) if logs else math.nan
        out.append(row | {"sweep": sweep, "slowdown_vs_other": slowdown})
    return out


def score_shape(row: dict, spec, ceil: Ceilings) -> dict:
    """The current model's choice for one swept shape, scored with the sweep's measurements."""
    a_ok, b_ok = model.operand_alignment(row["m"], row["n"], row["k"], row["layout"])
    problem = model.GemmProblem(m=row["m"], n=row["n"], k=row["k"], dtype="bf16", epilogue=row["epilogue"],
                                a_aligned=a_ok, b_aligned=b_ok, b_k_major=row["layout"][1] == "T")
    measured = {r["config"]: r["measured_ms"] for r in row["sweep"] if math.isfinite(r["measured_ms"])}
    choice = choose(problem, spec, ceil, tma=problem_tma(problem, a_row_major=row["layout"][0] == "N"))
    selected_ms = measured.get(choice.config.label, math.nan)
    best_label = min(measured, key=measured.get)
    best_ms = measured[best_label]
    predicted = {label: model.estimate(problem, parse_label(label), spec, ceil).seconds for label in measured}
    finite = [label for label in measured if math.isfinite(predicted[label])]
    order = sorted(finite, key=lambda label: predicted[label])
    # The library path is torch.matmul + one fused Triton epilogue pass (polyrec.kernels.gemm._library).
    # Sweeps since the TMA kernel (their rows name "kernel_chosen") timed that path as
    # torch_epilogue_ms; older ones timed eager torch ops, so there the pass is its byte floor. The
    # sweep's samples are eager, so sweeps that also time finalists from a CUDA graph give the eager
    # library time (torch_epilogue_ms_eager) to compare with them.
    library_ms = (row.get("torch_epilogue_ms_eager", row["torch_epilogue_ms"]) if "kernel_chosen" in row
                  else row["torch_ms"] + 1e3 * fused_pass_seconds(problem, ceil, pass_partial_rows(problem.m)))
    choice_ms = selected_ms if choice.backend == "triton" else library_ms
    return {
        "shape": row["shape"], "slowdown_vs_other": row.get("slowdown_vs_other", math.nan), "m": row["m"], "n": row["n"], "k": row["k"], "layout": row["layout"],
        "epilogue": row["epilogue"], "best_config": best_label, "best_ms": best_ms,
        "selected_config": choice.config.label, "selected_ms": selected_ms,
        "unmeasured": choice.config.label not in measured,
        "best_over_selected": best_ms / selected_ms if selected_ms == selected_ms else math.nan,
        "rank_of_best_in_prediction": order.index(best_label) + 1 if best_label in order else 0,
        "kendall_tau": kendall_tau([predicted[x] for x in finite], [measured[x] for x in finite]),
        "predicted_not_fitting": len(measured) - len(finite),
        "predicted_selected_ms": choice.triton_seconds * 1e3, "predicted_library_ms": choice.library_seconds * 1e3,
        "torch_ms": row["torch_ms"], "torch_epilogue_ms": row["torch_epilogue_ms"], "library_ms": library_ms,
        "backend_chosen": choice.backend,
        "choice_ms": choice_ms, "oracle_ms": min(best_ms, library_ms),
        "oracle_over_choice": min(best_ms, library_ms) / choice_ms if choice_ms == choice_ms else math.nan,
    }


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def metrics(scored: list[dict]) -> dict:
    """Selection metrics over measured selections; unmeasured ones are counted and named."""
    ok = [r for r in scored if not r["unmeasured"]]
    ratios = sorted(r["best_over_selected"] for r in ok)
    choice = [r["oracle_over_choice"] for r in scored if r["oracle_over_choice"] == r["oracle_over_choice"]]
    return {
        "shapes": len(scored), "unmeasured_selections": [r["shape"] for r in scored if r["unmeasured"]],
        "geomean_best_over_selected": _geomean(ratios),
        "p10_best_over_selected": ratios[max(0, math.ceil(0.1 * len(ratios)) - 1)] if ratios else math.nan,
        "worst_best_over_selected": ratios[0] if ratios else math.nan,
        "median_kendall_tau": statistics.median(r["kendall_tau"] for r in scored),
        "median_rank_of_best": statistics.median(r["rank_of_best_in_prediction"] for r in scored),
        "geomean_oracle_over_choice": _geomean(choice),
    }


def _objective(rows: list[dict], spec, ceil: Ceilings) -> float:
    """What ``--fit`` maximises: geomean best/selected, library choice and tau as tie-breakers."""
    m = metrics([score_shape(r, spec, ceil) for r in rows])
    return m["geomean_best_over_selected"] + 0.5 * m["geomean_oracle_over_choice"] + 0.01 * m["median_kendall_tau"]


def fit(train: list[dict], spec, ceil: Ceilings) -> dict[str, float]:
    """Grid search of FIT_GRID on ``train``; returns the best values (module constants restored)."""
    saved = {name: get_constant(name) for name in FIT_GRID}
    best, best_values = -math.inf, saved
    try:
        for values in itertools.product(*FIT_GRID.values()):
            for name, value in zip(FIT_GRID, values):
                set_constant(name, value)
            objective = _objective(train, spec, ceil)
            if objective > best:
                best, best_values = objective, dict(zip(FIT_GRID, values))
    finally:
        for name, value in saved.items():
            set_constant(name, value)
    return best_values


def _cross_validate(data: dict[str, list[dict]], spec, ceil: Ceilings) -> dict:
    """Fit on each fold, score on the other with the fitted values."""
    out = {}
    for train, test in (("A", "B"), ("B", "A")):
        values = fit(data[train], spec, ceil)
        saved = {name: get_constant(name) for name in values}
        for name, value in values.items():
            set_constant(name, value)
        try:
            out[f"fit on {train}, scored on {test}"] = {"constants": values} | metrics(
                [score_shape(r, spec, ceil) for r in data[test]])
        finally:
            for name, value in saved.items():
                set_constant(name, value)
        print(f"fit on {train}: {values} -> fold {test}: {out[f'fit on {train}, scored on {test}']}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", type=Path, default=SWEEP, help="a gemm_selection results JSON")
    parser.add_argument("--min-with", type=Path, default=None,
                        help="another sweep of the same device: score against each config's lower time of the two")
    parser.add_argument("--name", default="gemm_model_check", help="results name (file <name>_cpu_<date>.json)")
    parser.add_argument("--fit", action="store_true", help="also grid-search FIT_GRID per fold")
    parser.add_argument("--quick", action="store_true", help="6 shapes (smoke test)")
    parser.add_argument("--no-write", action="store_true", help="print only")
    opts = parser.parse_args()
    doc = json.loads(opts.sweep.read_text())
    rows = doc["results"]["rows"]
    if opts.quick:
        rows = rows[::7]
    if opts.min_with:
        rows = min_of_runs(rows, json.loads(opts.min_with.read_text())["results"]["rows"])
    spec = get_device("H200")
    ceil = sweep_ceilings(doc["summary"])
    if len(config_space(spec, "bf16")) and not all(configs_for_shape(config_space(spec, "bf16"), r["m"], r["n"], r["k"])
                                                     for r in rows):
        sys.exit("gemm_model_check: the current config space is empty for some shape")
    data = folds(rows)
    scored = {fold: [score_shape(r, spec, ceil) for r in fold_rows] for fold, fold_rows in data.items()}
    summary = {"what": LABEL, "sweep_file": str(opts.sweep.name),
               "times": f"per config, the lower of this sweep and {opts.min_with.name}" if opts.min_with else "as measured",
               "folds": "shape names sorted; A even, B odd",
               "fold_A": [r["shape"] for r in data["A"]]}
    summary |= {f"all {k}": v for k, v in metrics(scored["A"] + scored["B"]).items()}
    summary |= {f"fold A {k}": v for k, v in metrics(scored["A"]).items()}
    summary |= {f"fold B {k}": v for k, v in metrics(scored["B"]).items()}
    summary |= {f"constant {name}": get_constant(name) for name in FIT_GRID}
    cross = _cross_validate(data, spec, ceil) if opts.fit else {}
    table = sorted(scored["A"] + scored["B"], key=lambda r: r["shape"])
    for r in table:
        r["fold"] = "A" if r in scored["A"] else "B"
    print(f"{'shape':24s} {'fold':>4s} {'best/sel':>8s} {'tau':>5s} {'rank':>4s} {'backend':>8s} {'oracle/choice':>13s}"
          f" {'slowdown':>8s}")
    for r in table:
        print(f"{r['shape']:24s} {r['fold']:>4s} {r['best_over_selected']:8.3f} {r['kendall_tau']:5.2f} "
              f"{r['rank_of_best_in_prediction']:4d} {r['backend_chosen']:>8s} {r['oracle_over_choice']:13.3f}"
              f" {r['slowdown_vs_other']:8.2f}")
    for key, value in summary.items():
        if key != "fold_A":
            print(f"{key}: {value}")
    if not opts.no_write and not opts.quick:
        write_results(opts.name, {"rows": table, "cross_validation": cross}, rows=table,
                      summary=summary | {"cross_validation": cross})


if __name__ == "__main__":
    main()
