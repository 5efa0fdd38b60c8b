"""Would fp8 dense GEMMs cost quality? MovieLens-100k test AUC with every dense GEMM's operands rounded to fp8.

``fp8_dense_probe`` priced fp8 GEMMs for speed; this checks the other half on issue 5's quality task, on
the CPU. ``benchmarks/e2e.py``'s MovieLens run (``dcnv2-small``, 400 steps of 1024, Adagrad for both
halves, three seeds) is trained twice with the eager torch layers in fp32: as they are (the reference of
the e2e target) and with each dense GEMM fed fp8 operands (:class:`Fp8Ops`), the rounding an fp8 GEMM
with fp32 accumulation makes: the forward's input and weight to e4m3, the output gradient that the
input- and weight-gradient GEMMs read to e5m2, each with one scale per tensor from its own amax
("current" scaling). Accumulation, the bias and the elementwise cross update stay fp32, so the
difference between the runs is the operands' rounding alone. The e2e target allows 0.002 of AUC.

``--synthetic`` runs ``make demo``'s task instead (``dcnv2-small`` on synthetic data whose labels come from a
hidden model, 600 steps of 512, the trainer's default optimizers), a second model of the same family.

    PYTHONPATH=.:benchmarks python3 benchmarks/fp8_quality_probe.py [--movielens PATH | --synthetic] [--steps N]

Writes ``fp8_quality_probe_<device>_<date>.{json,md}`` (``fp8_quality_probe_synthetic_...``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.nn.functional as F

from fp8_dense_probe import FP8_ALIGN, FP8_MAX
from polyrec.models.layers import DenseOps

#: Largest finite magnitudes of the two formats, from the speed probe's table.
E4M3_MAX, E5M2_MAX = FP8_MAX["e4m3"], FP8_MAX["e5m2"]
#: Where ``benchmarks/e2e.py`` finds the file when no path is given (RecBole 1.2.1's ml-100k.inter).
MOVIELENS_DEFAULT = Path(".carry/ml-100k/ml-100k.inter")
SEEDS = (0, 1, 2)


def round_fp8(x: torch.Tensor, fmt: torch.dtype, fmt_max: float) -> torch.Tensor:
    """x rounded to ``fmt`` under one per-tensor scale that maps its amax to ``fmt_max``, back in x's dtype."""
    amax = x.detach().abs().amax().float()
    if amax == 0 or not torch.isfinite(amax):
        return x
    scale = fmt_max / amax
    return ((x.float() * scale).to(fmt).float() / scale).to(x.dtype)


class _Fp8Operand(torch.autograd.Function):
    """Forward: an operand rounded to e4m3; backward: the gradient passed through unchanged."""

    @staticmethod
    def forward(ctx, x):
        return round_fp8(x, torch.float8_e4m3fn, E4M3_MAX)

    @staticmethod
    def backward(ctx, grad):
        return grad


class _Fp8OutputGrad(torch.autograd.Function):
    """Forward: the identity; backward: the GEMM output's gradient rounded to e5m2 before the input- and
    weight-gradient GEMMs read it."""

    @staticmethod
    def forward(ctx, y):
        return y.view_as(y)

    @staticmethod
    def backward(ctx, grad):
        return round_fp8(grad, torch.float8_e5m2, E5M2_MAX)


def fp8_matmul(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ weight.T`` as an fp8 GEMM rounds it: e4m3 operands, e5m2 output gradient, fp32 accumulation."""
    return _Fp8OutputGrad.apply(F.linear(_Fp8Operand.apply(x), _Fp8Operand.apply(weight)))


class Fp8Ops(DenseOps):
    """The torch backend's layers with fp8-rounded GEMM operands (``fp8_matmul``); bias, ReLU and the
    cross update as the torch backend runs them. A layer whose output width is not a multiple of
    ``FP8_ALIGN`` (the last one, N = 1) stays as it is, as ``fp8_dense_probe`` prices it."""

    def __init__(self) -> None:
        super().__init__("torch")

    def linear(self, x, weight, bias, relu):
        if weight.shape[0] % FP8_ALIGN:
            return super().linear(x, weight, bias, relu)
        y = fp8_matmul(x, weight.to(x.dtype))
        y = y + bias.to(x.dtype) if bias is not None else y
        return F.relu(y) if relu else y

    def cross(self, x0, v, x, weight, bias):
        return x0 * (fp8_matmul(v, weight.to(v.dtype)) + bias.to(v.dtype)) + x


def task(data: str) -> dict:
    """Training options of a quality task: ``benchmarks/e2e.py``'s MovieLens run for ``movielens:PATH``, and
    ``make demo``'s run (the trainer's defaults, 600 steps of 512) for ``synthetic`` (hidden-model labels)."""
    if data.startswith("movielens:"):
        return dict(steps=400, batch_size=1024, lr=0.01, embedding_optimizer="adagrad", dense_optimizer="adagrad")
    if data == "synthetic":
        return dict(steps=600, batch_size=512)
    raise ValueError(f"fp8_quality_probe: data must be movielens:PATH or synthetic, got {data!r}")


def train_auc(data: str, seed: int, fp8: bool, steps: int | None = None) -> float:
    """Test AUC of one run of the task ``data`` (``task``) with the eager torch layers in fp32, on the CPU;
    ``steps`` overrides the task's."""
    from polyrec.runtime.config import TrainConfig
    from polyrec.runtime.trainer import Trainer

    options = task(data) | ({"steps": steps} if steps else {})
    cfg = TrainConfig(preset="dcnv2-small", data=data, seed=seed, log_every=options["steps"], device="cpu",
                      cuda_graphs=False, embedding_backend="torch", dense_backend="torch", precision="fp32",
                      **options)
    trainer = Trainer(cfg, progress=False)
    if fp8:
        trainer.model.ops = Fp8Ops()
    return trainer.train().final_auc


def summarize(rows: list[dict]) -> dict:
    """Mean AUC of each variant over the seeds and their gap (fp8 - fp32)."""
    mean = {v: sum(r["test_auc"] for r in rows if r["gemms"] == v) / sum(r["gemms"] == v for r in rows)
            for v in ("fp32", "fp8")}
    return {"fp32_auc": mean["fp32"], "fp8_auc": mean["fp8"], "gap": mean["fp8"] - mean["fp32"],
            "seeds": len({r["seed"] for r in rows})}


def main() -> None:
    from polyrec.results import write_results

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--movielens", type=Path, default=MOVIELENS_DEFAULT,
                        help="path to ml-100k.inter (RecBole) or u.data (GroupLens)")
    parser.add_argument("--synthetic", action="store_true",
                        help="make demo's synthetic task instead of MovieLens")
    parser.add_argument("--steps", type=int, help="steps per run (default: the task's)")
    args = parser.parse_args()
    if not args.synthetic and not args.movielens.is_file():
        raise SystemExit(f"fp8_quality_probe: {args.movielens} not found; see benchmarks/e2e.py's docstring")
    data = "synthetic" if args.synthetic else f"movielens:{args.movielens}"
    rows = []
    for seed in SEEDS:
        for fp8 in (False, True):
            rows.append({"seed": seed, "gemms": "fp8" if fp8 else "fp32",
                         "test_auc": train_auc(data, seed, fp8, args.steps)})
            print(rows[-1], flush=True)
    summary = summarize(rows) | {"data": data, "steps": args.steps or task(data)["steps"]}
    print(summary, flush=True)
    write_results("fp8_quality_probe" + ("_synthetic" if args.synthetic else ""), {"rows": rows}, rows=rows,
                  summary=summary)


if __name__ == "__main__":
    main()
