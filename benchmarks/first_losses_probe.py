"""Are the MLPerf DLRM-DCNv2 runs' jumps in the loss of their first steps polyrec's? The same first steps on
the direct port (torch's ``nn.EmbeddingBag`` and ``torch.optim``, fp32, no polyrec kernel).

On the H200 the full-size ``mlperf-dcnv2`` runs' first losses jump (fp32 rows, bf16 dense: 0.753, 14.95,
0.670; benchmarks/results/cold_start_2026-12-04/). MLPerf's dense recipe is Adagrad at lr 0.005 with a zero
initial accumulator: its first step moves every dense weight by about lr (g / sqrt(g * g)), whatever its
gradient. This trains MLPerf's dense half (its MLPs and cross layers at full width; tables capped at
``ROW_CAP`` rows) on the torch path, ``--steps`` steps per seed, with Adagrad and with Adam, and writes each
run's losses. Runs on the CPU by default (about 7 s a run on 2 cores at batch 1024).

    PYTHONPATH=. python3 benchmarks/first_losses_probe.py [--batch 1024] [--steps 6] [--seeds 3] [--device cpu]

Writes ``first_losses_probe_<device>_<date>.{json,md}``.
"""

from __future__ import annotations

import argparse

from polyrec.results import write_results
from polyrec.runtime import TrainConfig, Trainer

#: Rows per table at most: the dense half is MLPerf's full width, the tables a few MB.
ROW_CAP = 2000
#: The dense optimizers compared: MLPerf's and the trainer's other one.
OPTIMIZERS = ("adagrad", "adam")


def first_losses(optimizer: str, seed: int, args: argparse.Namespace) -> list[float]:
    """The losses of the first ``args.steps`` steps of the direct port with ``optimizer`` for its dense half."""
    cfg = TrainConfig(preset="mlperf-dcnv2", data="synthetic:uniform", batch_size=args.batch, steps=args.steps,
                      device=args.device, seed=seed, row_cap=ROW_CAP, embedding_backend="torch",
                      dense_backend="torch", precision="fp32", dense_optimizer=optimizer, log_every=10**9)
    trainer = Trainer(cfg, progress=False)
    return [float(trainer.train_step()) for _ in range(args.steps)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    rows = []
    for optimizer in OPTIMIZERS:
        for seed in range(args.seeds):
            losses = first_losses(optimizer, seed, args)
            rows.append({"optimizer": optimizer, "seed": seed, "first_loss": round(losses[0], 4),
                         "largest_later_loss": round(max(losses[1:]), 4), "losses": [round(v, 4) for v in losses]})
            print(rows[-1], flush=True)
    summary = {"preset": "mlperf-dcnv2", "row_cap": ROW_CAP, "batch": args.batch, "steps": args.steps,
               "path": "torch (nn.EmbeddingBag, torch.optim, fp32)"}
    paths = write_results("first_losses_probe", {"rows": rows}, rows=rows, summary=summary)
    print("wrote", *paths)


if __name__ == "__main__":
    main()
