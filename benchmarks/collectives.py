"""Measured all-to-all and all-reduce on the GPUs of one host against the planner's alpha-beta
predictions (polyrec.planner.comms), at the message sizes a DLRM step sends.

    torchrun --nproc-per-node 2 benchmarks/collectives.py            # NCCL (RCCL on ROCm)
    torchrun --nproc-per-node 2 benchmarks/collectives.py --quick
    torchrun --nproc-per-node 2 benchmarks/collectives.py --sweep    # also every size 64 KiB..256 MiB

Sizes: the pooled-embedding all-to-all of MLPerf DLRM-DCNv2 (per rank: local batch x 26 features x
128 dims, bf16) at local batches 4K-64K, and all-reduces from 1 MB to the dense model's gradient
(about 25M fp32 parameters, ~100 MB). Rank 0 writes ``collectives_<gpu>_<date>.json``. Keep the
NVLink-multicast-off variables of the device machines set (NCCL_NVLS_ENABLE=0).

Calibration first: where the device kind has no stored link calibration, the script measures an
all-to-all and an all-reduce at sizes it does not check (CALIBRATION_SIZES), fits the link's
per-call overhead, per-step latency and bandwidth (``polyrec.planner.comms.fit_link``), measures each
at small sizes it does not check either (SMALL_SIZES) for its flat small-message floor and where that
ends (``fit_small_messages``), and stores it all; the predictions compared below then come from that
calibration, never from the checked sizes.
``--sweep`` adds both collectives at every power of two and its 1.5x from 64 KiB to 256 MiB (section
"sweep", predicted beside measured): where the time is not affine in size (NCCL switches protocols).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics

import torch
import torch.distributed as dist

from polyrec.hardware.detect import detect
from polyrec.models.config import preset
from polyrec.hardware.calibrate import load_calibration, save_calibration, timed_ms
from polyrec.planner.comms import (CollectiveSample, all_reduce_seconds, all_to_all_seconds, fit_link,
                                   fit_small_messages, fleet_links, link_calibration_name)
from polyrec.planner.types import parse_fleet
from polyrec.results import write_results
from polyrec.runtime.dist import init_distributed, shutdown

BF16 = 2
#: Calibration message sizes, bytes: none is among the checked sizes (all-to-all 26 / 104 / 416 MiB per
#: rank, all-reduce 1 / 16 / 61 MiB), spread over their range, since the fit weighs each by its time.
CALIBRATION_SIZES = {"all_to_all": (8 << 20, 64 << 20, 256 << 20),
                     "all_reduce": (2 << 20, 8 << 20, 32 << 20, 128 << 20)}
#: Small-message calibration sizes, bytes, both collectives: 96 KiB x 2^k up to 12 MiB (1.5x a power of
#: two, so none is a checked size), reaching past where NCCL left its low-latency protocol on 2 H200s
#: (all-reduce at 2 MiB, all-to-all at 4-6 MiB; the sweep of collectives_nvidia-h200_2026-11-30).
SMALL_SIZES = tuple((96 << 10) << k for k in range(8))
#: Rounds over every calibration size, each size's time the median of its rounds: one pass measured
#: a 2 MiB all-reduce at 94 us and an 8 MiB all-to-all at 96 us where the sweep of the same run, a
#: minute later, took 70 and 74 us (the x2 machine at 7686f78), and the fit carried that into every
#: prediction (+27% and +31% at the checked 27 MB all-to-all and 17 MB all-reduce).
CALIBRATION_ROUNDS = 3


def dense_parameter_count() -> int:
    """fp32 values in the gradient all-reduce of the MLPerf model's dense half."""
    from polyrec.models.dlrm import DLRM

    config = preset("mlperf-dcnv2").with_capped_rows(1)
    return sum(p.numel() for p in DLRM(config).dense_parameters())


def last_rank_median_ms(fn, reps: int) -> float:
    """Median over ``reps`` calls of ``fn``, each timed after a barrier, of the call's time on the rank
    that reached it last (the least over ranks): the others' times also hold how long they waited
    for it. Ranks leave a barrier microseconds apart; with the slowest rank's median instead, calls
    of 64 KiB-2 MiB measured 35-50 us at random within one run (the x2 machine at d674dfc)."""
    times = torch.tensor(timed_ms(fn, warmup=5, reps=reps, before=dist.barrier), device="cuda")
    dist.all_reduce(times, op=dist.ReduceOp.MIN)
    return float(times.median())


def _collective(kind: str, nbytes: int):
    """A callable running one ``kind`` collective of ``nbytes`` (per rank / buffer) on fresh random data."""
    if kind == "all_to_all":
        send = torch.randn(nbytes // BF16, device="cuda", dtype=torch.bfloat16)
        recv = torch.empty_like(send)
        return lambda: dist.all_to_all_single(recv, send)
    buf = torch.randn(nbytes // 4, device="cuda")
    return lambda: dist.all_reduce(buf)


#: ``--sweep`` sizes, bytes: 64 KiB x 2^k and 1.5x that, up to 256 MiB.
SWEEP_SIZES = tuple(sorted({(64 << 10) << k for k in range(13)} | {3 * ((64 << 10) << k) // 2 for k in range(12)}))


def _row(kind: str, nbytes: int, links, reps: int, section: str) -> dict:
    ms = last_rank_median_ms(_collective(kind, nbytes), reps)
    seconds = all_to_all_seconds if kind == "all_to_all" else all_reduce_seconds
    pred = seconds(nbytes, links) * 1e3
    return {"section": section, "collective": kind, "bytes_per_rank": nbytes, "measured_ms": ms,
            "predicted_ms": pred, "error": pred / ms - 1}


def ensure_link_calibration(device: str, link: str, world: int, reps: int, is_main: bool) -> str:
    """Measure and store the link calibration of ``device`` unless stored; says which. ``reps`` 0: skip."""
    name = link_calibration_name(device, link)
    if load_calibration(name) is not None:
        return "stored link calibration"
    if reps == 0:
        return "not calibrated (--quick): datasheet x efficiency"
    def timed(sizes: dict[str, tuple[int, ...]]) -> list[CollectiveSample]:
        runs = {(kind, n): _collective(kind, n) for kind, kind_sizes in sizes.items() for n in kind_sizes}
        rounds = [{key: last_rank_median_ms(fn, reps) for key, fn in runs.items()} for _ in range(CALIBRATION_ROUNDS)]
        return [CollectiveSample(collective=kind, nbytes=n, seconds=statistics.median(r[kind, n] for r in rounds) / 1e3)
                for kind, n in runs]

    samples = timed(CALIBRATION_SIZES)
    small_samples = timed({kind: SMALL_SIZES for kind in CALIBRATION_SIZES})
    fitted = fit_link(samples, world)
    small = {kind: fit_small_messages(small_samples, kind) for kind in CALIBRATION_SIZES}
    sizes = "; ".join(f"{k} {', '.join(f'{n >> 20} MiB' for n in v)}" for k, v in CALIBRATION_SIZES.items())
    fitted |= {"date": dt.date.today().isoformat(),
               "method": f"{sizes}; small messages {SMALL_SIZES[0] >> 10} KiB-{SMALL_SIZES[-1] >> 20} MiB; on {world} GPUs",
               "small": {kind: entry for kind, entry in small.items() if entry is not None},
               "samples": [{"collective": s.collective, "bytes": s.nbytes, "seconds": s.seconds}
                           for s in samples + small_samples]}
    if is_main:
        save_calibration(name, fitted)
    dist.barrier()
    return "link calibrated in this run"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sweep", action="store_true", help="also time both collectives at every size of SWEEP_SIZES")
    args = parser.parse_args()
    ctx = init_distributed()
    if ctx.backend != "nccl":
        raise SystemExit("collectives.py needs GPUs (NCCL/RCCL)")
    world = ctx.world_size
    spec = detect(ctx.local_rank).spec
    reps = 5 if args.quick else 30
    link_name = fleet_links(parse_fleet(f"{spec.name}x{world}")).intra.name
    calibration = ensure_link_calibration(spec.name, link_name, world, 0 if args.quick else reps, ctx.is_main)
    links = fleet_links(parse_fleet(f"{spec.name}x{world}"))
    model = preset("mlperf-dcnv2")
    features, dim = model.num_tables, model.embedding_dim
    rows = []
    batches = (4096,) if args.quick else (4096, 16384, 65536)
    for batch in batches:
        per_rank = batch * features * dim * BF16  # bytes each rank holds before the exchange
        rows.append(_row("all_to_all", per_rank, links, reps, "check"))
    sizes = (1 << 20,) if args.quick else (1 << 20, 16 << 20, dense_parameter_count() * 4)
    rows += [_row("all_reduce", nbytes, links, reps, "check") for nbytes in sizes]
    if args.sweep:
        rows += [_row(kind, n, links, reps, "sweep") for kind in ("all_to_all", "all_reduce") for n in SWEEP_SIZES]
    if ctx.is_main:
        summary = {"world_size": world, "device": spec.name, "link": links.intra.name,
                   "link_bandwidth_assumed": links.intra.bandwidth, "link_overhead_s": links.intra.overhead_s,
                   "link_alpha_s": links.intra.alpha_s, "link_origin": links.intra.origin, "calibration": calibration,
                   **{f"{kind}_small": None if small is None else {"floor_s": small.floor_s, "up_to_bytes": small.up_to_bytes}
                      for kind, small in (("all_to_all", links.intra.all_to_all_small),
                                          ("all_reduce", links.intra.all_reduce_small))},
                   "nccl_nvls_enable": os.environ.get("NCCL_NVLS_ENABLE")}
        write_results("collectives" + ("_quick" if args.quick else ""), {}, rows=rows, summary=summary)
        for r in rows:
            print(f"{r['section']:<6} {r['collective']:<11} {r['bytes_per_rank'] / 1e6:9.1f} MB  measured {r['measured_ms']:8.3f} ms  "
                  f"predicted {r['predicted_ms']:8.3f} ms  error {r['error']:+.0%}")
    shutdown(completed=True)


if __name__ == "__main__":
    main()
