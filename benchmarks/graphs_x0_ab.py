"""The CUDA-graphed dense half reading the lookup where it was written, against copying it in, on one GPU.

Before the forty-third session a graphed step copied the lookup's output into the graph's static input
(a strided copy: the output is the last columns of DLRM-DCNv2's x0 buffer) and the graph assembled x0 with a
cat: 0.50 + 0.23 ms of an MLPerf step at batch 65536 on the H200 (``e2e_profile.py --cuda-graphs``).
``PolyrecEmbeddings.hold_output`` now makes every lookup land in the buffer the graph was captured on. This
script times, in rotating order over ``--rounds`` rounds in one process, each case's eager step, the graphed
step as built (``graphs``) and the graphed step with the hold turned off (``graphs, copied``: the code
before), and writes ``graphs_x0_ab_<gpu>_<date>.{json,md}``.

    PYTHONPATH=.:benchmarks python3 benchmarks/graphs_x0_ab.py [--rounds 2] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

from e2e import CAP_ROWS, WARMUP_STEPS, full_config, safe_measure, timed_steps
from polyrec.models.embeddings import PolyrecEmbeddings
from polyrec.results import write_results
from polyrec.runtime import TrainConfig
from stats import case_rounds, median_where

#: (label, TrainConfig changes): issue 5's full-size step, the capped 16384 batch where "auto" graphs, and
#: the fastest full-size form measured (fp8 dense GEMMs beside bf16 rows), whose eager dense half waits on
#: the host (docs/training.md).
CASES = (("full, fp32 rows", {}),
         ("capped 4M, batch 16384", {"row_cap": CAP_ROWS, "batch_size": 16384}),
         ("full, bf16 rows, fp8 dense", {"embedding_dtype": "bf16", "precision": "fp8"}))
VARIANTS = ("eager", "graphs", "graphs, copied")


@contextlib.contextmanager
def copied_input() -> Iterator[None]:
    """The graphed trainer as before ``hold_output``: no lookup is held, so the graph copies it in and cats x0."""
    hold = PolyrecEmbeddings.hold_output
    PolyrecEmbeddings.hold_output = lambda self, emb: False
    try:
        yield
    finally:
        PolyrecEmbeddings.hold_output = hold


def measure_variant(cfg: TrainConfig, variant: str, label: str, steps: int) -> dict[str, Any]:
    graphed = dataclasses.replace(cfg, cuda_graphs=variant != "eager")
    with copied_input() if variant == "graphs, copied" else contextlib.nullcontext():
        return safe_measure(graphed, f"{label}: {variant}", WARMUP_STEPS, steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="dcnv2-small at batch 4096, 5 steps (smoke test)")
    args = parser.parse_args()
    base, steps = full_config(args.quick), timed_steps(args.quick)  # each variant sets cuda_graphs
    rows = case_rounds(base, CASES, VARIANTS, args.rounds,
                       lambda cfg, variant, label: measure_variant(cfg, variant, label, steps))
    summary = {f"{label}: {variant} ms": median_where(rows, "ms_per_step", case=label, variant=variant)
               for label, _ in CASES for variant in VARIANTS}
    write_results("graphs_x0_ab", {"rows": rows}, rows=rows, summary=summary)
    for key, value in summary.items():
        print(f"{key:<48} {value if value is None else f'{value:.2f}'}")


if __name__ == "__main__":
    main()
