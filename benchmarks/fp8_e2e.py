"""fp8 dense GEMMs in the training step (``--precision fp8``) against bf16, measured on one GPU.

1. Check: ``cast_fp8`` on the GPU against torch's own conversion (e4m3 and e5m2, plain and transposed,
   saturating values, a strided input), bit for bit; nothing is timed if it fails.
2. Full-size ``mlperf-dcnv2``, batch 65536, uniform ids (issue 5's target case): bf16 dense eager, fp8 dense
   eager and fp8 dense with the dense half CUDA-graphed (``VARIANTS``), with fp32 rows (the target's) and bf16
   rows, in rotating order over ``--rounds`` rounds in one process; samples/s, ms per step and its phases,
   peak memory.
3. Quality: test AUC of polyrec's path with bf16 and with fp8 dense against the eager fp32 reference, three
   seeds each, on ``e2e.py``'s MovieLens-100k task and on ``make demo``'s synthetic task (hidden-model labels).

    PYTHONPATH=.:benchmarks python3 benchmarks/fp8_e2e.py [--movielens PATH] [--rounds 2] [--quick]

Results: ``benchmarks/results/fp8_e2e_<gpu>_<date>.{json,md}``.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

import torch

from e2e import MOVIELENS_DEFAULT, WARMUP_STEPS, full_config, safe_measure, timed_steps
from polyrec.kernels import fp8
from polyrec.results import write_results
from polyrec.runtime import TrainConfig, Trainer
from stats import median_where, rotated

#: Row dtypes of the full-size rows: the target's fp32 and the fastest, bf16 (docs/training.md).
ROWS = ("fp32", "bf16")
#: (dense precision, CUDA graphs) of the full-size rows: the fp8 dense half issues more launches (its casts)
#: than bf16's, so its eager step can wait on the host; the graphed row shows the step without that.
VARIANTS = (("bf16", False), ("fp8", False), ("fp8", True))
#: make demo's task (Makefile): dcnv2-small on synthetic data, 600 steps of 512.
DEMO_STEPS, DEMO_BATCH = 600, 512


def check_casts(device: torch.device) -> dict[str, Any]:
    """cast_fp8 against torch's conversion on the GPU: every element of both copies, both formats."""
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(4099, 3472, device=device, generator=gen, dtype=torch.float32)
    x = (x * torch.logspace(-6, 6, x.shape[1], device=device)).to(torch.bfloat16)[:, 5:3461]  # strided, [4099, 3456]
    mismatched = 0
    for kind in (fp8.FORWARD, fp8.GRADIENT):
        scaling = fp8.Fp8Scaling([kind]).to(device)
        scaling.begin(True)
        scaling.prepare(0, x, relu=False)  # the role's first cast: its own maximum, then 4x beyond it saturates
        scaling.scales.mul_(4)
        q, qt = fp8.cast_fp8(x, scaling, 0, transposed=True)
        fmt = scaling.format(0)
        ref = (x.float() * scaling.scales[0]).clamp(-fmt.max_value, fmt.max_value).to(fmt.dtype)
        mismatched += int((q.view(torch.uint8) != ref.view(torch.uint8)).sum())
        mismatched += int((qt.view(torch.uint8) != ref.t().view(torch.uint8)).sum())
        mismatched += int(scaling.history[0, 0] != x.float().abs().max())
    ok = mismatched == 0
    print(f"cast_fp8 vs torch: {mismatched} mismatched elements ({'ok' if ok else 'MISMATCH: nothing timed'})")
    return {"section": "check", "path": "cast_fp8 vs torch conversion", "mismatched": mismatched, "ok": ok}


def full_size(args) -> list[dict[str, Any]]:
    base, steps = full_config(args.quick), timed_steps(args.quick)
    rows = []
    for round_ in range(args.rounds):
        for rows_dtype in ROWS:
            for precision, graphs in rotated(VARIANTS, round_):
                cfg = dataclasses.replace(base, precision=precision, embedding_dtype=rows_dtype, cuda_graphs=graphs)
                label = f"{precision} dense{' + graphs' if graphs else ''}, {rows_dtype} rows"
                row = safe_measure(cfg, label, WARMUP_STEPS, steps)
                rows.append({"section": "full", "round": round_, "rows": rows_dtype, "precision": precision,
                             "graphs": graphs, **row})
                print(f"{label:<24} {row.get('ms_per_step', float('nan')):8.2f} ms  {row.get('error', '')}")
    return rows


def _auc(cfg: TrainConfig) -> float | None:
    trainer = Trainer(cfg, progress=False)
    auc = trainer.train().final_auc
    del trainer
    return auc


def quality(args) -> list[dict[str, Any]]:
    path = Path(args.movielens) if args.movielens else MOVIELENS_DEFAULT
    tasks = {"synthetic": dict(preset="dcnv2-small", data="synthetic", steps=60 if args.quick else DEMO_STEPS,
                               batch_size=DEMO_BATCH)}
    if path.is_file():
        tasks["movielens"] = dict(preset="dcnv2-small", data=f"movielens:{path}", steps=40 if args.quick else 400,
                                  batch_size=1024, lr=0.01, embedding_optimizer="adagrad")
    else:
        print(f"MovieLens: {path} not found; pass --movielens PATH")
    rows = []
    for task, common in tasks.items():
        for seed in (0, 1, 2):
            for label, extra in (("eager reference", dict(embedding_backend="torch", dense_backend="torch",
                                                           precision="fp32")),
                                 ("polyrec bf16", dict(precision="bf16")), ("polyrec fp8", dict(precision="fp8"))):
                cfg = TrainConfig(**common, **extra, seed=seed, log_every=common["steps"], device="cuda",
                                  cuda_graphs=False)
                rows.append({"section": task, "path": label, "seed": seed, "test_auc": _auc(cfg)})
                print(f"{task:<10} {label:<16} seed {seed}: AUC {rows[-1]['test_auc']:.5f}")
    return rows


def summarize(full: list[dict], quality_rows: list[dict]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for rows_dtype in ROWS:
        ms = {(p, g): median_where(full, "ms_per_step", rows=rows_dtype, precision=p, graphs=g) for p, g in VARIANTS}
        if None in ms.values():
            continue
        bf16 = ms["bf16", False]
        summary[f"{rows_dtype}_rows_ms_bf16_dense"] = bf16
        batch = next(r["batch"] for r in full if "batch" in r)
        for graphs in (False, True):
            name = f"{rows_dtype}_rows_fp8_dense{'_graphs' if graphs else ''}"
            f8 = ms["fp8", graphs]
            summary[f"{name}_ms"], summary[f"{name}_over_bf16"] = f8, f8 / bf16
            summary[f"{name}_samples_per_s"] = batch / f8 * 1e3
    for task in ("movielens", "synthetic"):
        for label in ("eager reference", "polyrec bf16", "polyrec fp8"):
            aucs = [r["test_auc"] for r in quality_rows if r["section"] == task and r["path"] == label
                    and r["test_auc"] is not None]
            if aucs:
                summary[f"{task}_auc_{label.replace(' ', '_')}"] = sum(aucs) / len(aucs)
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--movielens", help="path to ml-100k.inter (RecBole) or u.data (GroupLens)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the full-size rows (alternating order)")
    parser.add_argument("--quick", action="store_true", help="dcnv2-small and few steps: a smoke test")
    parser.add_argument("--skip-quality", action="store_true", help="time the step only")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/fp8_e2e.py needs a CUDA or ROCm GPU")
    check = check_casts(torch.device("cuda"))
    full = full_size(args) if check["ok"] else []
    quality_rows = [] if args.skip_quality or not check["ok"] else quality(args)
    summary = summarize(full, quality_rows) | {"casts_ok": check["ok"]}
    json_path, _ = write_results("fp8_e2e_quick" if args.quick else "fp8_e2e", {"rows": [check, *full, *quality_rows]},
                                 rows=[_flat(r) for r in [check, *full, *quality_rows]], summary=summary)
    print(f"\nresults: {json_path}")
    for k, v in summary.items():
        print(f"{k}: {v}")


def _flat(row: dict[str, Any]) -> dict[str, Any]:
    keys = ("section", "path", "round", "rows", "precision", "graphs", "seed", "samples_per_s", "ms_per_step",
            "peak_gb", "emb_fwd_ms", "dense_ms", "emb_bwd_ms", "optimizer_ms", "test_auc", "mismatched", "ok", "error")
    return {k: row.get(k) for k in keys}


if __name__ == "__main__":
    main()
