"""Planner accuracy on one GPU: predicted vs measured step time and peak memory, and the planner's pick.

For each configuration (model preset, table size, batch, embedding optimizer, dense precision, index
distribution, embedding row dtype) the planner predicts a one-GPU plan with those choices fixed; the trainer
(``polyrec.runtime.bench.measure``: polyrec's TBE and GEMMs, CUDA-event phase timing) runs it.
Compared: step time (the median interval between the trainer's step starts on the device's timeline,
minus its synthetic-data phase, which the plan does not model; both are reported, and the mean
wall time per step as ``measured_mean_ms``), and peak memory (``torch.cuda.max_memory_allocated`` against the plan's
allocator bytes plus the synthetic source's own device buffers, which a real input pipeline would not
keep and the plan does not count: ``harness_gb``). Then, for each model measured at several batch sizes, the plan the planner picks
among those batches against the fastest measured. The ceilings come from ``hw calibrate`` (run first
when the device has no stored one; ``--quick`` skips it), with this host's speed against the fitted
host costs (``polyrec.runtime.host_probe``: two probe steps no row uses; where the stored calibration
has no host scale, this run measures it: one window of each probe before every ``PROBE_EVERY``-th
configuration of each pass, so the probes sample the same minutes as the rows, their medians over the run
stored before any prediction is made). Every configuration is measured in each of ``--passes`` passes
over the list (3; since the sixth session, before one), and its step is the median over the passes:
the VM's CPU speed moves on a scale of seconds, so a single window is one moment's host speed. The planner's host costs were fitted on the even-numbered rows of an earlier run
(``polyrec.planner.host``): the summary reports the error on even and odd rows apart. The median (since the fifth session; before, the mean over 20 steps) is
the steady step: host-bound rows of the same launch count measured 6.1-9.6 ms as means of 20 steps
in one run (planner_accuracy_nvidia-h200_2026-11-30 at a364e08), so a few slow steps moved them.

Run on the GPU machine: ``PYTHONPATH=. python3 benchmarks/planner_accuracy.py`` (about 4 minutes on
an H200 with 3 passes; a pass that would end after ``--budget-s`` is not started), ``--quick`` for a smoke test
(~1 minute). Targets (issue 6): step-time geomean |error| <= 7%, peak memory within 5%, the chosen
plan within 5% of the fastest measured. The summary also splits the step error by the bound the plan
predicts (``bound_errors``): device-bound rows against host-bound ones.
"""

from __future__ import annotations

import argparse
import gc
import math
import statistics
import time
from dataclasses import dataclass

#: Configurations: (preset, row cap or None, batch, embedding optimizer, dense precision, index distribution,
#: embedding row dtype).
FULL: tuple[tuple[str, int | None, int, str, str, str, str], ...] = (
    ("mlperf-dcnv2", 4_000_000, 8192, "rowwise_adagrad", "bf16", "uniform", "fp32"),
    ("mlperf-dcnv2", 4_000_000, 16384, "rowwise_adagrad", "bf16", "uniform", "fp32"),
    ("mlperf-dcnv2", 4_000_000, 32768, "rowwise_adagrad", "bf16", "uniform", "fp32"),
    ("mlperf-dcnv2", 4_000_000, 65536, "rowwise_adagrad", "bf16", "uniform", "fp32"),
    ("mlperf-dcnv2", 4_000_000, 65536, "sgd", "bf16", "uniform", "fp32"),
    ("mlperf-dcnv2", 4_000_000, 65536, "adagrad", "bf16", "uniform", "fp32"),
    ("mlperf-dcnv2", 4_000_000, 65536, "adam", "bf16", "uniform", "fp32"),
    ("mlperf-dcnv2", 4_000_000, 32768, "rowwise_adagrad", "bf16", "zipf", "fp32"),
    ("mlperf-dcnv2", 4_000_000, 16384, "rowwise_adagrad", "fp32", "uniform", "fp32"),
    ("mlperf-dcnv2", 1_000_000, 65536, "rowwise_adagrad", "bf16", "uniform", "fp32"),
    ("mlperf-dcnv2", 16_000_000, 65536, "rowwise_adagrad", "bf16", "uniform", "fp32"),
    ("mlperf-dcnv2", None, 32768, "rowwise_adagrad", "bf16", "uniform", "fp32"),
    ("mlperf-dcnv2", None, 65536, "rowwise_adagrad", "bf16", "uniform", "fp32"),
    ("mlperf-dcnv2", None, 65536, "rowwise_adagrad", "bf16", "zipf", "fp32"),
    ("dcnv2-small", None, 4096, "rowwise_adagrad", "bf16", "uniform", "fp32"),
    ("dcnv2-small", None, 16384, "rowwise_adagrad", "bf16", "uniform", "fp32"),
    ("dcnv2-small", None, 65536, "rowwise_adagrad", "bf16", "uniform", "fp32"),
    ("dcnv2-small", None, 16384, "adam", "bf16", "uniform", "fp32"),
    ("dlrm-criteo-kaggle", None, 8192, "rowwise_adagrad", "bf16", "uniform", "fp32"),
    ("dlrm-criteo-kaggle", None, 32768, "rowwise_adagrad", "bf16", "uniform", "fp32"),
    ("dlrm-criteo-kaggle", None, 65536, "rowwise_adagrad", "bf16", "uniform", "fp32"),
    ("dlrm-criteo-kaggle", None, 65536, "rowwise_adagrad", "bf16", "zipf", "fp32"),
    ("dlrm-criteo-kaggle", None, 32768, "adagrad", "bf16", "uniform", "fp32"),
    ("dlrm-criteo-kaggle", None, 16384, "rowwise_adagrad", "fp32", "uniform", "fp32"),
    ("mlperf-dcnv2", 4_000_000, 65536, "rowwise_adagrad", "bf16", "uniform", "fp16"),
    ("dlrm-criteo-kaggle", None, 65536, "rowwise_adagrad", "bf16", "uniform", "bf16"),
)
#: Timed steps per configuration: 40 intervals for the median (the longest row, full-size MLPerf at
#: 65536, is ~1 s of them; building its trainer takes longer).
STEPS = 40
#: Passes over all configurations; a row's step is the median over passes, and each host probe
#: (where this run measures the host scale) takes one window before every ``PROBE_EVERY``-th configuration.
#: The VM's CPU speed moved 2.3x between trials seconds apart (host_jitter_nvidia-h200_2026-11-30), so
#: one window is one moment: single-pass runs put the same host-bound rows 7.7-11.8 ms apart. Probe windows
#: only at the start of each pass missed a slowdown the rows saw (fcda8b1's run: host-bound rows 30-45%
#: slower in passes 2-3 than the windows before them); probes and rows alternated in one process drifted
#: together, correlation 0.76-0.89 (benchmarks/results/host_drift_probe_2026-12-02).
PASSES = 3
PROBE_EVERY = 4
#: ``--fp8``: fp8 dense layers (``--precision fp8``, eager), priced since the forty-fourth session; none of these was
#: measured before its prediction was written (the fp8 runs timed before: full-size fp32 / bf16 rows at 65536,
#: capped and dcnv2-small at 16384 graphed).
FP8 = (("mlperf-dcnv2", 4_000_000, 16384, "rowwise_adagrad", "fp8", "uniform", "fp32"),
       ("mlperf-dcnv2", 4_000_000, 32768, "rowwise_adagrad", "fp8", "uniform", "fp32"),
       ("mlperf-dcnv2", 4_000_000, 65536, "rowwise_adagrad", "fp8", "uniform", "fp32"),
       ("mlperf-dcnv2", None, 32768, "rowwise_adagrad", "fp8", "uniform", "fp32"),
       ("mlperf-dcnv2", None, 65536, "rowwise_adagrad", "fp8", "zipf", "bf16"),
       ("dcnv2-small", None, 32768, "rowwise_adagrad", "fp8", "uniform", "fp32"),
       ("dcnv2-small", None, 65536, "rowwise_adagrad", "fp8", "uniform", "fp32"),
       ("dlrm-criteo-kaggle", None, 65536, "rowwise_adagrad", "fp8", "uniform", "fp32"))
QUICK = (("dcnv2-small", None, 2048, "rowwise_adagrad", "bf16", "uniform", "fp32"),
         ("dcnv2-small", None, 4096, "rowwise_adagrad", "bf16", "uniform", "fp16"),
         ("dlrm-criteo-kaggle", 100_000, 2048, "rowwise_adagrad", "bf16", "zipf", "fp32"))
#: The trainer's synthetic index distributions as the planner's (the same power law since the
#: fourteenth session; the runs before priced "zipf" as the log-uniform skew, exponent 1).
DISTRIBUTION = {"uniform": "uniform", "zipf": "zipf"}


@dataclass(frozen=True, kw_only=True, slots=True)
class Case:
    preset: str
    row_cap: int | None
    batch: int
    optimizer: str
    precision: str
    distribution: str
    rows: str = "fp32"  # embedding row dtype

    @property
    def model_label(self) -> str:
        cap = f" cap {self.row_cap / 1e6:g}M" if self.row_cap else ""
        rows = "" if self.rows == "fp32" else f" {self.rows} rows"
        return f"{self.preset}{cap} {self.optimizer} {self.precision} {self.distribution}{rows}"


def cases(configs) -> list[Case]:
    """The Cases of configuration tuples (FULL, QUICK: the fields of Case in order)."""
    return [Case(preset=p, row_cap=r, batch=b, optimizer=o, precision=d, distribution=x, rows=w)
            for p, r, b, o, d, x, w in configs]


def predict(case: Case, device_name: str):
    from polyrec.models.config import preset
    from polyrec.planner import PlanConstraints, make_plan, model_spec_from_config, parse_fleet

    cfg = preset(case.preset)
    if case.row_cap:
        cfg = cfg.with_capped_rows(case.row_cap)
    spec = model_spec_from_config(cfg, index_distribution=DISTRIBUTION[case.distribution])
    c = PlanConstraints(weight_dtypes=(case.rows,), optimizers=(case.optimizer,), batch_per_gpu=case.batch,
                        allow_host_cache=False, dense_dtype=case.precision, overlap="none")
    return make_plan(spec, parse_fleet(device_name), c)


def fitting(configurations: list[Case], device_name: str) -> tuple[dict[int, Case], list[str]]:
    """The configurations whose plan fits one ``device_name`` (an H100's 80 GB holds no full-size MLPerf tables
    in fp32), by their index in the list (the host costs were fitted on the even ones), and why each other
    one was left out."""
    from polyrec.planner import NoFitError

    kept, left_out = {}, []
    for index, case in enumerate(configurations):
        try:
            predict(case, device_name)
        except NoFitError as exc:
            left_out.append(f"{case.model_label} B={case.batch}: {str(exc).splitlines()[0]}")
            continue
        kept[index] = case
    return kept, left_out


def measure(case: Case, *, warmup: int, steps: int) -> dict:
    import torch

    from polyrec.runtime import bench
    from polyrec.runtime.config import TrainConfig

    cfg = TrainConfig(preset=case.preset, data=f"synthetic:{case.distribution}", batch_size=case.batch,
                      steps=warmup + steps, device="cuda", precision=case.precision,
                      embedding_optimizer=case.optimizer, embedding_dtype=case.rows, row_cap=case.row_cap,
                      log_every=10**9, cuda_graphs=False)
    row = bench.measure(cfg, label=case.model_label, warmup=warmup, steps=steps)
    gc.collect()
    torch.cuda.empty_cache()
    return row


def ensure_ceilings(spec) -> tuple[str, bool]:
    """Calibrate the ceilings where none is stored; (what the ceilings are, whether this run must
    measure the host scale: the stored calibration has none)."""
    from polyrec.hardware.calibrate import calibrate, load_calibration, save_calibration

    stored = load_calibration(spec.name)
    what = "stored calibration"
    if stored is None:
        stored, what = calibrate(spec), "calibrated in this run"
        save_calibration(spec.name, stored)
    return what, "host_scale" not in stored


def store_host_scale(spec, probes: dict[str, tuple[list[float], float]]) -> dict:
    """Store this run's host scale (each probe's windows spread over the passes, and its launches at
    the fitted costs); returns its entry."""
    from polyrec.hardware.calibrate import load_calibration, save_calibration
    from polyrec.runtime.host_probe import host_scale_entry

    stored = load_calibration(spec.name) or {"device": spec.name}
    stored["host_scale"] = host_scale_entry(probes)
    save_calibration(spec.name, stored)
    return stored["host_scale"]


def harness_bytes(case: Case) -> int:
    """Device bytes the synthetic source keeps besides the batch (polyrec.data.synthetic.SyntheticSource:
    ``elem_rows`` float64 and ``elem_table`` int64 per lookup, ``bag_scale`` fp32 per bag)."""
    from polyrec.models.config import preset

    cfg = preset(case.preset)
    nnz = case.batch * sum(cfg.multi_hot)
    return 16 * nnz + 4 * case.batch * cfg.num_tables


def check_planner_matches_trainer_shapes() -> None:
    """Correctness first: the planner's model is the trainer's (same dense parameter count)."""
    from polyrec.models import DLRM, preset
    from polyrec.planner import model_spec_from_config
    from polyrec.planner.dense import dense_params

    for name in ("dcnv2-small", "dlrm-criteo-kaggle"):
        cfg = preset(name).with_capped_rows(1000)
        model = DLRM(cfg, device="cpu")
        real = sum(p.numel() for p in model.dense_parameters())
        planned = dense_params(model_spec_from_config(cfg))
        if real != planned:
            raise SystemExit(f"{name}: planner counts {planned} dense parameters, the model has {real}")


def row(index: int, case: Case, plan, passes: list[dict]) -> dict:
    """One configuration's predicted vs measured: step as the median over passes of each pass's
    median step minus its data phase, peak memory as the largest over passes."""
    from polyrec.runtime.bench import step_without_data_ms

    measured_ms = statistics.median(step_without_data_ms(g) for g in passes)
    peak_gb = max(g["peak_gb"] for g in passes)
    harness_gb = harness_bytes(case) / 1e9
    predicted_gb = plan.memory[0].used / 1e9 + harness_gb
    first = passes[0]
    return {"model": case.model_label, "case": case, "index": index, "batch": case.batch,
            "embeddings": first["embeddings"], "dense": first["dense"],
            "predicted_ms": plan.step.total_ms, "measured_ms": measured_ms,
            "pass_ms": [step_without_data_ms(g) for g in passes],
            "data_ms": statistics.median(g.get("data_ms", 0.0) for g in passes),
            "measured_mean_ms": statistics.mean(g["ms_per_step"] - g.get("data_ms", 0.0) for g in passes),
            "data_host_ms": statistics.median(g.get("data_host_ms", 0.0) for g in passes),
            "error": plan.step.total_ms / measured_ms - 1,
            "pred_emb_ms": plan.step.embedding_fwd_ms + plan.step.embedding_bwd_ms,
            "meas_emb_ms": statistics.median(g.get("emb_fwd_ms", 0.0) + g.get("emb_bwd_ms", 0.0) for g in passes),
            "pred_dense_ms": plan.step.dense_fwd_ms + plan.step.dense_bwd_ms + plan.step.other_ms,
            "meas_dense_ms": statistics.median(g.get("dense_ms", 0.0) for g in passes),
            "pred_opt_ms": plan.step.optimizer_ms,
            "meas_opt_ms": statistics.median(g.get("optimizer_ms", 0.0) for g in passes),
            "pred_host_ms": plan.step.host_ms,
            "pred_device_ms": plan.step.total_ms - plan.step.host_excess_ms, "harness_gb": harness_gb,
            "predicted_gb": predicted_gb, "measured_gb": peak_gb,
            "memory_error": predicted_gb / peak_gb - 1 if peak_gb else float("nan"),
            "predicted_samples_per_s": plan.samples_per_s,
            "measured_samples_per_s": case.batch / (measured_ms / 1e3)}


def geomean_abs_error(pairs: list[tuple[float, float]]) -> float:
    logs = [abs(math.log(p / m)) for p, m in pairs if p > 0 and m > 0]
    return math.exp(sum(logs) / len(logs)) - 1 if logs else float("nan")


def host_bound(row: dict) -> bool:
    """Whether the plan predicts the row's step bound by the host issuing its launches, not the device."""
    return row["pred_host_ms"] >= row["pred_device_ms"]


def bound_errors(rows: list[dict]) -> dict[str, float]:
    """Step geomean |error| of the rows predicted device-bound and of those predicted host-bound: the
    host-bound rows are priced at the host floor the run's probes measured, which moves between runs."""
    pairs = {kind: [(r["predicted_ms"], r["measured_ms"]) for r in rows if host_bound(r) == (kind == "host")]
             for kind in ("device", "host")}
    return {"step_geomean_device_bound_rows": geomean_abs_error(pairs["device"]),
            "step_geomean_host_bound_rows": geomean_abs_error(pairs["host"]),
            "device_bound_rows": len(pairs["device"])}


def plan_choice(rows: list[dict], device_name: str) -> list[dict]:
    """Per model measured at several batches: the planner's pick among them vs the fastest measured."""
    out = []
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(r["model"], []).append(r)
    for label, group in groups.items():
        if len(group) < 2:
            continue
        case = group[0]["case"]
        scores = {}
        for r in group:
            plan = predict(r["case"], device_name)
            scores[r["case"].batch] = plan.samples_per_s
        picked = max(scores, key=scores.get)
        fastest = max(group, key=lambda r: r["measured_samples_per_s"])
        chosen = next(r for r in group if r["case"].batch == picked)
        out.append({"model": label, "alternatives": len(group), "picked_batch": picked,
                    "fastest_batch": fastest["case"].batch,
                    "picked_vs_fastest": chosen["measured_samples_per_s"] / fastest["measured_samples_per_s"],
                    "preset": case.preset})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="three tiny configurations (smoke test)")
    parser.add_argument("--fp8", action="store_true", help="the fp8 dense configurations (FP8) instead of FULL")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per configuration")
    parser.add_argument("--passes", type=int, default=PASSES, help="times every configuration is measured")
    parser.add_argument("--budget-s", type=float, default=480.0,
                        help="start no pass that would end after this (seconds, from the last pass's length)")
    args = parser.parse_args()

    import torch

    from polyrec.hardware.detect import detect
    from polyrec.results import write_results
    from polyrec.runtime.bench import step_without_data_ms
    from polyrec.runtime.host_probe import PROBE_PRESETS, probe_launches_ms, probe_windows_ms

    if not torch.cuda.is_available():
        raise SystemExit("planner_accuracy needs a GPU")
    check_planner_matches_trainer_shapes()
    spec = detect().spec
    if args.quick:
        calibration, probe_host = "skipped (--quick): datasheet ceilings", False
    else:
        calibration, probe_host = ensure_ceilings(spec)
    configurations, skipped = fitting(cases(QUICK if args.quick else FP8 if args.fp8 else FULL), spec.name)
    warmup, steps = (3, args.steps or 5) if args.quick else (5, args.steps or STEPS)
    passes = 1 if args.quick else args.passes
    start = time.perf_counter()
    probes = {name: ([], probe_launches_ms(spec.name, name)) for name in PROBE_PRESETS} if probe_host else {}
    got: dict[int, list[dict]] = {}
    for done in range(passes):
        if done and (time.perf_counter() - start) * (done + 1) / done > args.budget_s:
            skipped.append(f"passes {done + 1}-{passes} (budget)")
            break
        for index, case in configurations.items():
            if index % PROBE_EVERY == 0:
                for name, (windows, _) in probes.items():
                    windows += probe_windows_ms(name, 1)
            got.setdefault(index, []).append(measure(case, warmup=warmup, steps=steps))
            print(f"pass {done + 1}/{passes} {case.model_label:<58} B={case.batch:<6} "
                  f"{step_without_data_ms(got[index][-1]):8.2f} ms", flush=True)
    host_probe = store_host_scale(spec, probes) if probes else None
    if host_probe:
        calibration += (f", host launches x {host_probe['value']:.3f} and {host_probe['fixed_ms']:.2f} ms per step "
                        f"measured in this run ({host_probe['fit']})")
    rows = [row(index, configurations[index], predict(configurations[index], spec.name), got[index])
            for index in sorted(got)]
    for r in rows:
        print(f"{r['model']:<58} B={r['batch']:<6} pred {r['predicted_ms']:8.2f} ms  "
              f"meas {r['measured_ms']:8.2f} ms  ({r['error']:+.1%})  mem {r['predicted_gb']:6.2f} / "
              f"{r['measured_gb']:6.2f} GB", flush=True)
    choices = plan_choice(rows, spec.name)
    table = [{k: v for k, v in r.items() if k != "case"} for r in rows]
    summary = {
        "device": spec.name, "ceilings": calibration, "configurations": len(rows), "skipped": len(skipped),
        "step_geomean_abs_error": geomean_abs_error([(r["predicted_ms"], r["measured_ms"]) for r in rows]),
        "step_geomean_even_rows_fit": geomean_abs_error([(r["predicted_ms"], r["measured_ms"]) for r in rows
                                                         if r["index"] % 2 == 0]),
        "step_geomean_odd_rows_check": geomean_abs_error([(r["predicted_ms"], r["measured_ms"]) for r in rows
                                                          if r["index"] % 2 == 1]),
        "step_geomean_abs_error_vs_mean": geomean_abs_error([(r["predicted_ms"], r["measured_mean_ms"])
                                                             for r in rows]),
        **bound_errors(rows),
        "memory_max_abs_error": max((abs(r["memory_error"]) for r in rows), default=float("nan")),
        "memory_geomean_abs_error": geomean_abs_error([(r["predicted_gb"], r["measured_gb"]) for r in rows]),
        "plan_choice_worst": min((c["picked_vs_fastest"] for c in choices), default=float("nan")),
        "wall_s": time.perf_counter() - start,
    }
    write_results("planner_accuracy_fp8" if args.fp8 else "planner_accuracy",
                  {"rows": table, "plan_choice": choices, "skipped": skipped, "host_probe": host_probe}, rows=table,
                  summary=summary)
    print()
    print(f"{'model':<58} {'batch':>6} {'pred ms':>8} {'meas ms':>8} {'err':>7} {'pred GB':>8} {'meas GB':>8}")
    for r in rows:
        print(f"{r['model']:<58} {r['batch']:>6} {r['predicted_ms']:8.2f} {r['measured_ms']:8.2f} "
              f"{r['error']:+7.1%} {r['predicted_gb']:8.2f} {r['measured_gb']:8.2f}")
    for c in choices:
        print(f"plan choice {c['model']}: picked batch {c['picked_batch']}, fastest {c['fastest_batch']}, "
              f"picked/fastest {c['picked_vs_fastest']:.3f}")
    print(summary_line(summary))


def summary_line(summary: dict) -> str:
    """The summary as one ``key=value`` line (floats to 4 significant digits)."""
    return " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in summary.items())


if __name__ == "__main__":
    main()
