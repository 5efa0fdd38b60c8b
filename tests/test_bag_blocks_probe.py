"""benchmarks/bag_blocks_probe.py: its reorder keeps each key's positions one run, puts a table's one-block
runs first by block, and the update over the reordered positions leaves the same tables (interpreter)."""

from __future__ import annotations

import os

import pytest
import torch

from benchmark_util import load_benchmark
from polyrec.kernels import tbe_select
from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec

probe = load_benchmark("bag_blocks_probe")
tbe_bench = load_benchmark("tbe")


def test_block_order_takes_one_block_runs_by_block_then_the_spanning_runs():
    """Two tables (gradient columns 0 and 1) of DIM columns, 4 bags in 2 blocks: row 5 of table 0 has ids in
    bags 0 and 3 (spans), row 6 in bag 2 only, row 7 in bag 1 only."""
    dim, stride = probe.DIM, 2 * probe.DIM
    keys = torch.tensor([5, 5, 6, 7, 20, 21, 21])
    bags = torch.tensor([0, 3, 2, 1, 3, 0, 1])
    cols = torch.tensor([0, 0, 0, 0, 1, 1, 1])
    g_off = bags * stride + cols * dim
    perm = probe.block_order(keys, g_off, 7, stride, 4, 2)
    assert keys[perm].tolist() == [7, 6, 5, 5, 21, 21, 20]
    assert probe.runs_kept_whole(keys[perm], 7)
    assert not probe.runs_kept_whole(torch.tensor([5, 6, 5]), 3)


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="runs Triton kernels through TRITON_INTERPRET=1")
@pytest.mark.parametrize("blocks", [2, 4])
def test_update_over_bag_blocks_leaves_the_tables_of_the_sorted_order(blocks):
    """The lane update (the probe's subject), forced: the selector takes the scan update for so few ids."""
    rows, hots, batch_size, dim = [50, 7, 300, 3], [3, 2, 5, 1], 16, 8
    lane = tbe_select.UpdateConfig(tile=32, num_warps=1, variant="lane", chunks=8)  # one program: 256 >= 176 ids

    def tables_after(reorder: bool):
        tables = [TableSpec(name=f"t{i}", rows=r, dim=dim) for i, r in enumerate(rows)]
        module = TableBatchedEmbedding(tables, optimizer=EmbeddingOptimizer(kind="rowwise_adagrad", lr=0.1),
                                       deterministic=True, update_config=lane)
        gen = torch.Generator().manual_seed(1)
        batch = tbe_bench.make_batch(rows, hots, batch_size, False, gen)
        grad = torch.randn(batch_size, dim * len(tables), generator=gen)
        module.prepare_backward(batch)
        ids = module._prepared
        if reorder:
            n = batch.nnz
            perm = probe.block_order(ids.keys, ids.g_off, n, grad.stride(0), batch_size, blocks, dim=dim)
            keys, g_off = probe.in_order(ids.keys, ids.g_off, n, perm)
            assert probe.runs_kept_whole(keys, n) and not torch.equal(keys, ids.keys)
            ids.keys, ids.g_off = keys, g_off
        module._fused_backward(grad, batch.values, batch.offsets, None, batch_size, None)
        return module.weights.clone(), module.state1.clone()

    (w0, s0), (w1, s1) = tables_after(False), tables_after(True)
    assert torch.equal(w0, w1) and torch.equal(s0, s1)
