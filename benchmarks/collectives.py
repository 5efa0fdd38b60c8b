"""Measured all-to-all and all-reduce on the GPUs of one host against the planner's alpha-beta
predictions (polyrec.planner.comms), at the message sizes a DLRM step sends.

    torchrun --nproc-per-node 2 benchmarks/collectives.py            # NCCL (RCCL on ROCm)
    torchrun --nproc-per-node 2 benchmarks/collectives.py --quick

Sizes: the pooled-embedding all-to-all of MLPerf DLRM-DCNv2 (per rank: local batch x 26 features x
128 dims, bf16) at local batches 4K-64K, and all-reduces from 1 MB to the dense model's gradient
(about 25M fp32 parameters, ~100 MB). Rank 0 writes ``collectives_<gpu>_<date>.json``. Keep the
NVLink-multicast-off variables of the device machines set (NCCL_NVLS_ENABLE=0).
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist

from polyrec.hardware.detect import detect
from polyrec.models.config import preset
from polyrec.planner.comms import all_reduce_seconds, all_to_all_seconds, fleet_links
from polyrec.planner.types import parse_fleet
from polyrec.results import write_results
from polyrec.runtime.dist import init_distributed, shutdown

BF16 = 2


def dense_parameter_count() -> int:
    """fp32 values in the gradient all-reduce of the MLPerf model's dense half."""
    from polyrec.models.dlrm import DLRM

    config = preset("mlperf-dcnv2").with_capped_rows(1)
    return sum(p.numel() for p in DLRM(config).dense_parameters())


def _median_ms(fn, reps: int) -> float:
    for _ in range(5):
        fn()
    times = []
    for _ in range(reps):
        dist.barrier()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    t = torch.tensor(sorted(times)[len(times) // 2], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank's median
    return float(t)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    ctx = init_distributed()
    if ctx.backend != "nccl":
        raise SystemExit("collectives.py needs GPUs (NCCL/RCCL)")
    world = ctx.world_size
    spec = detect(ctx.local_rank).spec
    links = fleet_links(parse_fleet(f"{spec.name}x{world}"))
    reps = 5 if args.quick else 30
    model = preset("mlperf-dcnv2")
    features, dim = model.num_tables, model.embedding_dim
    rows = []
    batches = (4096,) if args.quick else (4096, 16384, 65536)
    for batch in batches:
        per_rank = batch * features * dim * BF16  # bytes each rank holds before the exchange
        send = torch.randn(per_rank // BF16, device="cuda", dtype=torch.bfloat16)
        recv = torch.empty_like(send)
        ms = _median_ms(lambda: dist.all_to_all_single(recv, send), reps)
        pred = all_to_all_seconds(per_rank, links) * 1e3
        rows.append({"collective": "all_to_all", "bytes_per_rank": per_rank, "measured_ms": ms,
                     "predicted_ms": pred, "error": pred / ms - 1})
    sizes = (1 << 20,) if args.quick else (1 << 20, 16 << 20, dense_parameter_count() * 4)
    for nbytes in sizes:
        buf = torch.randn(nbytes // 4, device="cuda")
        ms = _median_ms(lambda: dist.all_reduce(buf), reps)
        pred = all_reduce_seconds(nbytes, links) * 1e3
        rows.append({"collective": "all_reduce", "bytes_per_rank": nbytes, "measured_ms": ms,
                     "predicted_ms": pred, "error": pred / ms - 1})
    if ctx.is_main:
        summary = {"world_size": world, "device": spec.name, "link": links.intra.name,
                   "link_bandwidth_assumed": links.intra.bandwidth, "link_origin": links.intra.origin,
                   "nccl_nvls_enable": os.environ.get("NCCL_NVLS_ENABLE")}
        write_results("collectives" + ("_quick" if args.quick else ""), {}, rows=rows, summary=summary)
        for r in rows:
            print(f"{r['collective']:<11} {r['bytes_per_rank'] / 1e6:9.1f} MB  measured {r['measured_ms']:8.3f} ms  "
                  f"predicted {r['predicted_ms']:8.3f} ms  error {r['error']:+.0%}")
    shutdown()


if __name__ == "__main__":
    main()
