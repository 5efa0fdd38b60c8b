"""fp8 dense GEMMs at a small batch, eager against CUDA-graphed, on one GPU: whether the graph choice that
"auto" made for an fp8 run from its bf16 step's prediction holds (the rule of the forty-third session; since the
forty-fourth the planner prices the fp8 step itself).

MLPerf DLRM-DCNv2 (tables capped at 4M rows) and dcnv2-small at batch 16384, uniform synthetic ids, 5 warm-up
and 30 timed steps per run, 2 rounds in alternating order; writes ``fp8_graphs_check_<gpu>_<date>.{json,md}``.

    PYTHONPATH=.:benchmarks python3 benchmarks/fp8_graphs_check.py
"""

from __future__ import annotations

import dataclasses

from e2e import CAP_ROWS, safe_measure
from polyrec.results import write_results
from polyrec.runtime import TrainConfig
from stats import median_where, rotated

PRESETS = (("mlperf-dcnv2", CAP_ROWS), ("dcnv2-small", None))
BATCH, WARMUP, STEPS, ROUNDS = 16384, 5, 30, 2


def main() -> None:
    rows = []
    for preset, cap in PRESETS:
        base = TrainConfig(preset=preset, data="synthetic:uniform", batch_size=BATCH, steps=10**9, row_cap=cap,
                           synthetic_pool=WARMUP + STEPS, device="cuda", precision="fp8")
        for r in range(ROUNDS):
            for graphs in rotated((False, True), r):
                row = safe_measure(dataclasses.replace(base, cuda_graphs=graphs),
                                   f"{preset} fp8 {BATCH} graphs={graphs}", WARMUP, STEPS)
                rows.append({"preset": preset, "graphs": graphs, "round": r, **row})
                print(preset, graphs, r, row.get("ms_per_step"), row.get("error", ""), flush=True)
    summary = {f"{preset} {'graphed' if graphs else 'eager'} ms": median_where(rows, "ms_per_step", preset=preset,
                                                                               graphs=graphs)
               for preset, _ in PRESETS for graphs in (False, True)}
    write_results("fp8_graphs_check", {"rows": rows}, rows=rows, summary=summary)


if __name__ == "__main__":
    main()
