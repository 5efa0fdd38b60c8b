"""Pooled-output placement of sharded embeddings: polyrec's place/gather kernels vs the torch ops they
replace (``index_copy_`` per source rank forward; ``index_select`` per rank, then ``* (1 / world)``
backward), on one GPU.

MLPerf DLRM-DCNv2 at 2 ranks, batch 65536 per rank, bf16 pooled output [65536, 3328] (26 features x
128): "table-wise" is ``default_shardings`` with MLPerf's lookups per table (each rank's 128-wide
features interleaved in the output: a copy layout), "row-wise" splits every table over both ranks
(both ranks' partial sums added on every column: an add layout). Each case is checked first on fresh
random inputs (forward and backward equal to the torch ops bit for bit, the add layout also within
half a bf16 ulp of float64), then timed with ``triton.testing.do_bench`` (median, L2 flushed between
runs) side by side with a device copy of the output (the copy rate the bytes are held against).

    PYTHONPATH=. python3 benchmarks/place_columns.py            # ~15-25 s on an H200 (mostly compiles)
    PYTHONPATH=. python3 benchmarks/place_columns.py --quick    # smoke test, batch 4096, < 15 s

Bytes (written before measuring): place reads the ranks' blocks and writes the output, gather reads
the output gradient's columns once per source and writes the blocks. Table-wise both move
2 x 65536 x 3328 x 2 B = 872 MB: 0.21 ms at DESIGN.md's 4.25 TB/s, per direction. The torch backward
moves twice that (index_select, then the scaling pass). Prediction: the kernels at ~0.8-0.9 of the
copy rate (~0.25 ms each way) against index_copy 0.64 ms and index_select + scale ~1.2 ms in
multi_gpu_world2_profile_nvidia-h200_2026-11-30.
"""

from __future__ import annotations

import argparse

import torch
import triton

from polyrec.kernels.place_columns import column_layout, gather, place, select_config
from polyrec.models.config import preset
from polyrec.results import write_results
from polyrec.runtime.distributed_embeddings import default_shardings
from polyrec.runtime.shards import TableSharding, make_shards, shard_features

WORLD = 2
#: The DESIGN.md copy rate on the H200 (2026-11-29), quoted beside the one measured here.
DESIGN_COPY_TBPS = 4.25


def mlperf_columns(kind: str) -> tuple[list[int], list[list[int]], int, bool]:
    """(dims, cols, out_dim, add) of the MLPerf pooled output at WORLD ranks, as ShardedEmbedding
    builds them: rank r's block holds its pieces in (feature, shard) order."""
    cfg = preset("mlperf-dcnv2")
    tables = len(cfg.table_rows)
    if kind == "table-wise":
        plans = default_shardings(cfg.table_rows, cfg.embedding_dim, WORLD, lookups=cfg.multi_hot)
    else:
        plans = [TableSharding(kind="row", ranks=tuple(range(WORLD)))] * tables
    dims = [cfg.embedding_dim] * tables
    pieces = shard_features(make_shards(cfg.table_rows, dims, plans, WORLD), list(range(tables)), dims)
    cols = [[c for p in rank_pieces for c in range(*p.out_cols)] for rank_pieces in pieces]
    kinds = {p.kind for p in plans}
    if kind == "table-wise" and kinds != {"table"}:
        raise SystemExit(f"place_columns: default_shardings chose {kinds} for MLPerf at {WORLD} ranks, not table-wise")
    return [len(c) for c in cols], cols, sum(dims), kind == "row-wise"


def torch_place(flat: torch.Tensor, b: int, dims: list[int], cols: list[torch.Tensor], out_dim: int,
                add: bool) -> torch.Tensor:
    """The placement this kernel replaced (pooled_exchange.PlaceColumns.forward before it)."""
    out = flat.new_zeros(b, out_dim) if add else flat.new_empty(b, out_dim)
    for block, rank_cols, d in zip(flat.split([b * d for d in dims]), cols, dims):
        (out.index_add_ if add else out.index_copy_)(1, rank_cols, block.view(b, d))
    return out


def torch_gather(grad: torch.Tensor, b: int, dims: list[int], cols: list[torch.Tensor], scale: float) -> torch.Tensor:
    """The backward it replaced: index_select per rank, then _AllToAllRows' ``(grad * scale).contiguous()``."""
    flat = grad.new_empty(b * sum(dims))
    for part, rank_cols, d in zip(flat.split([b * d for d in dims]), cols, dims):
        torch.index_select(grad, 1, rank_cols, out=part.view(b, d))
    return (flat * scale).contiguous()


def fresh(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, device="cuda").bfloat16()


def check(kind: str, batch: int) -> dict:
    """Forward and backward against the torch ops (and the add layout against float64); raises on a mismatch."""
    dims, cols, out_dim, add = mlperf_columns(kind)
    layout = column_layout(dims, cols, out_dim, add, torch.device("cuda"))
    cols_t = [torch.tensor(c, device="cuda") for c in cols]
    flat, grad = fresh(batch * sum(dims)), fresh(batch, out_dim)
    placed = place(flat, batch, layout)
    old = torch_place(flat, batch, dims, cols_t, out_dim, add)
    result = {"case": kind, "place_equal_torch": torch.equal(placed, old)}
    if add:
        ref = torch_place(flat.double(), batch, dims, cols_t, out_dim, True)
        err = ((placed.double() - ref).abs() / ref.abs().clamp_min(1e-30)).max().item()
        if not err <= torch.finfo(torch.bfloat16).eps / 2:
            raise SystemExit(f"place_columns: {kind} sums off float64 by {err:.3g} relative")
        result["place_max_rel_error"] = err
    elif not result["place_equal_torch"]:
        raise SystemExit(f"place_columns: {kind} placement differs from index_copy_")
    if not torch.equal(gather(grad, batch, layout, 1 / WORLD), torch_gather(grad, batch, dims, cols_t, 1 / WORLD)):
        raise SystemExit(f"place_columns: {kind} gather differs from index_select * scale")
    return result


def bench_ms(fn, rep: int) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=rep, return_mode="median")


def measure(kind: str, batch: int, rep: int) -> dict:
    dims, cols, out_dim, add = mlperf_columns(kind)
    layout = column_layout(dims, cols, out_dim, add, torch.device("cuda"))
    cols_t = [torch.tensor(c, device="cuda") for c in cols]
    flat, grad = fresh(batch * sum(dims)), fresh(batch, out_dim)
    copy_src, copy_dst = fresh(batch, out_dim), torch.empty(batch, out_dim, device="cuda", dtype=torch.bfloat16)
    element = flat.element_size()
    warp = getattr(torch.cuda.get_device_properties(flat.device), "warp_size", 32)
    place_bytes = batch * (sum(dims) + out_dim) * element  # blocks read, output written
    gather_bytes = 2 * batch * sum(dims) * element  # output columns read once per source, blocks written
    copy_ms = bench_ms(lambda: copy_dst.copy_(copy_src), rep)
    copy_tbps = 2 * batch * out_dim * element / copy_ms / 1e9
    row = {"case": kind, "add": add, "dims": "+".join(map(str, dims)),
           "place_config": select_config(layout.place_block_n, layout.align, element, warp).label,
           "copy_ms": copy_ms, "copy_tbps": copy_tbps,
           "place_ms": bench_ms(lambda: place(flat, batch, layout), rep),
           "torch_place_ms": bench_ms(lambda: torch_place(flat, batch, dims, cols_t, out_dim, add), rep),
           "gather_ms": bench_ms(lambda: gather(grad, batch, layout, 1 / WORLD), rep),
           "torch_gather_ms": bench_ms(lambda: torch_gather(grad, batch, dims, cols_t, 1 / WORLD), rep)}
    row |= {"place_floor_ms": place_bytes / copy_tbps / 1e9, "gather_floor_ms": gather_bytes / copy_tbps / 1e9,
            "place_of_copy": place_bytes / row["place_ms"] / 1e9 / copy_tbps,
            "gather_of_copy": gather_bytes / row["gather_ms"] / 1e9 / copy_tbps,
            "place_speedup": row["torch_place_ms"] / row["place_ms"],
            "gather_speedup": row["torch_gather_ms"] / row["gather_ms"]}
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="batch 4096, short timings: a smoke test")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("place_columns: needs a CUDA or ROCm GPU")
    batch, rep = (4096, 20) if args.quick else (65536, 200)
    cases = ("table-wise", "row-wise")
    checks = [check(kind, batch) for kind in cases]
    rows = [measure(kind, batch, rep) for kind in cases]
    table = rows[0]
    summary = {"batch": batch, "world": WORLD, "dtype": "bf16", "out_dim": 3328,
               "table_wise_place_ms": table["place_ms"], "table_wise_torch_place_ms": table["torch_place_ms"],
               "table_wise_gather_ms": table["gather_ms"], "table_wise_torch_gather_ms": table["torch_gather_ms"],
               "table_wise_place_of_copy": table["place_of_copy"], "table_wise_gather_of_copy": table["gather_of_copy"],
               "copy_tbps": table["copy_tbps"], "design_copy_tbps": DESIGN_COPY_TBPS}
    name = "place_columns_quick" if args.quick else "place_columns"
    json_path, _ = write_results(name, {"cases": rows, "checks": checks}, rows=rows, summary=summary)
    print(f"pooled-output placement, MLPerf at {WORLD} ranks, batch {batch}, bf16 [B, 3328]; checks: {checks}")
    print(f"{'case':10s} {'config':>16s} {'copy TB/s':>9s} {'place':>7s} {'floor':>7s} {'%copy':>6s} {'torch':>7s} "
          f"{'gather':>7s} {'floor':>7s} {'%copy':>6s} {'torch':>7s}")
    for r in rows:
        print(f"{r['case']:10s} {r['place_config']:>16s} {r['copy_tbps']:9.2f} {r['place_ms']:7.4f} "
              f"{r['place_floor_ms']:7.4f} {100 * r['place_of_copy']:5.0f}% {r['torch_place_ms']:7.4f} "
              f"{r['gather_ms']:7.4f} {r['gather_floor_ms']:7.4f} {100 * r['gather_of_copy']:5.0f}% "
              f"{r['torch_gather_ms']:7.4f}")
    print(f"table-wise: place {table['place_speedup']:.2f}x, gather {table['gather_speedup']:.2f}x the torch ops "
          f"-> {json_path}")


if __name__ == "__main__":
    main()
