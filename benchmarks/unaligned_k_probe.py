"""The dense features' GEMMs with unaligned rows (K = 13, bf16) against zero-padded to 16 columns
(``polyrec.models.layers.pad_reduction``), and the training step both ways.

1. ``do_bench`` medians on the H200: [65536, 13] x [13, 512] forward (cuBLAS, with bias + ReLU as
   the library runs it), the weight gradient [512, 65536] x [65536, 13], each padded, and the pads;
2. full-size ``mlperf-dcnv2`` at batch 65536: the step's kernels by the profiler with the padding and
   without (``pad_reduction`` replaced by the identity), 5 steps each in two interleaved rounds, and
   interleaved wall-clock rounds.

Writes ``unaligned_k_probe_<gpu>_<date>.{json,md}``.

    PYTHONPATH=.:benchmarks python3 benchmarks/unaligned_k_probe.py
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
import triton

import polyrec.models.layers as layers
from polyrec.results import write_results
from profiling import interleaved_rounds, kernel_table, mlperf_trainer

BATCH, FEATURES, WIDTH = 65536, 13, 512


def micro() -> dict[str, float]:
    """Milliseconds (median) of each GEMM unpadded and padded, and of the two pads."""
    x = torch.randn(BATCH, FEATURES, device="cuda").bfloat16()
    w = torch.randn(WIDTH, FEATURES, device="cuda").bfloat16()
    b = torch.randn(WIDTH, device="cuda").bfloat16()
    g = torch.randn(BATCH, WIDTH, device="cuda").bfloat16()
    xp, wp = layers.pad_reduction(x, w)
    bench = lambda fn: triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")  # noqa: E731
    return {"fwd_13_ms": bench(lambda: torch._addmm_activation(b, x, w.t())),
            "fwd_16_ms": bench(lambda: torch._addmm_activation(b, xp, wp.t())),
            "wgrad_13_ms": bench(lambda: torch.mm(g.t(), x)),
            "wgrad_16_ms": bench(lambda: torch.mm(g.t(), xp)),
            "pad_x_ms": bench(lambda: F.pad(x, (0, xp.shape[1] - FEATURES))),
            "pad_w_ms": bench(lambda: F.pad(w, (0, wp.shape[1] - FEATURES)))}


def main() -> None:
    summary = micro()
    print(summary, flush=True)
    padding = layers.pad_reduction
    policies = {"padded": padding, "unaligned": lambda x, w: (x, w)}
    tr = mlperf_trainer()
    for r in range(2):  # interleaved: the first profile after the trainer's start runs slower
        for name in ("unaligned", "padded"):
            layers.pad_reduction = policies[name]
            kernels = kernel_table(tr.train_step, reps=5, warmup=5)
            summary[f"kernel_ms_per_step_{name}_{r}"] = sum(k["ms_per_step"] for k in kernels)
            summary[f"align1_kernel_ms_{name}_{r}"] = sum(k["ms_per_step"] for k in kernels if "align1" in k["kernel"])
            print(name, r, round(summary[f"kernel_ms_per_step_{name}_{r}"], 3), flush=True)
    rows = interleaved_rounds(tr, {name: functools.partial(setattr, layers, "pad_reduction", fn)
                                   for name, fn in policies.items()}, 4, steps=40)
    layers.pad_reduction = padding
    print(summary, flush=True)
    write_results("unaligned_k_probe", {"rounds": rows}, rows=rows, summary=summary)


if __name__ == "__main__":
    main()
