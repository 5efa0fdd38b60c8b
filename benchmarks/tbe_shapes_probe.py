"""Why a ``tbe_shapes`` case is slow: its step under the selected update config and under forced ones
(kernel table by the torch profiler, step time by ``do_bench``), and where the host's time goes in a
step (cProfile). A diagnostic; writes ``tbe_shapes_probe_<gpu>_<date>.json``.

    PYTHONPATH=.:benchmarks python3 benchmarks/tbe_shapes_probe.py --seed 1 --case 12 [--case 1 ...] \
        [--force lane:8:8:8:152 ...] [--host-case 0] [--grad-dtype bf16] [--batch 64] [--rounds 3]

``--force variant:tile:chunks:merge_chunks[:max_registers]`` adds an update config to time beside the
selected one (warps as the selector's: the lane's along BLOCK_D, the scan candidate's of that tile).
``--batch`` replaces the cases' batch (a small one: the update of a few ids). ``--rounds N`` times every config
N times, the order reversed every other round (``round_order``), so that a step time that depends on which config ran
first shows as such.
"""

from __future__ import annotations

import argparse

import torch
import triton
from profiling import host_profile as profile_calls, kernel_table
from tbe_shapes import DTYPES, config_label, make_batch, seed_cases, update_text

from polyrec.kernels import tbe_select
from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec
from polyrec.results import write_results

#: Kernels whose launches of a step the results keep apart (``call_ms``, in launch order): a module of several dim
#: groups updates each by a launch of its own, as many in every step. (Not the merge's levels: their count follows
#: each batch's ids, so their places in the step would not line up.)
UPDATE_LAUNCHES = ("lane_update_kernel", "update_kernel")


def build(case: dict, update_config: tbe_select.UpdateConfig | None) -> TableBatchedEmbedding:
    tables = [TableSpec(name=f"t{i}", rows=r, dim=d, pooling=p)
              for i, (r, d, p) in enumerate(zip(case["rows"], case["dims"], case["pooling"]))]
    return TableBatchedEmbedding(tables, optimizer=EmbeddingOptimizer(kind=case["optimizer"], lr=0.01),
                                 weight_dtype=DTYPES[case["dtype"]], device="cuda", update_config=update_config)


def parse_force(text: str, block_d: int) -> tbe_select.UpdateConfig:
    variant, tile, chunks, merge, *cap = text.split(":")
    if variant == "lane":
        warps = tbe_select.lane_warps(block_d, 32)
    else:
        warps = {c.tile: c.num_warps for c in tbe_select.scan_candidates(block_d, 32)}.get(int(tile))
        if warps is None:
            raise SystemExit(f"--force {text}: no scan candidate has tile {tile} at BLOCK_D {block_d}")
    return tbe_select.UpdateConfig(variant=variant, tile=int(tile), chunks=int(chunks), merge_chunks=int(merge),
                                   num_warps=warps, max_registers=int(cap[0]) if cap else None)


def time_config(case: dict, batches: list, grad_shape: tuple, config, gen: torch.Generator,
                grad_dtype: torch.dtype = torch.float32) -> dict:
    """Step time (``do_bench`` median) and device time of one case under ``config`` (None: the module's own
    selection), with every kernel of the step as the profiler names it (the code up to c021ade kept the ten
    heaviest, before 2026-12-07 eight), and each launch of UPDATE_LAUNCHES apart (since 2026-12-07)."""
    module = build(case, config)
    grad = torch.randn(grad_shape, device="cuda", generator=gen).to(grad_dtype)
    turn = iter(range(10**9))

    def step() -> None:
        module(batches[next(turn) % len(batches)]).backward(grad)

    ms = triton.testing.do_bench(step, warmup=10, rep=300, return_mode="median")
    kernels = kernel_table(step, reps=3, per_call=UPDATE_LAUNCHES)
    chosen = config_label(config) if config is not None else update_text(module, batches[0].nnz)
    del module
    return {"config": chosen, "step_ms": ms, "device_ms": sum(k["ms_per_step"] for k in kernels), "kernels": kernels}


def host_profile(case: dict, gen: torch.Generator, steps: int = 50) -> str:
    """cProfile of ``steps`` forward + backward steps of ``case`` (the host's share of a small step)."""
    module = build(case, None)
    batch = make_batch(case, gen)
    grad = torch.randn(case["batch"], module.output_dim, device="cuda", generator=gen)
    for _ in range(5):
        module(batch).backward(grad)
    return profile_calls(lambda: module(batch).backward(grad), steps)


def round_order(configs: list, rounds: int) -> list[tuple[int, object]]:
    """(round, config) in the order they are timed: ``configs`` as given in even rounds, reversed in odd ones."""
    return [(r, c) for r in range(rounds) for c in (configs if r % 2 == 0 else configs[::-1])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--case", type=int, action="append", default=[], help="tbe_shapes case index (repeatable)")
    parser.add_argument("--force", action="append", default=[], help="variant:tile:chunks:merge_chunks[:max_registers]")
    parser.add_argument("--host-case", type=int, default=None, help="cProfile this case's steps")
    parser.add_argument("--cases", type=int, default=16, help="cases drawn (as tbe_shapes --cases)")
    parser.add_argument("--batch", type=int, default=None, help="replace the cases' batch")
    parser.add_argument("--rounds", type=int, default=1, help="times each config is timed, in alternating order")
    parser.add_argument("--grad-dtype", choices=sorted(DTYPES), default="fp32",
                        help="the output gradient's dtype (bf16: as the trainer's bf16 dense half hands it)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    cases = [c | {"batch": args.batch or c["batch"]} for c in seed_cases(args.seed, args.cases)]
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    rows, host = [], None
    for index in args.case:
        case = cases[index]
        batches = [make_batch(case, gen) for _ in range(3)]
        probe = build(case, None)
        grad_shape, block_d = (case["batch"], probe.output_dim), probe.block_d
        del probe
        for turn, config in round_order([None] + [parse_force(f, block_d) for f in args.force], args.rounds):
            row = {"case": index, "round": turn, "forced": config is not None,
                   **time_config(case, batches, grad_shape, config, gen, DTYPES[args.grad_dtype])}
            rows.append(row)
            print(f"case {index} round {turn} {row['config']}: step {row['step_ms']:.3f} ms, "
                  f"device {row['device_ms']:.3f} ms", flush=True)
            for k in row["kernels"][:6]:
                print(f"    {k['ms_per_step']:8.3f} ms  x{k['calls_per_step']:<4g} {k['kernel'][:80]}")
        del batches
        torch.cuda.empty_cache()
    if args.host_case is not None:
        host = host_profile(cases[args.host_case], gen)
        print(host[:6000])
    write_results("tbe_shapes_probe", {"seed": args.seed, "grad_dtype": args.grad_dtype, "batch": args.batch,
                                       "rows": rows, "host_profile": host},
                  rows=[{k: v for k, v in r.items() if k != "kernels"} for r in rows])


if __name__ == "__main__":
    main()
