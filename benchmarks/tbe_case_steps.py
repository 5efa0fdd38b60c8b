"""Training steps of one ``tbe_shapes`` case, for a profiler wrapped around the process (Nsight Compute's ``ncu``):
the module as it selects its own configs (``tbe_shapes_probe.build``), a fresh batch of the case's draw, an fp32
output gradient, ``--steps`` forward + backward steps, the device drained after each.

    PYTHONPATH=.:benchmarks ncu -k regex:lane_update_kernel -s LAUNCHES_TO_SKIP -c LAUNCHES \\
        python3 benchmarks/tbe_case_steps.py --seed 55 --case 13 --steps 3

Prints the case and the module's update launches (one per dim group, in launch order), nothing measured: the
profiler's report is the result.
"""

from __future__ import annotations

import argparse

import torch
from tbe_shapes import make_batch, seed_cases, update_text
from tbe_shapes_probe import build


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--case", type=int, required=True, help="tbe_shapes case index")
    parser.add_argument("--cases", type=int, default=16, help="cases drawn (as tbe_device_times)")
    parser.add_argument("--steps", type=int, default=3, help="forward + backward steps")
    args = parser.parse_args()
    cases = seed_cases(args.seed, args.cases)
    if not 0 <= args.case < len(cases):
        parser.error(f"--case {args.case}: seed {args.seed} draws cases 0-{len(cases) - 1}")
    case = cases[args.case]
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    module = build(case, None)
    batch = make_batch(case, gen)
    grad = torch.randn(case["batch"], module.output_dim, device="cuda", generator=gen)
    for _ in range(args.steps):
        module(batch).backward(grad)
        torch.cuda.synchronize()
    print(f"seed {args.seed} case {args.case}: dims {case['dims']} batch {case['batch']} {case['dtype']} "
          f"{case['optimizer']}; update {update_text(module, batch.nnz)}")


if __name__ == "__main__":
    main()
