"""An fp8 MLP layer's ReLU / bias backward: writing the masked gradient in bf16 and casting it apart, against
writing its fp8 copies in the pass (``relu_bias_backward(fp8=...)``), at several tiles.

Over MLPerf's top-MLP gradients at batch 65536 (N = 1024, 512, 256, bf16), each timed back to back
(``calibrate.steady_ms``): "separate" is ``relu_bias_backward`` (its selected tile) then ``cast_fp8`` with a
plain and a transposed copy, as the fp8 MLP ran before the fused pass; "fused" is the pass writing both
copies itself, at every tile of ``TILES`` (rows per program as ``select_config`` would walk). Fractions of
the copy rate measured in the same run count the fused pass's bytes (grad and y read, two one-byte copies).

    PYTHONPATH=.:benchmarks python3 benchmarks/relu_fp8_probe.py [--quick]
"""

from __future__ import annotations

import argparse

import torch

from polyrec.hardware import calibrate
from polyrec.kernels import dense_backward, fp8
from polyrec.kernels.dense_backward import DenseBackwardConfig, relu_bias_backward
from polyrec.results import write_results

#: Output-gradient widths of the top MLP's fp8 layers (MLPerf DLRM-DCNv2: 1024, 1024, 512, 256).
WIDTHS = (1024, 512, 256)
#: (BLOCK_M, BLOCK_N, warps) tried for the fused pass; the first is the selector's tile today.
TILES = ((32, 128, 4), (64, 64, 4), (128, 64, 4), (64, 128, 4), (128, 32, 4), (64, 128, 8))


def _gradient_state(device: torch.device) -> fp8.Fp8Scaling:
    """One gradient role with a history: its scale is known before the tensor (the fused pass's case)."""
    scaling = fp8.Fp8Scaling([fp8.GRADIENT]).to(device)
    scaling.load_state_dict({"history": torch.full((1, fp8.HISTORY_STEPS), 4.0)})
    scaling.begin(True)
    return scaling


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="batch 4096, one width (smoke test)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("relu_fp8_probe times Triton kernels on a GPU; none is visible")
    copy = calibrate.measure_copy_bandwidth(2 << 30)
    batch = 4096 if args.quick else 65536
    units = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for n in WIDTHS[:1] if args.quick else WIDTHS:
        grad = torch.randn(batch, n, device="cuda", dtype=torch.bfloat16)
        y = torch.randn(batch, n, device="cuda", dtype=torch.bfloat16)
        scaling = _gradient_state(grad.device)
        moved = batch * n * (2 + 2 + 2)

        def separate():
            g, _ = relu_bias_backward(grad, y, relu=True, need_bias=True)
            return fp8.cast_fp8(g, scaling, 0, transposed=True)

        row = {"n": n, "separate_ms": calibrate.steady_ms(separate)}
        for block_m, block_n, warps in TILES:
            selected = dense_backward.select_config(batch, n, units)
            iterations = selected.rows_per_program // selected.block_m
            config = DenseBackwardConfig(block_m=block_m, block_n=block_n, num_warps=warps,
                                         rows_per_program=block_m * iterations)
            copies = fp8.fused_out(scaling, 0, batch, n, grad.device)
            ms = calibrate.steady_ms(lambda: relu_bias_backward(grad, y, relu=True, need_bias=True, config=config,
                                                                fp8=copies))
            row[f"fused_{block_m}x{block_n}w{warps}_ms"] = ms
        row["best_fused"] = min((k for k in row if k.startswith("fused_")), key=row.get)
        row["separate_of_copy"] = moved / (row["separate_ms"] * 1e-3) / copy
        row["best_fused_of_copy"] = moved / (row[row["best_fused"]] * 1e-3) / copy
        rows.append(row)
        print(row, flush=True)
    write_results("relu_fp8_probe" + ("_quick" if args.quick else ""), {"rows": rows}, rows=rows,
                  summary={"copy_bandwidth": copy, "batch": batch})


if __name__ == "__main__":
    main()
