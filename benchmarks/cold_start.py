"""Cold start of full-size MLPerf DLRM-DCNv2 (batch 65536): the first 5 steps with an empty Triton cache, with
the first step's kernels compiled in parallel ahead (``TrainConfig.precompile``, ``polyrec.runtime.cold_start``)
and without, in the issue's configuration and the fastest one.

Each line is a fresh process with a new empty ``TRITON_CACHE_DIR``; the lines alternate on/off over ``--rounds``.
A child reports its model build, its precompile (kernels recorded, dry run and compile seconds), the first 5
steps after it, the kernels still compiled during those steps (those the dry run did not foresee), and the
losses of ``--loss-steps`` steps, which must not depend on the precompile. Writes
``cold_start_<gpu>_<date>.{json,md}``.

    PYTHONPATH=.:benchmarks python3 benchmarks/cold_start.py [--rounds 2] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

from polyrec.results import write_results

#: (label, TrainConfig changes): issue 5's configuration and the fastest measured (docs/training.md).
CASES = {"issue": dict(embedding_dtype="fp32", precision="auto", cuda_graphs=False),
         "best": dict(embedding_dtype="bf16", precision="fp8", cuda_graphs=True)}
FIRST_STEPS = 5  # issue 5: the first 5 steps, compiles included, in under 20 s


def child(case: str, precompile: bool, quick: bool, loss_steps: int) -> None:
    from triton.runtime.jit import JITFunction

    from polyrec.runtime import TrainConfig, Trainer

    size = dict(preset="dcnv2-small", batch_size=4096) if quick else dict(preset="mlperf-dcnv2", batch_size=65536)
    cfg = TrainConfig(**size, data="synthetic:uniform", steps=10**9, device="cuda", log_every=10**9,
                      precompile=precompile, **CASES[case])
    late: list[dict[str, Any]] = []
    do_compile = JITFunction._do_compile

    def counted(self, key, signature, device, constexprs, options, attrs, warmup):  # compiles after the precompile
        start = time.perf_counter()
        kernel = do_compile(self, key, signature, device, constexprs, options, attrs, warmup)
        late.append({"kernel": self.fn.__qualname__, "s": time.perf_counter() - start, "signature": str(signature),
                     "constexprs": str(constexprs), "attrs": str(attrs), "warps": options.num_warps})
        return kernel

    t0 = time.perf_counter()
    trainer = Trainer(cfg, progress=False)
    trainer.sync()
    t1 = time.perf_counter()
    cold = trainer.precompile()
    trainer.sync()
    t2 = time.perf_counter()
    JITFunction._do_compile = counted
    losses, per_step = [], []
    for i in range(max(FIRST_STEPS, loss_steps)):
        start = time.perf_counter()
        losses.append(float(trainer.train_step()))  # read now: a graphed loss is the graph's output buffer
        per_step.append(time.perf_counter() - start)
        if i == FIRST_STEPS - 1:
            t3 = time.perf_counter()
    print(json.dumps({"build_s": t1 - t0, "precompile_s": t2 - t1, "steps_s": t3 - t2, "first_steps_s": t3 - t1,
                      "kernels": cold.kernels if cold else 0, "dry_s": cold.dry_s if cold else 0.0,
                      "compile_s": cold.compile_s if cold else 0.0, "late_compiles": len(late),
                      "late_kernels": late, "skipped": trainer.precompile_skipped, "per_step_s": per_step,
                      "losses": losses[:loss_steps]}))


def run_child(case: str, precompile: bool, quick: bool, loss_steps: int) -> dict[str, Any]:
    env = {**os.environ, "TRITON_CACHE_DIR": tempfile.mkdtemp(prefix="polyrec-cold-")}
    cmd = [sys.executable, __file__, "--child", case, "on" if precompile else "off", "--loss-steps", str(loss_steps)]
    proc = subprocess.run(cmd + (["--quick"] if quick else []), env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"case": case, "precompile": precompile, "error": proc.stderr[-2000:]}
    return {"case": case, "precompile": precompile, **json.loads(proc.stdout.strip().splitlines()[-1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="dcnv2-small at batch 4096 (smoke test)")
    parser.add_argument("--loss-steps", type=int, default=8)
    parser.add_argument("--cases", default="issue,best")
    parser.add_argument("--child", nargs=2, metavar=("CASE", "ON_OFF"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1] == "on", args.quick, args.loss_steps)
        return
    rows = []
    for r in range(args.rounds):
        for case in args.cases.split(","):
            for precompile in ((True, False) if r % 2 == 0 else (False, True)):
                row = {"round": r, **run_child(case, precompile, args.quick, args.loss_steps)}
                rows.append(row)
                print({k: v for k, v in row.items() if k not in ("losses", "late_kernels")}, flush=True)
    summary: dict[str, Any] = {"quick": args.quick}
    for case in args.cases.split(","):
        for on in (True, False):
            done = [x for x in rows if x["case"] == case and x["precompile"] == on and "first_steps_s" in x]
            if done:
                summary[f"{case}_{'on' if on else 'off'}_first_steps_s"] = sorted(x["first_steps_s"] for x in done)
        on_runs = [x for x in rows if x["case"] == case and x["precompile"] and "losses" in x]
        off_runs = [x for x in rows if x["case"] == case and not x["precompile"] and "losses" in x]
        if on_runs and off_runs:
            summary[f"{case}_loss_max_rel_diff_on_vs_off"] = max(
                abs(a - b) / max(abs(b), 1e-12) for x in on_runs for y in off_runs
                for a, b in zip(x["losses"], y["losses"]))
            summary[f"{case}_loss_max_rel_diff_off_vs_off"] = max(
                [abs(a - b) / max(abs(b), 1e-12) for x in off_runs for y in off_runs if x is not y
                 for a, b in zip(x["losses"], y["losses"])] or [0.0])
    table = [{k: v for k, v in x.items() if k not in ("losses", "late_kernels", "error")} for x in rows]
    paths = write_results("cold_start", {"rows": rows}, rows=table, summary=summary)
    print(json.dumps(summary, indent=1))
    print("wrote", *paths)


if __name__ == "__main__":
    main()
