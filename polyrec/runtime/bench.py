"""End-to-end training throughput: the direct port and polyrec's path, same model and data, one process.

The direct port is what a straight CUDA-to-anything port of DLRM looks like in plain eager PyTorch:
one ``nn.EmbeddingBag(sparse=True)`` per table with ``torch.optim.Adagrad``, fp32 dense layers through
``F.linear``, Adagrad for the dense layers, no fusion. polyrec's path uses the table-batched embedding
with its fused row-wise Adagrad, polyrec's GEMMs and bf16 dense math (on a GPU; the "auto" choices
of :func:`polyrec.runtime.config.resolve`).
"""

from __future__ import annotations

import dataclasses
import gc
from typing import Any

import torch

from polyrec.runtime.config import TrainConfig
from polyrec.runtime.trainer import Trainer


def direct_port_config(base: TrainConfig) -> TrainConfig:
    return dataclasses.replace(base, embedding_backend="torch", dense_backend="torch", precision="fp32",
                               embedding_optimizer="adagrad", dense_optimizer="adagrad", cuda_graphs=False,
                               pipeline="sync")


def step_without_data_ms(measured: dict[str, Any]) -> float:
    """A ``Trainer.benchmark`` row's median step minus its synthetic-data phase (device timeline): the
    step the planner predicts (it does not model the data source)."""
    return measured["median_step_ms"] - measured.get("data_ms", 0.0)


def peak_memory_gb(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 1e9 if device.type == "cuda" else None


def measure(cfg: TrainConfig, *, label: str, warmup: int, steps: int) -> dict[str, Any]:
    """Build a trainer for ``cfg`` and time it; the row reports backends, rates and peak memory."""
    import time

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    trainer = Trainer(cfg, progress=False)
    trainer.sync()
    build_s = time.perf_counter() - t0
    row: dict[str, Any] = {"path": label, "pipeline": cfg.pipeline, "embeddings": trainer.rt.embedding_backend,
                           "dense": trainer.rt.dense_backend,
                           "dtype": str(trainer.rt.compute_dtype).removeprefix("torch."), "cuda_graphs": trainer.graphs.on,
                           "dense_fp8": trainer.rt.dense_fp8, "embedding_optimizer": cfg.embedding_optimizer,
                           "batch": cfg.batch_size,
                           "build_s": build_s, **trainer.benchmark(warmup=warmup, steps=steps)}
    row["peak_gb"] = peak_memory_gb(trainer.rt.device)
    trainer.source.close()
    del trainer
    gc.collect()
    return row


def e2e(base: TrainConfig, *, warmup: int, steps: int, include_direct: bool = True) -> dict[str, Any]:
    """Rows for the direct port and polyrec's path, and polyrec's speed-up over the direct port."""
    rows = []
    if include_direct:
        rows.append(measure(direct_port_config(base), label="direct port", warmup=warmup, steps=steps))
    rows.append(measure(base, label="polyrec", warmup=warmup, steps=steps))
    ratio = rows[-1]["samples_per_s"] / rows[0]["samples_per_s"] if include_direct else None
    return {"rows": rows, "speedup": ratio, "polyrec_kernels": uses_polyrec_kernels(rows[-1])}


def uses_polyrec_kernels(row: dict[str, Any]) -> bool:
    """Whether a ``measure`` row ran any of polyrec's kernels (on CPU, "auto" picks torch for both halves)."""
    return "polyrec" in (row["embeddings"], row["dense"])
