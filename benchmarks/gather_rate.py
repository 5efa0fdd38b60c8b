"""Random row reads by row size: the device's floor, and the pooled lookup's every config against it.

The TBE cost model prices a pooled lookup's row reads at the copy rate (``perfmodel.tbe_lookup.forward_seconds``),
and it under-prices the lookups of small rows by 23-60% (dims 16-64, ``tbe_model_check_2026-12-01``).
This measures, in one process on one device, for each row size:

- the copy rate (``tbe.copy_rate``, 2 GiB);
- ``gather_sum_kernel``: a minimal Triton kernel that reads uniformly random rows of an 8 GiB table
  (int64 ids, IDS rows per iteration, summed into one row per program: no output traffic), at each
  tile of ``FLOOR_TILES``: the best is the row-read floor this kernel design reaches;
- ``pooled_forward_kernel`` (one ``TableBatchedEmbedding``, a table per feature, 8 GiB in all; ``LOOKUPS``:
  four features of ``HOTS``-id bags, batch 65536) under every config ``tbe_select.forward_candidates``
  offers, and the module's own launches (``forward_plan``).

Rates are useful row bytes per second (ids and output not counted), and ids per second. The summary's
``timer_floor_ms`` is ``bench_ms`` of a one-program launch (``timer_floor_ms``): what any timing here holds beside
the kernel's own work; the ``timer_check`` rows time three lookups both by ``bench_ms`` and by the profiler
(``timer_check_rows``): the same share on the lookup's own launch path, 1.1-2.0 us more than the bare launch on an H100
for the two short ones, 2.5-3.7 us more again for the one that fills the L2 (``bench_ms`` empties the L2 before each
call by writing to it, the profiler does not; ``results/latency_probe_2026-12-07/``).

    PYTHONPATH=.:benchmarks python3 benchmarks/gather_rate.py [--quick | --floor]
    PYTHONPATH=.:benchmarks python3 benchmarks/gather_rate.py --draw SEED [--cases 12]

About 2 minutes on an H200. Writes ``gather_rate_<gpu>_<date>.json``. ``--draw``: no floor; instead
lookups drawn at random (``draw_lookup``: dim, precision, features of their own bag lengths, batch),
cases for checking the forward model on shapes it was not fitted on (``gather_rate_draw<SEED>_*``).
"""

from __future__ import annotations

import argparse
import functools
import random
from collections.abc import Callable
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from tbe import bench_ms, copy_rate, make_batch

from polyrec.kernels import tbe_select
from polyrec.kernels.jagged import JaggedBatch
from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec
from polyrec.results import write_results

#: Bytes of the tables read (beyond the H200's 50 MB L2 by far).
TABLE_BYTES = 8 << 30
#: Row sizes of the floor, bytes.
ROW_BYTES = (16, 32, 64, 128, 256, 512, 1024)
#: Row sizes between powers of two, measured with ROW_BYTES by ``--floor``: rows that start at multiples of their size
#: touch on average (row + unit - gcd(row, unit)) / unit units of the DRAM's fetch unit
#: (``perfmodel.tbe_reads.gather_efficiency``), and 48, 80, 96, 160 and 224 B rows touch more bytes in 64 B units than
#: in 32 B sectors (``perfmodel.tbe_reads.GATHER_GRANULARITY``: 32 on NVIDIA), so their rate tells which the device
#: fetches; the kernel reads each at the next power of two with the lanes past the row masked off, as the pooled lookup
#: reads rows of such dims.
BETWEEN_ROW_BYTES = (48, 80, 96, 160, 192, 224, 320, 384, 640)
#: (ids per iteration x row elements, warps) tiles of the floor kernel.
FLOOR_TILES = ((2048, 4), (4096, 4), (4096, 8), (8192, 8))
FEATURES = 4
HOTS = 16
BATCH = 65536


@dataclass(frozen=True)
class Lookup:
    """One pooled lookup: one table per feature, uniform ids, every bag of feature f ``bags[f]`` long."""

    dim: int
    dtype: torch.dtype
    bags: tuple[int, ...] = (HOTS,) * FEATURES
    batch: int = BATCH


#: The fixed lookups: 4 features of 16-id bags at each row size.
LOOKUPS = tuple(Lookup(dim, dtype) for dim, dtype in (
    (8, torch.float32), (16, torch.float32), (32, torch.float32), (64, torch.float32), (128, torch.float32),
    (256, torch.float32), (16, torch.float16), (32, torch.float16), (64, torch.float16), (128, torch.float16)))
#: What ``draw_lookup`` draws from.
DRAW_DIMS = (8, 12, 24, 40, 48, 64, 96, 128, 160, 256)
DRAW_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
DRAW_BAGS = (1, 2, 3, 5, 8, 12, 20, 30, 64)
DRAW_BATCHES = (8192, 32768, 65536, 131072)


def draw_lookup(rng: random.Random) -> Lookup:
    """A lookup of random dim, precision, batch and 1-8 features of random bag lengths."""
    return Lookup(rng.choice(DRAW_DIMS), rng.choice(DRAW_DTYPES),
                  tuple(rng.choice(DRAW_BAGS) for _ in range(rng.randint(1, 8))), rng.choice(DRAW_BATCHES))
#: Random ids the floor reads per row size: at least this many, or 1 GiB of rows.
MIN_IDS = 8 << 20


@triton.jit
def gather_sum_kernel(table_ptr, ids_ptr, out_ptr, n, ROW: tl.constexpr, BLOCK: tl.constexpr, IDS: tl.constexpr,
                      ITERS: tl.constexpr):
    """out[program] = sum of the table rows (ROW fp32 elements, read as BLOCK >= ROW lanes with those past ROW masked
    off, as the pooled lookup reads a row) of ids ITERS * IDS * program ...+ ITERS * IDS."""
    d = tl.arange(0, BLOCK)
    in_row = d < ROW
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for it in range(ITERS):
        i = (tl.program_id(0) * ITERS + it) * IDS + tl.arange(0, IDS)
        ok = i < n
        idx = tl.load(ids_ptr + i, mask=ok, other=0)
        acc += tl.sum(tl.load(table_ptr + idx[:, None] * ROW + d[None, :], mask=ok[:, None] & in_row[None, :],
                              other=0.0), axis=0)
    tl.store(out_ptr + tl.program_id(0) * ROW + d, acc, mask=in_row)


@triton.jit
def timer_floor_kernel(sink_ptr):
    """One program storing one value: a launch with next to no work of its own."""
    tl.store(sink_ptr + tl.program_id(0), 0.0)


def timer_floor_ms() -> float:
    """``bench_ms`` of ``timer_floor_kernel``: what the timer measures of any launch beside the kernel's work (the
    launch between its events); ``forward_model_fit`` prices a run's lookups with it where the run has no
    ``timer_check`` rows (``run_timer_floor_ms``)."""
    sink = torch.empty(1, device="cuda")
    return bench_ms(lambda: timer_floor_kernel[(1,)](sink))


#: Lookups timed both ways by ``timer_check_rows``: (dim, batch, ids per bag), one fp32 feature of
#: TIMER_CHECK_TABLE_ROWS rows. The first two fill a few MB of L2, the third more than an H100's or H200's whole L2
#: (84 MB of rows and 16 MB of output): ``forward_model_fit.run_timer_sweep_ms``.
TIMER_CHECK_LOOKUPS = ((8, 8192, 2), (48, 8192, 2), (128, 32768, 5))
TIMER_CHECK_TABLE_ROWS = 1 << 20
#: Profiled launches of each (the kernels' mean device time).
TIMER_CHECK_REPS = 50


def timer_check_launch(dim: int, batch_size: int, bag: int, gen: torch.Generator) -> Callable[[], None]:
    """The launches of one TIMER_CHECK_LOOKUPS lookup under the module's own plan (a fresh table and batch)."""
    module = TableBatchedEmbedding([TableSpec(name="t", rows=TIMER_CHECK_TABLE_ROWS, dim=dim)], device="cuda",
                                   optimizer=EmbeddingOptimizer(kind="sgd", lr=0.01))
    batch = make_batch([TIMER_CHECK_TABLE_ROWS], [bag], batch_size, False, gen)
    out = torch.empty(batch_size, module.output_dim, device="cuda")
    return functools.partial(launch_plan, module, batch, out, module.forward_plan(batch))


def timer_check_rows(gen: torch.Generator) -> list[dict]:
    """Each of TIMER_CHECK_LOOKUPS under the module's own plan, timed by ``bench_ms`` (as every lookup here) and by the
    profiler (the kernels' device time alone): what the timer adds to a lookup's launch, beside ``timer_floor_ms``."""
    from profiling import kernel_table

    rows = []
    for dim, batch_size, bag in TIMER_CHECK_LOOKUPS:
        launch = timer_check_launch(dim, batch_size, bag, gen)
        timed = bench_ms(launch)
        kernels = sum(r["ms_per_step"] for r in kernel_table(launch, reps=TIMER_CHECK_REPS, warmup=5))
        rows.append({"kind": "timer_check", "dim": dim, "batch": batch_size, "bags": [bag], "timed_ms": timed,
                     "kernels_ms": kernels, "timer_ms": timed - kernels})
    return rows


def floor_rows(row_bytes_list: tuple[int, ...], gen: torch.Generator) -> list[dict]:
    """Best ``gather_sum_kernel`` time of each row size (a multiple of 4 B) over FLOOR_TILES."""
    table = torch.rand(TABLE_BYTES // 4, device="cuda", generator=gen)
    out = []
    for row_bytes in row_bytes_list:
        row = row_bytes // 4
        block = triton.next_power_of_2(row)
        rows = table.numel() // row
        n = max(MIN_IDS, (1 << 30) // row_bytes)
        ids = torch.randint(0, rows, (n,), device="cuda", generator=gen)
        tiles = {}
        for elems, warps in FLOOR_TILES:
            per_iter = elems // block
            iters = 4
            programs = triton.cdiv(n, per_iter * iters)
            dst = torch.empty(programs, row, device="cuda")
            ms = bench_ms(lambda: gather_sum_kernel[(programs,)](table, ids, dst, n, ROW=row, BLOCK=block,
                                                                  IDS=per_iter, ITERS=iters, num_warps=warps))
            tiles[f"{per_iter}x{block} w{warps}"] = ms
        best = min(tiles, key=tiles.get)
        out.append({"kind": "floor", "row_bytes": row_bytes, "ids": n, "best": best, "ms": tiles[best],
                    "tiles_ms": tiles})
        del ids
    del table
    return out


def config_text(cfg: tbe_select.ForwardConfig) -> str:
    """A forward config as the results files name it: "BAGSxHOTS wWARPS"."""
    return f"{cfg.bags}x{cfg.hots} w{cfg.num_warps}"


def sweep_configs(module: TableBatchedEmbedding, batch: JaggedBatch, out: torch.Tensor,
                  feature_ids: torch.Tensor) -> dict[str, float]:
    """ms of one launch over ``feature_ids`` under each forward candidate, by ``config_text``."""
    return {config_text(cfg): bench_ms(lambda cfg=cfg: module.launch_pooled(batch, out, feature_ids, cfg))
            for cfg in tbe_select.forward_candidates(module.block_d, 32)}


def launch_plan(module: TableBatchedEmbedding, batch: JaggedBatch, out: torch.Tensor, plan: list) -> None:
    """The launches of a forward plan (``TableBatchedEmbedding.forward_plan``)."""
    for launch, ids in plan:
        module.launch_pooled(batch, out, ids, launch.config)


def lookup_rows(lookup: Lookup, gen: torch.Generator) -> dict:
    """The pooled lookup of one case under every forward candidate and the module's own plan."""
    dim, dtype, features = lookup.dim, lookup.dtype, len(lookup.bags)
    row_bytes = dim * dtype.itemsize
    rows = TABLE_BYTES // (features * row_bytes)
    module = TableBatchedEmbedding([TableSpec(name=f"t{i}", rows=rows, dim=dim) for i in range(features)],
                                   optimizer=EmbeddingOptimizer(kind="sgd", lr=0.01), weight_dtype=dtype,
                                   device="cuda", init_scale=0.01)
    batch = make_batch([rows] * features, list(lookup.bags), lookup.batch, False, gen)
    out = torch.empty(lookup.batch, module.output_dim, device="cuda")
    configs = sweep_configs(module, batch, out, torch.arange(features, device="cuda", dtype=torch.int32))
    plan = module.forward_plan(batch)
    chosen = ", ".join(config_text(launch.config) for launch, _ in plan)
    row = {"kind": "lookup", "dim": dim, "dtype": str(dtype).removeprefix("torch."), "row_bytes": row_bytes,
           "bags": list(lookup.bags), "batch": lookup.batch, "table_rows": rows, "ids": batch.nnz, "selected": chosen,
           "selected_ms": bench_ms(lambda: launch_plan(module, batch, out, plan)), "configs_ms": configs}
    best = min(configs, key=configs.get)
    row |= {"best": best, "ms": configs[best]}
    del module
    torch.cuda.empty_cache()
    return row


def rates(row: dict, copy: float) -> dict:
    seconds = row["ms"] * 1e-3
    return row | {"row_tb_s": row["ids"] * row["row_bytes"] / seconds / 1e12,
                  "of_copy": row["ids"] * row["row_bytes"] / seconds / copy, "gids_s": row["ids"] / seconds / 1e9}


def measured_set(args: argparse.Namespace) -> tuple[tuple[int, ...], tuple[Lookup, ...]]:
    """The floor's row sizes and the lookups a run measures: lookups drawn from ``--draw``'s seed alone, two of each
    (``--quick``), the floor alone at every size (``--floor``), or the floor and the fixed lookups."""
    if args.draw is not None:
        rng = random.Random(args.draw)
        return (), tuple(draw_lookup(rng) for _ in range(args.cases))
    if args.quick:
        return ROW_BYTES[1:3], LOOKUPS[1:2] + LOOKUPS[7:8]
    if args.floor:
        return tuple(sorted(ROW_BYTES + BETWEEN_ROW_BYTES)), ()
    return ROW_BYTES, LOOKUPS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    run = parser.add_mutually_exclusive_group()  # each picks a different set to measure (measured_set)
    run.add_argument("--quick", action="store_true", help="two row sizes and two lookups (a smoke run)")
    run.add_argument("--draw", type=int, default=None, metavar="SEED", help="random lookups, no floor")
    run.add_argument("--floor", action="store_true",
                     help="the floor alone, at ROW_BYTES and the sizes between them (BETWEEN_ROW_BYTES)")
    parser.add_argument("--cases", type=int, default=12, help="lookups drawn with --draw")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("gather_rate needs a GPU")
    gen = torch.Generator(device="cuda").manual_seed(0)
    copy, timer_floor = copy_rate(), timer_floor_ms()
    print(f"copy rate {copy / 1e12:.2f} TB/s; timer floor {timer_floor * 1e3:.2f} us", flush=True)
    checks = timer_check_rows(gen)
    for r in checks:
        print(f"timer check D{r['dim']} B={r['batch']} bags {r['bags']}: timed {r['timed_ms'] * 1e3:.2f} us, kernels "
              f"{r['kernels_ms'] * 1e3:.2f} us, timer {r['timer_ms'] * 1e3:.2f} us", flush=True)
    sizes, lookups = measured_set(args)
    result = [rates(r, copy) for r in floor_rows(sizes, gen)] if sizes else []
    for r in result:
        print(f"floor  {r['row_bytes']:>5} B rows: {r['ms']:7.3f} ms  {r['of_copy']:.2f} of copy  "
              f"{r['gids_s']:6.2f} G ids/s  ({r['best']})", flush=True)
    for lookup in lookups:
        r = rates(lookup_rows(lookup, gen), copy)
        result.append(r)
        print(f"lookup D{r['dim']:<4} {r['dtype']:<8} bags {r['bags']} B={r['batch']}: best {r['ms']:7.3f} ms "
              f"({r['best']}) {r['of_copy']:.2f} of copy {r['gids_s']:6.2f} G ids/s; selected {r['selected_ms']:7.3f} "
              f"ms ({r['selected']})", flush=True)
    result += checks
    name = ("gather_rate" + ("_quick" if args.quick else "") + ("_floor" if args.floor else "")
            + (f"_draw{args.draw}" if args.draw is not None else ""))
    table = [{k: v for k, v in r.items() if k not in ("tiles_ms", "configs_ms")} for r in result]
    write_results(name, {"rows": result}, rows=table, summary={"copy_tb_s": copy / 1e12, "table_gib": TABLE_BYTES >> 30,
                                                                  "draw": args.draw, "cases": len(lookups),
                                                                  "timer_floor_ms": timer_floor})


if __name__ == "__main__":
    main()
