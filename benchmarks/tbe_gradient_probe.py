"""What the lane update's output-gradient gathers cost on the MLPerf step: the same backward run with
its sorted gradient offsets as computed, with every offset pointing at one slice (no gradient DRAM
traffic: the upper bound of any change that reads each bag's gradient once), with only the offsets
of *single* positions (a key that occurs once in the batch) pointing there, and with every bag folded
onto the first half (quarter) of the batch: the same random gathers over half (a quarter) of the
gradient, so a feature's block is 16.8 (8.4) MB in fp32, which says whether the re-reads miss for
L2 capacity (a change that takes bags by halves would gain what the folded run gains). A leave-one-stage-out
measurement (no hardware counters needed): interleaved rounds, the lane update's time from the profiler.

    PYTHONPATH=. python3 benchmarks/tbe_gradient_probe.py [--quick] [--rounds 3]

Writes ``tbe_gradient_probe_<gpu>_<date>.json``. The weights are updated by every launch (the values
do not matter for the time; this is not a correctness run).
"""

from __future__ import annotations

import argparse
import statistics

import torch

from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec
from polyrec.results import write_results
from profiling import kernel_table
from tbe import DIM, MLPERF_HOTS, MLPERF_ROWS, make_batch

LANE = "lane_update_kernel"


def single_positions(keys: torch.Tensor) -> torch.Tensor:
    """[n] bool: sorted positions whose key differs from both neighbours (the key occurs once)."""
    differs = keys[1:] != keys[:-1]
    edge = torch.ones(1, dtype=torch.bool, device=keys.device)
    return torch.cat([edge, differs]) & torch.cat([differs, edge])


def folded(g_off: torch.Tensor, stride: int, bags: int) -> torch.Tensor:
    """Offsets of bag b moved to bag b mod ``bags`` (same feature column)."""
    return torch.remainder(g_off // stride, bags) * stride + torch.remainder(g_off, stride)


def variant_offsets(g_off: torch.Tensor, single: torch.Tensor, stride: int, batch_size: int) -> dict[str, torch.Tensor]:
    return {"as computed": g_off, "singles read one slice": torch.where(single, 0, g_off),
            "all read one slice": torch.zeros_like(g_off),
            "bags folded to half": folded(g_off, stride, batch_size // 2),
            "bags folded to quarter": folded(g_off, stride, batch_size // 4)}


def probe_shape(quick: bool) -> tuple[list[int], int]:
    """Rows per table and batch size: the MLPerf tables at 65536, or (``quick``) capped at 100k rows at 2048."""
    return ([min(r, 100_000) for r in MLPERF_ROWS], 2048) if quick else (MLPERF_ROWS, 65536)


def mlperf_backward(grad_dtype: torch.dtype, rows_per_table: list[int], batch_size: int):
    """A module of the MLPerf tables with ``rows_per_table`` (row-wise Adagrad), one batch of uniform ids, an
    output gradient of ``grad_dtype``, and the batch's sort prepared (``module._prepared``)."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    tables = [TableSpec(name=f"t{i}", rows=r, dim=DIM) for i, r in enumerate(rows_per_table)]
    module = TableBatchedEmbedding(tables, optimizer=EmbeddingOptimizer(kind="rowwise_adagrad", lr=0.01),
                                   output_dtype=grad_dtype, device="cuda")
    batch = make_batch(rows_per_table, MLPERF_HOTS, batch_size, False, gen)
    grad = torch.randn(batch_size, DIM * len(tables), device="cuda", generator=gen).to(grad_dtype)
    module.prepare_backward(batch)
    return module, batch, grad


def backward_kernels(module: TableBatchedEmbedding, batch, grad: torch.Tensor, **prepared: torch.Tensor) -> list[dict]:
    """``kernel_table`` of the fused backward, each step's prepared sort with its fields ``prepared`` (keys,
    g_off) replaced."""
    def step():
        module.prepare_backward(batch)
        for name, value in prepared.items():
            setattr(module._prepared, name, value)
        module._fused_backward(grad, batch.values, batch.offsets, None, batch.batch_size, None)
    return kernel_table(step, reps=5)


def lane_ms(module: TableBatchedEmbedding, batch, grad: torch.Tensor, g_off: torch.Tensor) -> float:
    rows = backward_kernels(module, batch, grad, g_off=g_off)
    return next(r["ms_per_step"] for r in rows if r["kernel"].startswith(LANE))


def probe(grad_dtype: torch.dtype, rows_per_table: list[int], batch_size: int, rounds: int) -> list[dict]:
    module, batch, grad = mlperf_backward(grad_dtype, rows_per_table, batch_size)
    ids = module._prepared
    single = single_positions(ids.keys)
    variants = variant_offsets(ids.g_off, single, grad.stride(0), batch_size)
    times = {name: [] for name in variants}
    for _ in range(rounds):
        for name, g_off in variants.items():
            times[name].append(lane_ms(module, batch, grad, g_off))
    base = statistics.median(times["as computed"])
    out = [{"grad_dtype": str(grad_dtype).removeprefix("torch."), "variant": name, "lane_ms": statistics.median(t),
            "rounds_ms": t, "vs_as_computed": statistics.median(t) / base, "nnz": batch.nnz,
            "single_positions": int(single.sum())} for name, t in times.items()]
    del module, grad, batch, ids
    torch.cuda.empty_cache()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rows, batch_size = probe_shape(args.quick)
    results = [r for dt in (torch.float32, torch.bfloat16) for r in probe(dt, rows, batch_size, args.rounds)]
    write_results("tbe_gradient_probe", {"rows": rows, "batch_size": batch_size, "results": results}, rows=results)
    print(f"{'grad':>9} {'variant':>24} {'lane ms':>8} {'ratio':>6}")
    for r in results:
        print(f"{r['grad_dtype']:>9} {r['variant']:>24} {r['lane_ms']:8.3f} {r['vs_as_computed']:6.3f}")
    print(f"single positions: {results[0]['single_positions']} of {results[0]['nnz']}")


if __name__ == "__main__":
    main()
