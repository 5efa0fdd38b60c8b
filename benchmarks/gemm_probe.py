"""Diagnostic: a few hand-picked GEMM configs (the Triton matmul tutorial's Hopper configs among
them) against torch.matmul on a few shapes, to tell a slow kernel from a poor selection.

    PYTHONPATH=. python3 benchmarks/gemm_probe.py
"""

from __future__ import annotations

import torch
from triton.testing import do_bench

from polyrec.kernels.gemm import matmul
from polyrec.kernels.gemm_configs import GemmConfig
from polyrec.results import write_results

SHAPES = [("square 8192 NN", 8192, 8192, 8192, False, False), ("fwd cross-U B16384 NT", 16384, 3456, 512, False, True),
          ("wgrad top1 B16384 TN", 1024, 3456, 16384, True, False), ("dgrad cross-U B65536 NN", 65536, 512, 3456, False, False)]
CONFIGS = [GemmConfig(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=3),
           GemmConfig(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=4),
           GemmConfig(block_m=128, block_n=128, block_k=64, num_warps=4, num_stages=4),
           GemmConfig(block_m=256, block_n=128, block_k=64, num_warps=8, num_stages=3),
           GemmConfig(block_m=128, block_n=64, block_k=64, num_warps=4, num_stages=4),
           GemmConfig(block_m=64, block_n=128, block_k=64, num_warps=4, num_stages=4),
           GemmConfig(block_m=64, block_n=64, block_k=32, num_warps=4, num_stages=5)]


def main() -> None:
    rows = []
    for name, m, n, k, ta, tb in SHAPES:
        a = torch.randn((k, m) if ta else (m, k), device="cuda", dtype=torch.bfloat16)
        b = torch.randn((n, k) if tb else (k, n), device="cuda", dtype=torch.bfloat16)
        ref = (a.t() if ta else a).float() @ (b.t() if tb else b).float()
        flop = 2 * m * n * k
        torch_ms = do_bench(lambda: torch.matmul(a.t() if ta else a, b.t() if tb else b), return_mode="median")
        rows.append({"shape": name, "config": "torch.matmul", "ms": torch_ms, "tflops": flop / torch_ms / 1e9, "err": 0.0})
        for cfg in CONFIGS:
            out = matmul(a, b, trans_a=ta, trans_b=tb, config=cfg)
            err = float((out.float() - ref).abs().max() / ref.abs().max())
            ms = do_bench(lambda: matmul(a, b, trans_a=ta, trans_b=tb, config=cfg), return_mode="median")
            rows.append({"shape": name, "config": cfg.label, "ms": ms, "tflops": flop / ms / 1e9, "err": err})
        for r in rows[-len(CONFIGS) - 1:]:
            print(f"{r['shape']:<26} {r['config']:<34} {r['ms']:8.3f} ms {r['tflops']:7.1f} TFLOP/s err {r['err']:.1e}")
    write_results("gemm_probe", {}, rows=rows)


if __name__ == "__main__":
    main()
