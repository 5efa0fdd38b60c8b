"""Would the lane update read its gradient slices from L2 if it took each table's bags block by block?

In sorted row order a table's ids read their bags' gradient slices at random over the whole batch: the
100-hot MLPerf feature reads its 33.5 MB fp32 block 100 times, more than an L2 partition holds
(``tbe_gradient_probe.py``: folding every bag onto a quarter of the batch saved 0.58 ms of 4.09). This
probe keeps every gather and every sum exact and only reorders the sorted positions: within each table,
the rows whose ids all come from one block of ``B / blocks`` bags go first, block after block (each in
row order), then the rows whose ids span blocks, in row order. Each row's positions stay one contiguous
run, so the update and the merge do the same work; only the order of the runs (and so which gradient
slices are in flight together) changes. The reorder is made here with torch ops (its time is reported,
an upper bound of what a kernel would take); the lane update and merge levels are timed by the profiler,
interleaved with the positions as sorted.

    PYTHONPATH=.:benchmarks python3 benchmarks/bag_blocks_probe.py [--quick] [--rounds 3] [--blocks 2,4,8]

Writes ``bag_blocks_probe_<gpu>_<date>.json``. The weights are updated by every launch (the values do not
matter for the time; the reordered runs' sums are checked against the sorted ones' on the host instead).
"""

from __future__ import annotations

import argparse
import statistics

import torch

from polyrec.kernels.tbe import TableBatchedEmbedding
from polyrec.results import write_results
from tbe import DIM, MLPERF_HOTS
from tbe_gradient_probe import backward_kernels, mlperf_backward, probe_shape

TIMED = ("lane_update_kernel", "merge_level_kernel")


def run_starts(keys: torch.Tensor) -> torch.Tensor:
    """[n] bool: the positions of sorted ``keys`` where a run of equal keys starts."""
    start = torch.ones_like(keys, dtype=torch.bool)
    start[1:] = keys[1:] != keys[:-1]
    return start


def block_order(keys: torch.Tensor, g_off: torch.Tensor, valid: int, stride: int, batch_size: int,
                blocks: int, dim: int = DIM, blocked: torch.Tensor | None = None) -> torch.Tensor:
    """Permutation of the sorted positions [:valid]: per table (the gradient column's feature, ``dim``
    columns each), the runs whose bags lie in one block of ``batch_size / blocks`` first, by block, then
    the runs that span blocks; the order inside each class is the sorted one (a stable sort).
    ``blocked``: [features] bool, the features reordered so (default all); the others keep the sorted order."""
    k, off = keys[:valid].long(), g_off[:valid].long()
    bag, feature = off // stride, (off % stride) // dim
    block = bag * blocks // batch_size
    run = torch.cumsum(run_starts(k), 0) - 1
    runs = int(run[-1]) + 1
    lo = torch.full((runs,), blocks, dtype=torch.long, device=k.device).scatter_reduce(0, run, block, "amin")
    hi = torch.full((runs,), -1, dtype=torch.long, device=k.device).scatter_reduce(0, run, block, "amax")
    tag = torch.where(lo[run] == hi[run], block, blocks)
    if blocked is not None:
        tag = torch.where(blocked[feature], tag, 0)
    return torch.sort(feature * (blocks + 1) + tag, stable=True).indices


def in_order(keys: torch.Tensor, g_off: torch.Tensor, valid: int,
             perm: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Copies of the sorted keys and gradient offsets with positions [:valid] taken in ``perm``'s order (the
    padding after them kept)."""
    new_keys, new_off = keys.clone(), g_off.clone()
    new_keys[:valid], new_off[:valid] = keys[:valid][perm], g_off[:valid][perm]
    return new_keys, new_off


def reordered(keys: torch.Tensor, g_off: torch.Tensor, valid: int, stride: int, batch_size: int,
              blocks: int, blocked: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, float]:
    """The sorted keys and gradient offsets in ``block_order`` (padding kept last), and the reorder's ms."""
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    perm = block_order(keys, g_off, valid, stride, batch_size, blocks, blocked=blocked)
    new_keys, new_off = in_order(keys, g_off, valid, perm)
    end.record()
    torch.cuda.synchronize()
    return new_keys, new_off, begin.elapsed_time(end)


def runs_kept_whole(keys: torch.Tensor, valid: int) -> bool:
    """Every key's positions are one contiguous run (no key starts twice)."""
    k = keys[:valid].long()
    return int(run_starts(k).sum()) == int(torch.unique(k).numel())


def timed_ms(module: TableBatchedEmbedding, batch, grad: torch.Tensor, keys: torch.Tensor,
             g_off: torch.Tensor) -> dict[str, float]:
    rows = backward_kernels(module, batch, grad, keys=keys, g_off=g_off)
    return {name: sum(r["ms_per_step"] for r in rows if r["kernel"].startswith(name)) for name in TIMED}


def probe(grad_dtype: torch.dtype, rows_per_table: list[int], batch_size: int, rounds: int,
          block_counts: list[int], min_hots: list[int]) -> list[dict]:
    module, batch, grad = mlperf_backward(grad_dtype, rows_per_table, batch_size)
    ids = module._prepared
    variants = {"as sorted": (ids.keys, ids.g_off, 0.0)}
    hots = torch.tensor(MLPERF_HOTS, device="cuda")
    for b in block_counts:
        for h in min_hots:
            variants[f"{b} blocks, hots >= {h}"] = reordered(ids.keys, ids.g_off, batch.nnz, grad.stride(0),
                                                             batch_size, b, hots >= h)
    for name, (keys, _, _) in variants.items():
        if not runs_kept_whole(keys, batch.nnz):
            raise RuntimeError(f"{name}: a key's positions are no longer one run")
    times = {name: [] for name in variants}
    for _ in range(rounds):
        for name, (keys, g_off, _) in variants.items():
            times[name].append(timed_ms(module, batch, grad, keys, g_off))
    base = statistics.median(sum(t.values()) for t in times["as sorted"])
    out = []
    for name, t in times.items():
        total = statistics.median(sum(r.values()) for r in t)
        out.append({"grad_dtype": str(grad_dtype).removeprefix("torch."), "variant": name,
                    "lane_ms": statistics.median(r[TIMED[0]] for r in t),
                    "merge_ms": statistics.median(r[TIMED[1]] for r in t), "lane_merge_ms": total,
                    "vs_sorted": total / base, "reorder_ms_torch": variants[name][2], "rounds": t,
                    "nnz": batch.nnz})
    del module, grad, batch, ids, variants
    torch.cuda.empty_cache()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--blocks", default="2,4,8", help="bag blocks per table, comma-separated")
    parser.add_argument("--min-hots", default="1", help="reorder only features of at least this many ids per "
                        "bag, comma-separated (one variant each)")
    parser.add_argument("--grad", default="fp32,bf16", help="output gradient dtypes, comma-separated")
    args = parser.parse_args()
    rows, batch_size = probe_shape(args.quick)
    counts, min_hots = [int(b) for b in args.blocks.split(",")], [int(h) for h in args.min_hots.split(",")]
    dtypes = [{"fp32": torch.float32, "bf16": torch.bfloat16}[g] for g in args.grad.split(",")]
    results = [r for dt in dtypes for r in probe(dt, rows, batch_size, args.rounds, counts, min_hots)]
    table = [{k: v for k, v in r.items() if k != "rounds"} for r in results]
    write_results("bag_blocks_probe", {"rows": rows, "batch_size": batch_size, "results": results}, rows=table)
    print(f"{'grad':>9} {'variant':>22} {'lane ms':>8} {'merge ms':>8} {'ratio':>6} {'reorder ms':>10}")
    for r in results:
        print(f"{r['grad_dtype']:>9} {r['variant']:>22} {r['lane_ms']:8.3f} {r['merge_ms']:8.3f} "
              f"{r['vs_sorted']:6.3f} {r['reorder_ms_torch']:10.3f}")


if __name__ == "__main__":
    main()
