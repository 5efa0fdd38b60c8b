"""The fp8 cast's transposed copy stored one byte per element against 4-byte words of four rows.

``polyrec.kernels.fp8.cast_fp8`` over batch-sized bf16 tensors of the fp8 step (MLPerf's [65536, 3456] cross
network width and [65536, 1024] of the top MLP), each timed back to back (``calibrate.steady_ms``): the plain
copy alone, the transposed copy alone and both, with the transposed store as bytes (``TRANSPOSED_WORDS``
off) and as words (on); each as a fraction of the copy rate measured in the same run (bytes: the bf16 read
plus one byte per element per copy written).

    PYTHONPATH=.:benchmarks python3 benchmarks/fp8_transpose_probe.py [--quick]
"""

from __future__ import annotations

import argparse
from unittest import mock

import torch

from polyrec.hardware import calibrate
from polyrec.kernels import fp8
from polyrec.results import write_results

#: [M, N] bf16 tensors cast: the cross network's width and the top MLP's widest layer at MLPerf's batch.
SHAPES = ((65536, 3456), (65536, 1024))
#: (plain, transposed) copies of each row.
COPIES = ((True, False), (False, True), (True, True))


def cast_ms(x: torch.Tensor, plain: bool, transposed: bool, words: bool) -> float:
    """ms per ``cast_fp8`` of x with these copies, the transposed one stored as words or bytes."""
    scaling = fp8.Fp8Scaling([fp8.FORWARD]).to(x.device)
    scaling.begin(True)
    fp8.cast_fp8(x, scaling, 0, plain=plain, transposed=transposed)  # the role's history: no amax pre-pass
    with mock.patch.object(fp8, "TRANSPOSED_WORDS", words):
        return calibrate.steady_ms(lambda: fp8.cast_fp8(x, scaling, 0, plain=plain, transposed=transposed))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one small shape (smoke test)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("fp8_transpose_probe times Triton kernels on a GPU; none is visible")
    copy = calibrate.measure_copy_bandwidth(2 << 30)
    rows = []
    for m, n in ((4096, 512),) if args.quick else SHAPES:
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        for plain, transposed in COPIES:
            for words in ((False, True) if transposed else (False,)):
                ms = cast_ms(x, plain, transposed, words)
                moved = m * n * (2 + plain + transposed)
                rows.append({"m": m, "n": n, "plain": plain, "transposed": transposed, "words": words, "ms": ms,
                             "of_copy": moved / (ms * 1e-3) / copy})
                print(rows[-1], flush=True)
    write_results("fp8_transpose_probe" + ("_quick" if args.quick else ""), {"rows": rows}, rows=rows,
                  summary={"copy_bandwidth": copy})


if __name__ == "__main__":
    main()
