"""The embedding module alone (forward + backward + update) timed from two checkouts of polyrec, in
alternating fresh processes: an A/B of a kernel change with nothing else moving.

Each trial is one fresh process of a checkout (``checkout_ab.run_child``: the checkout as working directory
and ``PYTHONPATH``, and a child that imported any other ``polyrec`` is refused). It builds the MLPerf
DLRM-DCNv2 tables (``tbe.py``'s shapes and ids, from this script's tree, so both arms run the same
apparatus), runs 3 steps, then reports: a checksum of the tables and state (every 997th value, float64) so
that two arms doing the same arithmetic show it (half-precision rows too: torch's generator, which draws the
rounding's seeds, is seeded), the kernels of one step by the torch profiler, and the
median step by ``do_bench``. Rows of ``--dtypes`` fp32 / fp16 / bf16, the output gradient fp32 or bf16.

    PYTHONPATH=. python3 benchmarks/tbe_checkout_ab.py --base OLD_DIR --change NEW_DIR \\
        [--dtypes fp32,fp16] [--grad-dtype bf16] [--row-cap N] [--optimizer rowwise_adagrad] [--weight-decay 0]
        [--rounds 2]

About 30 s per trial on an H200 with the full tables (compiles included in the first of each checkout).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from checkout_ab import checkouts_of, commit_of, run_child, turn_order
from polyrec.kernels.tbe_optim import OPTIMIZERS
from polyrec.results import write_results

BENCHMARKS = Path(__file__).resolve().parent
#: Kernel-name prefixes reported per trial (the torch profiler's names).
KERNELS = {"lookup": ("pooled_forward_kernel",), "sort": ("void at_cuda_detail::cub::detail::radix_sort",),
           "update": ("lane_update_kernel", "update_kernel"), "permute": ("permute_kernel",),
           "merge": ("merge_level_kernel",)}
#: What a child process runs: build the module, step it, time it, print one JSON line.
CHILD = """
import json, sys
sys.path.insert(0, sys.argv[1])  # the runner's benchmarks/: the same shapes, ids and timing in both arms
import polyrec, torch, triton
from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec
from profiling import kernel_table
from tbe import DIM, MLPERF_HOTS, MLPERF_ROWS, make_batch
dtypes = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
rows_dtype, grad_dtype, cap, optimizer = dtypes[sys.argv[2]], dtypes[sys.argv[3]], int(sys.argv[4]), sys.argv[5]
weight_decay = float(sys.argv[6])
rows = [min(r, cap) for r in MLPERF_ROWS] if cap else MLPERF_ROWS
torch.manual_seed(0)  # the stochastic rounding's seeds (drawn from torch's default generator): the same in both arms
gen = torch.Generator(device="cuda").manual_seed(0)
module = TableBatchedEmbedding([TableSpec(name=f"t{i}", rows=r, dim=DIM) for i, r in enumerate(rows)],
                               optimizer=EmbeddingOptimizer(kind=optimizer, lr=0.01, weight_decay=weight_decay),
                               output_dtype=grad_dtype,
                               weight_dtype=rows_dtype, device="cuda")
batch = make_batch(rows, MLPERF_HOTS, 65536, False, gen)
grad = torch.randn(65536, DIM * len(rows), device="cuda", generator=gen).to(grad_dtype)
step = lambda: module(batch).backward(grad)
for _ in range(3):
    step()
checksum = sum(float(t[::997].double().sum()) for t in (module.weights, module.state1, module.state2) if t.numel())
kernels = kernel_table(step, reps=5)
ms = triton.testing.do_bench(step, warmup=10, rep=200, return_mode="median")
print(json.dumps({"polyrec_file": polyrec.__file__, "checksum": checksum, "step_ms": ms, "kernels": kernels}))
"""


def kernel_ms(kernels: list[dict], prefixes: tuple[str, ...]) -> float:
    """ms per step of the kernels whose names start with one of ``prefixes``."""
    return sum(k["ms_per_step"] for k in kernels if k["kernel"].startswith(prefixes))


def trial(checkout: Path, dtype: str, args) -> dict:
    """One fresh process of ``checkout`` timing the module with ``dtype`` rows: step ms, per-kernel ms, checksum."""
    got = run_child(checkout, CHILD, [str(BENCHMARKS), dtype, args.grad_dtype, str(args.row_cap), args.optimizer,
                                      str(args.weight_decay)], f"tbe {dtype} rows")
    return {"step_ms": got["step_ms"], "checksum": got["checksum"],
            **{f"{name}_ms": kernel_ms(got["kernels"], prefixes) for name, prefixes in KERNELS.items()}}


def summarize(rows: list[dict], dtypes: list[str]) -> dict:
    """Per row dtype: each checkout's median step and update ms, change / base, and whether the checksums agree."""
    out = {}
    for dtype in dtypes:
        mine = [r for r in rows if r["dtype"] == dtype]
        for key in ("step_ms", "update_ms"):
            med = {name: statistics.median(r[key] for r in mine if r["checkout"] == name)
                   for name in ("base", "change")}
            out[f"{dtype}_{key}"] = med
            out[f"{dtype}_{key}_change_over_base"] = med["change"] / med["base"]
        out[f"{dtype}_same_checksum"] = len({r["checksum"] for r in mine}) == 1
    return out


def parse_dtypes(text: str) -> list[str]:
    dtypes = text.split(",")
    bad = [d for d in dtypes if d not in ("fp32", "fp16", "bf16")]
    if bad:
        raise SystemExit(f"--dtypes: {', '.join(bad)} not fp32, fp16 or bf16")
    return dtypes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="checkout before the change")
    parser.add_argument("--change", type=Path, required=True, help="checkout with the change")
    parser.add_argument("--dtypes", default="fp32,fp16", help="row dtypes, comma-separated: fp32, fp16, bf16")
    parser.add_argument("--grad-dtype", choices=("fp32", "bf16"), default="bf16",
                        help="the output gradient's dtype (bf16: training with a bf16 dense half)")
    parser.add_argument("--row-cap", type=int, default=0, help="cap every table's rows (0: the full tables)")
    parser.add_argument("--optimizer", choices=OPTIMIZERS, default="rowwise_adagrad")
    parser.add_argument("--weight-decay", type=float, default=0.0,
                        help="the optimizer's weight decay (> 0 runs the update's weight-decay variant)")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    dtypes = parse_dtypes(args.dtypes)
    checkouts = checkouts_of(args)
    rows = []
    for r in range(args.rounds):
        for dtype in dtypes:
            for name in turn_order(r):
                rows.append({"dtype": dtype, "round": r, "checkout": name, **trial(checkouts[name], dtype, args)})
                print(json.dumps(rows[-1]), flush=True)
    summary = {name: commit_of(path) for name, path in checkouts.items()} | {
        "grad_dtype": args.grad_dtype, "row_cap": args.row_cap, "optimizer": args.optimizer,
        "weight_decay": args.weight_decay} | summarize(rows, dtypes)
    write_results("tbe_checkout_ab", {"rows": rows, "summary": summary}, rows=rows, summary=summary)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
