"""The pooled forward's launch plan priced with each bag's output as one element (the code) or as its whole
pooled row (``block_d`` elements), side by side on the GPU.

``tbe_lookup.forward_seconds`` takes ``out_bytes`` per bag and every caller passes one element's size, so a
D=128 bag's 512-byte fp32 output is priced as 4 bytes. Pricing the row moves the plan of the 20 features the
default world-2 placement gives rank 1 at batch 131072 from two launches to one
(``tests/test_tbe_forward_plan.py::test_mlperf_short_bags_take_their_own_launch``). This plans each case both
ways (the "row" side scales ``out_bytes`` by the tile's ``block_d`` inside the selector) and times both plans
in interleaved rounds (with ``--sweep``, beside the fastest single launch over all the case's features).

Cases: MLPerf tables at full size, D=128, fp32 and fp16 rows, uniform ids and ``tbe.py``'s skewed ids:
all 26 features at batch 65536 (one GPU) and each world-2 rank's features at batch 131072. The plans are
priced at the catalog's copy rate, or with ``--measured-copy-rate`` at the one measured at the start of the
run (stored as this process's calibration, in a temporary cache folder, as ``polyrec hw calibrate`` would).

    PYTHONPATH=.:benchmarks python3 benchmarks/forward_out_bytes_ab.py [--rounds 3] [--measured-copy-rate] [--sweep]

Writes ``forward_out_bytes_ab_<gpu>_<date>.{json,md}``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile

import torch
from forward_plan_ab import plan_text
from gather_rate import config_text, launch_plan, sweep_configs
from tbe import DIM, bench_ms, copy_rate, make_batch

from polyrec.hardware.calibrate import save_calibration
from polyrec.kernels import tbe_select
from polyrec.kernels.jagged import JaggedBatch
from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec
from polyrec.models.config import preset
from polyrec.results import write_results

#: The tables the default world-2 placement gives rank 1 (``tests/test_tbe_forward_plan.py``); rank 0 has the rest.
RANK1 = [1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15, 19, 21, 22, 23, 24, 25]
CASES = [("world 1", list(range(26)), 65536),
         ("world 2 rank 0", [t for t in range(26) if t not in RANK1], 131072),
         ("world 2 rank 1", RANK1, 131072)]


@contextlib.contextmanager
def row_priced_output():
    """The selector's forward model with each bag's output priced as its whole row (``block_d`` elements)."""
    original = tbe_select.forward_seconds

    def priced(tile, spec, ceil, **kw):
        return original(tile, spec, ceil, **(kw | {"out_bytes": kw["out_bytes"] * tile.block_d}))

    tbe_select.forward_seconds = priced
    try:
        yield
    finally:
        tbe_select.forward_seconds = original


def plan_of(module: TableBatchedEmbedding, batch: JaggedBatch, row_priced: bool) -> list:
    """The module's forward launches for ``batch``, planned afresh under the chosen output pricing."""
    module._configs.clear()
    tbe_select.clear_cache()
    with row_priced_output() if row_priced else contextlib.nullcontext():
        return module.forward_plan(batch)


def run_case(label: str, tables: list[int], batch_size: int, dtype: torch.dtype, skew: bool, args) -> dict:
    config = preset("mlperf-dcnv2")
    rows = [config.table_rows[t] for t in tables]
    hots = [config.multi_hot[t] for t in tables]
    module = TableBatchedEmbedding([TableSpec(name=f"t{t}", rows=rows[i], dim=DIM) for i, t in enumerate(tables)],
                                   optimizer=EmbeddingOptimizer(kind="rowwise_adagrad", lr=0.01),
                                   weight_dtype=dtype, device="cuda")
    batch = make_batch(rows, hots, batch_size, skew, torch.Generator(device="cuda").manual_seed(3))
    out = torch.empty(batch.batch_size, module.output_dim, device="cuda")
    sweep = (sweep_configs(module, batch, out, torch.arange(len(tables), device="cuda", dtype=torch.int32))
             if args.sweep else {})
    plans = {"element": plan_of(module, batch, False), "row": plan_of(module, batch, True)}
    times: dict[str, list[float]] = {side: [] for side in plans}
    for _ in range(args.rounds):
        for side, plan in plans.items():
            times[side].append(bench_ms(lambda plan=plan: launch_plan(module, batch, out, plan)))
    best = min(sweep, key=sweep.get, default=None)
    row = {"case": label, "dtype": str(dtype).removeprefix("torch."), "ids": "skewed" if skew else "uniform",
           "batch": batch_size, "features": len(tables), "plan_element": plan_text(plans["element"]),
           "plan_row": plan_text(plans["row"]), "element_ms": min(times["element"]), "row_ms": min(times["row"]),
           "row_over_element": min(times["row"]) / min(times["element"]), "fastest_one_launch": best,
           "fastest_one_launch_ms": sweep.get(best), "element_rounds_ms": times["element"], "row_rounds_ms": times["row"],
           "sweep_ms": sweep}
    fastest = f"; fastest one launch {best} {sweep[best]:.3f} ms" if sweep else ""
    print(f"{label:<15} {row['dtype']:<8} {row['ids']:<8} element {row['element_ms']:.3f} ms ({row['plan_element']}); "
          f"row {row['row_ms']:.3f} ms ({row['plan_row']}){fastest}", flush=True)
    del module, batch, out
    torch.cuda.empty_cache()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sweep", action="store_true", help="also time every candidate as one launch")
    parser.add_argument("--measured-copy-rate", action="store_true",
                        help="plan at the copy rate measured now (default: the catalog's)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("forward_out_bytes_ab needs a GPU")
    rate = None
    if args.measured_copy_rate:
        os.environ["POLYREC_CACHE_DIR"] = tempfile.mkdtemp(prefix="polyrec-cache-")
        rate = copy_rate()
        save_calibration(tbe_select.selection_spec(torch.device("cuda")).name, {"copy_bandwidth": rate})
        print(f"planning at the measured copy rate {rate / 1e12:.3f} TB/s", flush=True)
    rows = [run_case(label, tables, batch_size, dtype, skew, args)
            for label, tables, batch_size in CASES for dtype in (torch.float32, torch.float16) for skew in (False, True)]
    table = [{k: v for k, v in r.items() if not k.endswith(("rounds_ms", "sweep_ms"))} for r in rows]
    write_results("forward_out_bytes_ab", {"rows": rows}, rows=table, summary={"rounds": args.rounds, "planning_copy_rate": rate or "catalog"})


if __name__ == "__main__":
    main()
