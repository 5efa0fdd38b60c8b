"""A/B of the CrossGrad pass's row blocks per program (``gemm_configs.PASS_ROW_BLOCKS``) in the training
step: full-size ``mlperf-dcnv2`` at batch 65536 (``profiling.mlperf_trainer``), interleaved rounds of 40
steps with 1 block per program (the pass before the thirtieth session) and with today's value, then each
way's kernels by the profiler (device ms per step) and the loss of one more step both ways from the same
state (the pass's column sums are added in another order: fp32, not bitwise). Writes
``$OUT/pass_row_blocks_ab.json``.

    PYTHONPATH=.:benchmarks OUT=. python3 benchmarks/pass_row_blocks_ab.py
"""

from __future__ import annotations

import json
import os

from polyrec.kernels import gemm_configs
from profiling import interleaved_rounds, kernel_table, mlperf_trainer, warm_each

ROUNDS, STEPS = 6, 40


def main() -> None:
    today = gemm_configs.PASS_ROW_BLOCKS
    policies = {blocks: (lambda b=blocks: setattr(gemm_configs, "PASS_ROW_BLOCKS", b)) for blocks in (1, today)}
    trainer = mlperf_trainer()
    warm_each(trainer, policies, 3)
    result = {"rounds": interleaved_rounds(trainer, policies, ROUNDS, key="row_blocks", steps=STEPS)}
    for blocks, apply in policies.items():
        apply()
        kernels = kernel_table(trainer.train_step, reps=5)
        passes = [k for k in kernels if k["kernel"] == "split_k_reduce_kernel"]
        result[f"kernel_ms_per_step_{blocks}"] = sum(k["ms_per_step"] for k in kernels)
        result[f"passes_{blocks}"] = passes
        print(blocks, f"kernels {result[f'kernel_ms_per_step_{blocks}']:.3f} ms per step", passes, flush=True)
    for blocks in policies:
        rows = [r["ms_per_step"] for r in result["rounds"] if r["row_blocks"] == blocks]
        result[f"median_ms_{blocks}"] = sorted(rows)[len(rows) // 2]
    print({k: v for k, v in result.items() if k.startswith(("median", "kernel_ms"))})
    with open(os.path.join(os.environ.get("OUT", "."), "pass_row_blocks_ab.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
