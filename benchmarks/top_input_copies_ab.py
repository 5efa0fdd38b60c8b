"""fp8 DLRM-DCNv2: the top MLP's input copies written by the cross network's last pass, against a cast.

Until the forty-fourth session the top MLP cast its input (the cross network's output, [B, 3456] bf16 at MLPerf's
size) to its fp8 copies in a kernel of its own: 0.26 ms per step on the H200 (``fp8_cast_probe``, plain +
transposed at 64 x 128). Now the top MLP's fp8 pass is begun ahead of the cross network
(``MLP.begin_fp8_input``), whose last pass writes the copies beside its output: predicted ~0.15 ms less per
step (the cast's 0.26 less the pass's added fp8 writes, ~0.1). This script, in one process, with fp8 dense
layers both ways (``cast``: the code before, by patching ``MLP.begin_fp8_input`` to begin nothing):
1. the kernels of one eager full-size step (fp32 rows) by the torch profiler, both ways in rotating order in
   one trainer;
2. full-size MLPerf steps (``CASES``), each way in its own trainer, in rotating order over ``--rounds`` rounds;
and writes ``top_input_copies_ab_<gpu>_<date>.{json,md}``.

    PYTHONPATH=.:benchmarks python3 benchmarks/top_input_copies_ab.py [--rounds 2] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

from e2e import WARMUP_STEPS, full_config, safe_measure, timed_steps
from polyrec.models.layers import MLP
from polyrec.results import write_results
from polyrec.runtime import TrainConfig, Trainer
from profiling import kernel_table
from stats import case_rounds, median_where, rotated

#: (label, TrainConfig changes): the fastest full-size form measured (bf16 rows, graphed: its eager dense half
#: waits on the host, docs/training.md) and the target's fp32 rows.
CASES = (("bf16 rows, graphs", {"embedding_dtype": "bf16", "cuda_graphs": True}),
         ("fp32 rows, eager", {"embedding_dtype": "fp32", "cuda_graphs": False}))
#: Kernel rows reported apart in part 1: the casts and the epilogue passes (the cross passes among them).
KERNELS = ("fp8_cast_kernel", "split_k_reduce_kernel")
VARIANTS = ("cast", "copies from the pass")


@contextlib.contextmanager
def cast_input() -> Iterator[None]:
    """The step as before: the top MLP's pass is not begun ahead, so the cross network writes no copies of its
    output and the top MLP begins its pass and casts its input itself."""
    begin = MLP.begin_fp8_input
    MLP.begin_fp8_input = lambda self, *args, **kwargs: None
    try:
        yield
    finally:
        MLP.begin_fp8_input = begin


def measure_variant(cfg: TrainConfig, variant: str, label: str, steps: int) -> dict[str, Any]:
    with cast_input() if variant == "cast" else contextlib.nullcontext():
        return safe_measure(cfg, f"{label}: {variant}", WARMUP_STEPS, steps)


def kernel_rows(cfg: TrainConfig, rounds: int) -> list[dict[str, Any]]:
    """Part 1: one eager trainer, each variant's step profiled in turn (``rounds`` rounds, rotating)."""
    trainer = Trainer(dataclasses.replace(cfg, cuda_graphs=False), progress=False)
    rows = []
    for round_ in range(rounds):
        for variant in rotated(VARIANTS, round_):
            with cast_input() if variant == "cast" else contextlib.nullcontext():
                table = kernel_table(trainer.train_step, reps=3, warmup=3)
            row = {"section": "kernels", "variant": variant, "round": round_,
                   "kernel_ms_per_step": sum(r["ms_per_step"] for r in table)}
            for name in KERNELS:
                row[f"{name}_ms"] = sum(r["ms_per_step"] for r in table if r["kernel"].startswith(name))
                row[f"{name}_calls"] = sum(r["calls_per_step"] for r in table if r["kernel"].startswith(name))
            rows.append(row)
            print(row, flush=True)
    del trainer
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="dcnv2-small at batch 4096, 5 steps (smoke test)")
    args = parser.parse_args()
    base = dataclasses.replace(full_config(args.quick), precision="fp8")  # each case sets cuda_graphs
    steps = timed_steps(args.quick)
    kernels = kernel_rows(base, args.rounds)
    rows = case_rounds(base, CASES, VARIANTS, args.rounds,
                       lambda cfg, variant, label: measure_variant(cfg, variant, label, steps))
    summary: dict[str, Any] = {}
    for v in VARIANTS:
        for key in ("kernel_ms_per_step", *(f"{name}_ms" for name in KERNELS)):
            summary[f"kernels, fp32 rows eager: {v}: {key}"] = median_where(kernels, key, variant=v)
    for label, _ in CASES:
        ms = {v: median_where(rows, "ms_per_step", case=label, variant=v) for v in VARIANTS}
        summary.update({f"{label}: {v} ms": t for v, t in ms.items()})
        if None not in ms.values():
            summary[f"{label}: copies / cast"] = ms["copies from the pass"] / ms["cast"]
    write_results("top_input_copies_ab", {"kernels": kernels, "rows": rows}, rows=kernels + rows, summary=summary)
    for key, value in summary.items():
        print(f"{key:<44} {value if value is None else f'{value:.4f}'}")


if __name__ == "__main__":
    main()
