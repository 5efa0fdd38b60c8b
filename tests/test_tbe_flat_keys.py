"""A trained forward's sort keys stored in flat chunks (``pooled_forward_kernel``'s FLAT_KEYS) equal those
stored one segment per bag and iteration, through the Triton interpreter: ragged and empty bags, ids out of
range, per-sample weights, mean pooling, every tile shape, features launched apart."""

from __future__ import annotations

import pytest
import torch

from polyrec.kernels import tbe_select
from polyrec.kernels.jagged import JaggedBatch
from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec

TABLES = [TableSpec(name="a", rows=50, dim=8, pooling="mean"), TableSpec(name="b", rows=7, dim=8),
          TableSpec(name="c", rows=300, dim=8, pooling="mean")]
TILES = [tbe_select.ForwardConfig(bags=b, hots=h, num_warps=2) for b, h in ((1, 1), (4, 4), (16, 1), (2, 16), (8, 4))]


def _batch(gen: torch.Generator, weighted: bool, batch_size: int = 37) -> JaggedBatch:
    lengths = torch.randint(0, 23, (len(TABLES) * batch_size,), generator=gen)
    lengths[::5] = 0  # empty bags
    n = int(lengths.sum())
    values = torch.randint(0, 50, (n,), generator=gen)
    values[::7] = 400  # out of range in every table
    values[3::11] = -2
    weights = torch.rand(n, generator=gen) if weighted else None
    return JaggedBatch.from_lengths(values=values, lengths=lengths, batch_size=batch_size, num_features=len(TABLES),
                                    weights=weights)


def _keys(module: TableBatchedEmbedding, batch: JaggedBatch, cfg, flat: bool, features: list[int]):
    module.flat_keys = flat
    keys = module.new_sort_keys(batch.values, batch.offsets, batch.weights)
    keys.src.fill_(-7)  # poisoned: a position either way leaves unwritten must stay so both ways
    if keys.scale is not None:
        keys.scale.fill_(-7.0)
    out = torch.full((batch.batch_size, module.output_dim), -7.0)
    module.launch_pooled(batch, out, torch.tensor(features, dtype=torch.int32), cfg, keys)
    return keys, out


@pytest.mark.parametrize("cfg", TILES, ids=lambda c: f"{c.bags}x{c.hots}")
@pytest.mark.parametrize("weighted", [False, True])
def test_flat_keys_equal_the_segment_stores(cfg, weighted):
    gen = torch.Generator().manual_seed(cfg.bags * 100 + cfg.hots + weighted)
    module = TableBatchedEmbedding(TABLES, optimizer=EmbeddingOptimizer(kind="sgd", lr=0.1))
    batch = _batch(gen, weighted)
    if weighted:  # weights need sum pooling on every table
        module = TableBatchedEmbedding([TableSpec(name=t.name, rows=t.rows, dim=t.dim) for t in TABLES],
                                       optimizer=EmbeddingOptimizer(kind="sgd", lr=0.1))
    for features in ([0, 1, 2], [2, 0]):
        want, want_out = _keys(module, batch, cfg, False, features)
        got, got_out = _keys(module, batch, cfg, True, features)
        assert torch.equal(got.keys, want.keys)
        assert torch.equal(got.src, want.src)
        assert (got.scale is None) == (want.scale is None)
        if want.scale is not None:
            assert torch.equal(got.scale, want.scale)
        assert torch.equal(got_out, want_out)
        launched = torch.zeros(batch.nnz, dtype=torch.bool)
        for f in features:
            launched[batch.offsets[f * batch.batch_size]:batch.offsets[(f + 1) * batch.batch_size]] = True
        assert bool((want.src[: batch.nnz] != -7)[launched].all())  # every launched position written
        assert bool((want.src[: batch.nnz] == -7)[~launched].all())
