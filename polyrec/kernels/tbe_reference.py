"""float64 torch reference of the table-batched embedding: pooled forward and one sparse optimizer
step (only rows present in the batch move, duplicates summed first), for tests and benchmarks."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from polyrec.kernels.jagged import JaggedBatch
from polyrec.kernels.tbe import EmbeddingOptimizer, TableSpec


def ref_pooled(weights: list[Tensor], batch: JaggedBatch, tables: list[TableSpec], features: list[int]) -> Tensor:
    """float64 pooled forward from per-table weights (differentiable in ``weights``): each feature's rows
    gathered, scaled by their per-sample weights and added into their bags; mean divides by the bag's
    length, an empty bag is zero."""
    cols = []
    size = batch.batch_size
    for f, t in enumerate(features):
        if tables[t].pooling == "none":
            continue
        bag_offsets = batch.offsets[f * size:(f + 1) * size + 1]
        start, end = int(bag_offsets[0]), int(bag_offsets[-1])
        lengths = bag_offsets.diff()
        bags = torch.repeat_interleave(torch.arange(size, device=lengths.device), lengths)
        rows = weights[t][batch.values[start:end]]
        if batch.weights is not None:
            rows = rows * batch.weights[start:end, None].double()
        out = torch.zeros(size, tables[t].dim, dtype=torch.float64, device=weights[t].device).index_add(0, bags, rows)
        if tables[t].pooling == "mean":
            out = out / lengths.clamp_min(1)[:, None].double()
        cols.append(out)
    return torch.cat(cols, 1)


def ref_step(weights: list[Tensor], states: list[list[Tensor]], batch: JaggedBatch, grad: Tensor,
             opt: EmbeddingOptimizer, step: int, tables: list[TableSpec], features: list[int]):
    """One float64 sparse optimizer step (only rows present move); returns new weights and states."""
    w64 = [w.detach().double().clone().requires_grad_(True) for w in weights]
    (ref_pooled(w64, batch, tables, features) * grad.double()).sum().backward()
    new_w, new_s = [], []
    for t, (w, g) in enumerate(zip(w64, (x.grad for x in w64))):
        w = w.detach().clone()
        touched = torch.zeros(w.shape[0], dtype=torch.bool, device=w.device)
        for f, tt in enumerate(features):
            if tt == t:
                off = batch.offsets[f * batch.batch_size: (f + 1) * batch.batch_size + 1]
                touched[batch.values[int(off[0]): int(off[-1])]] = True
        g = g[touched] + opt.weight_decay * w[touched]
        s = [x.clone() for x in states[t]]
        if opt.kind == "sgd":
            w[touched] -= opt.lr * g
        elif opt.kind == "rowwise_adagrad":
            s[0][touched] += (g * g).mean(1)
            w[touched] -= opt.lr * g / (s[0][touched].sqrt()[:, None] + opt.eps)
        elif opt.kind == "adagrad":
            s[0][touched] += g * g
            w[touched] -= opt.lr * g / (s[0][touched].sqrt() + opt.eps)
        else:
            s[0][touched] = opt.beta1 * s[0][touched] + (1 - opt.beta1) * g
            s[1][touched] = opt.beta2 * s[1][touched] + (1 - opt.beta2) * g * g
            size = opt.lr * math.sqrt(1 - opt.beta2**step) / (1 - opt.beta1**step)
            w[touched] -= size * s[0][touched] / (s[1][touched].sqrt() + opt.eps)
        new_w.append(w)
        new_s.append(s)
    return new_w, new_s


def init_states(opt: EmbeddingOptimizer, tables: list[TableSpec], device=None) -> list[list[Tensor]]:
    out = []
    for t in tables:
        if opt.kind == "rowwise_adagrad":
            out.append([torch.full((t.rows,), opt.initial_accumulator_value, dtype=torch.float64, device=device)])
        elif opt.kind == "adagrad":
            out.append([torch.full((t.rows, t.dim), opt.initial_accumulator_value, dtype=torch.float64, device=device)])
        elif opt.kind == "adam":
            out.append([torch.zeros(t.rows, t.dim, dtype=torch.float64, device=device) for _ in range(2)])
        else:
            out.append([])
    return out
