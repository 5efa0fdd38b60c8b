"""The pooled rows' exchange two ways on the GPUs of one host, alone and beside weight-gradient GEMMs:
NCCL's ``all_to_all_single`` against ``polyrec.runtime.peer_exchange`` (copy engines).

    torchrun --nproc-per-node 2 benchmarks/peer_exchange.py     # writes peer_exchange_<gpu>_<date>.json

Per rank: ``world x B x COLUMNS`` bf16 values sent (B = ``--batch``, COLUMNS the MLPerf DLRM-DCNv2
pooled width, 26 x 128, split over the ranks), and ``GEMMS`` GEMMs of the cross network's
weight-gradient shape (``[3456 x B] x [B x 512]``) queued beside each exchange. Each time is
``collectives.last_rank_median_ms`` over ``REPS`` calls: the median of each call's time on the rank
that reached it last. The copy-engine exchange is checked first: every rank's received
blocks equal what NCCL delivers.
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist

from collectives import last_rank_median_ms
from polyrec.results import write_results
from polyrec.runtime.dist import init_distributed, shutdown
from polyrec.runtime.peer_exchange import copy_engine_exchange

#: MLPerf DLRM-DCNv2's pooled columns (26 tables x 128) and its cross network's width and rank.
COLUMNS, CROSS_WIDTH, CROSS_RANK = 26 * 128, 3456, 512
GEMMS, REPS = 3, 10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=65536, help="samples per rank")
    args = parser.parse_args()
    ctx = init_distributed()
    world, b = ctx.world_size, args.batch
    peers = copy_engine_exchange(dist.group.WORLD, ctx.device, ctx.timeout_s)
    if peers is None:
        raise SystemExit("peer_exchange.py: these ranks cannot map each other's memory (one host, CUDA, peer access)")
    cols = COLUMNS // world
    gen = torch.Generator(device=ctx.device).manual_seed(ctx.rank)
    src = torch.randn(world * b * cols, device=ctx.device, dtype=torch.bfloat16, generator=gen)
    send = recv = [b * cols] * world
    at_dest, capacity = [ctx.rank * b * cols] * world, world * b * cols
    out = torch.empty_like(src)
    x = torch.randn(b, CROSS_WIDTH, device=ctx.device, dtype=torch.bfloat16, generator=gen)
    y = torch.randn(b, CROSS_RANK, device=ctx.device, dtype=torch.bfloat16, generator=gen)

    def gemms() -> None:
        for _ in range(GEMMS):
            torch.matmul(x.t(), y)

    def nccl(beside: bool) -> None:
        work = dist.all_to_all_single(out, src, recv, send, async_op=True)
        if beside:
            gemms()
        work.wait()

    def copies(beside: bool) -> None:
        work, _ = peers.start(src, send, recv, at_dest=at_dest, capacity=capacity, direction="rows")
        if beside:
            gemms()
        work.wait()

    dist.all_to_all_single(out, src, recv, send)
    work, got = peers.start(src, send, recv, at_dest=at_dest, capacity=capacity, direction="rows")
    work.wait()
    same = torch.tensor([int(torch.equal(got, out))], device=ctx.device)
    dist.all_reduce(same, op=dist.ReduceOp.MIN)
    timings = {"gemms_alone_ms": gemms, "nccl_alone_ms": lambda: nccl(False),
               "nccl_beside_gemms_ms": lambda: nccl(True), "copies_alone_ms": lambda: copies(False),
               "copies_beside_gemms_ms": lambda: copies(True)}
    row = {"world": world, "batch": b, "mb_sent_per_rank": (world - 1) * b * cols * 2 / 1e6,
           "same_blocks_as_nccl": bool(same.item()),
           **{key: last_rank_median_ms(fn, REPS) for key, fn in timings.items()}}
    # what the exchange adds to the GEMMs when the two run together (its exposure or their slowdown)
    row["added_to_gemms_by_nccl_ms"] = row["nccl_beside_gemms_ms"] - row["gemms_alone_ms"]
    row["added_to_gemms_by_copies_ms"] = row["copies_beside_gemms_ms"] - row["gemms_alone_ms"]
    if ctx.is_main:
        write_results("peer_exchange", row, rows=[row], summary=row)
        print(row)
    shutdown(completed=True)
    if not row["same_blocks_as_nccl"]:
        raise SystemExit("the copy-engine exchange delivered other blocks than NCCL's all-to-all")


if __name__ == "__main__":
    main()
