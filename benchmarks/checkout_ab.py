"""The same training steps timed from two checkouts of polyrec, in alternating fresh processes.

For a change that no switch can turn off inside one process (host-side code: the dispatch of every
call), the baseline is the code before it. Each trial runs one checkout's trainer in a new Python
process (``PYTHONPATH`` = that checkout, and the checkout as its working directory: ``python -c`` puts the
working directory first on ``sys.path``, so a child started from another tree imports that tree's
``polyrec`` whatever ``PYTHONPATH`` says, which voided the thirty-second session's rounding A/B; the trial
refuses a child whose ``polyrec`` is not the checkout's) and reports ``Trainer.benchmark``; the rounds
alternate the two checkouts so that drift over time hits both alike. The results file is written by the
checkout this script runs from, and names both checkouts' commits.

    PYTHONPATH=. python3 benchmarks/checkout_ab.py --base OLD_DIR --change NEW_DIR \\
        [--configs mlperf-dcnv2:16384,mlperf-dcnv2:65536] [--rounds 3] [--steps 30] [--cuda-graphs] \\
        [--data synthetic:uniform] [--precision fp8] [--embedding-dtype bf16]

Each trial trains on a synthetic pool of as many batches as its warm and timed steps (no timed step sees a
batch twice), or on ``--data``'s file as it is read (``mlperf:DIR/day_0_sparse_multi_hot.npz``, an absolute
path). Both checkouts run the dense half eager, or with ``--cuda-graphs`` both graphed (a checkout from before
the trainer's "auto" default takes the same True / False).

About 20 s per trial on an H200 with tables capped at 4M rows (``--row-cap``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from polyrec.results import dirty_marked, write_results

#: What a child process runs: build the trainer, time it, print one JSON line.
CHILD = """
import json, sys
import polyrec
from polyrec.runtime import TrainConfig, Trainer
preset, batch, row_cap, warmup, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
options = json.loads(sys.argv[7])
pool = warmup + steps if options.get("data", "synthetic").startswith("synthetic") else 0  # a file is read, not pooled
cfg = TrainConfig(preset=preset, batch_size=batch, row_cap=row_cap or None, steps=10_000,
                  synthetic_pool=pool, cuda_graphs=sys.argv[6] == "graphs", **options)
trainer = Trainer(cfg, progress=False)
options = {k: getattr(cfg, k) for k in options}
timed = trainer.benchmark(warmup=warmup, steps=steps)
trainer.source.close()  # a file read ahead: its thread ended before the process (else C++'s terminate at exit)
print(json.dumps({**timed, "polyrec_file": polyrec.__file__, "options": options}))
"""


def commit_of(checkout: Path) -> str:
    """The checkout's git commit where it is a repository's root ("-dirty" where its tracked files differ from
    it), else its directory's name (a copy)."""
    try:
        top, commit = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--show-toplevel", "--short", "HEAD"],
                                     capture_output=True, text=True, check=True, timeout=30).stdout.split()
    except (OSError, subprocess.SubprocessError, ValueError):
        return checkout.name
    return dirty_marked(checkout, commit) if Path(top).resolve() == checkout.resolve() else checkout.name


def run_child(checkout: Path, code: str, argv: list[str], what: str) -> dict:
    """``python -c code *argv`` in a fresh process of ``checkout`` (its working directory and ``PYTHONPATH``);
    the last line it prints, as JSON, which must name the ``polyrec_file`` it imported: one outside the
    checkout is refused."""
    env = dict(os.environ, PYTHONPATH=str(checkout))
    done = subprocess.run([sys.executable, "-c", code, *argv], cwd=checkout, env=env, capture_output=True, text=True,
                          timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{checkout} {what} failed:\n{done.stderr[-3000:]}")
    row = json.loads(done.stdout.strip().splitlines()[-1])
    if not Path(row["polyrec_file"]).resolve().is_relative_to(checkout.resolve()):
        raise RuntimeError(f"the trial of {checkout} imported polyrec from {row['polyrec_file']}: "
                           "not the checkout's code")
    return row


def trial(checkout: Path, preset: str, batch: int, args) -> dict:
    """One fresh process of ``checkout`` timing ``preset`` at ``batch``."""
    mode = "graphs" if args.cuda_graphs else "eager"
    return run_child(checkout, CHILD, [preset, str(batch), str(args.row_cap), str(args.warmup), str(args.steps), mode,
                                       json.dumps(run_options(args))], f"{preset}@{batch}")


def run_options(args: argparse.Namespace) -> dict:
    """The trainer's settings both checkouts take from the command line: data, dense precision, row dtype."""
    return {"data": args.data, "precision": args.precision, "embedding_dtype": args.embedding_dtype}


def checkouts_of(args: argparse.Namespace) -> dict[str, Path]:
    """{"base": ..., "change": ...}, resolved."""
    return {"base": args.base.resolve(), "change": args.change.resolve()}


def turn_order(round_index: int) -> tuple[str, str]:
    """The checkouts in the order round ``round_index`` runs them: alternating, so that drift hits both alike."""
    return ("base", "change") if round_index % 2 == 0 else ("change", "base")


def parse_configs(text: str) -> list[tuple[str, int]]:
    configs = []
    for item in text.split(","):
        preset, _, batch = item.partition(":")
        if not batch.isdigit():
            raise SystemExit(f"--configs: {item!r} is not PRESET:BATCH")
        configs.append((preset, int(batch)))
    return configs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="checkout before the change")
    parser.add_argument("--change", type=Path, required=True, help="checkout with the change")
    parser.add_argument("--configs", default="mlperf-dcnv2:16384,mlperf-dcnv2:65536", help="PRESET:BATCH,...")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--row-cap", type=int, default=4_000_000, help="rows per table at most (0: full size)")
    parser.add_argument("--cuda-graphs", action="store_true",
                        help="graph the dense half in both checkouts (default: eager in both)")
    parser.add_argument("--data", default="synthetic", help="synthetic (power-law ids), synthetic:uniform, or a file spec (absolute path)")
    parser.add_argument("--precision", default="auto", help="dense matmuls: auto (bf16), bf16 or fp8")
    parser.add_argument("--embedding-dtype", default="fp32", help="embedding rows: fp32, fp16 or bf16")
    args = parser.parse_args()
    checkouts = checkouts_of(args)
    rows = []
    for preset, batch in parse_configs(args.configs):
        for r in range(args.rounds):
            for name in turn_order(r):
                measured = trial(checkouts[name], preset, batch, args)
                rows.append({"preset": preset, "batch": batch, "round": r, "checkout": name,
                             "median_step_ms": measured["median_step_ms"], "ms_per_step": measured["ms_per_step"],
                             "dense_host_ms": measured.get("dense_host_ms"), "dense_ms": measured.get("dense_ms")})
                print(rows[-1], flush=True)
    summary = {name: commit_of(path) for name, path in checkouts.items()} | {
        "cuda_graphs": args.cuda_graphs, "row_cap": args.row_cap} | run_options(args)
    for preset, batch in parse_configs(args.configs):
        med = {name: statistics.median(r["median_step_ms"] for r in rows
                                       if (r["preset"], r["batch"], r["checkout"]) == (preset, batch, name))
               for name in checkouts}
        summary[f"{preset}@{batch}_median_ms"] = med
        summary[f"{preset}@{batch}_change_over_base"] = med["change"] / med["base"]
    write_results("checkout_ab", {"rows": rows, "summary": summary}, rows=rows, summary=summary)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
