"""Segmented reduction of the fused backward (interpreter, TILE = 8 forced): runs of equal rows that
end exactly at a tile boundary, cross one or several boundaries, or cover every position."""

from __future__ import annotations

import pytest
import torch

from polyrec.kernels import tbe_select
from polyrec.kernels.jagged import JaggedBatch
from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec

P = 8  # sorted positions per update program


@pytest.fixture(autouse=True, params=[("scan", 1, 1), ("lane", 1, 1), ("lane", 3, 1), ("lane", 1, 2), ("scan", 1, 8)],
                ids=["scan", "lane", "lane-chunks3", "lane-merge2", "scan-merge8"])
def tile_of_p(monkeypatch, request) -> int:
    """TILE = P; the lane update also with 3 tiles per program (runs carried across tile ends), and the
    merge levels with 2 or 8 tiles per program (runs carried across tile ends of the merge). Returns
    the merge chunks."""
    variant, chunks, merge_chunks = request.param
    monkeypatch.setattr(tbe_select, "select_update", lambda spec, **kw: tbe_select.UpdateConfig(
        tile=P, num_warps=1, variant=variant, chunks=chunks, merge_chunks=merge_chunks))
    return merge_chunks


def _step_and_check(ids: list[int], rows: int, kind: str, deterministic: bool = False) -> None:
    gen = torch.Generator().manual_seed(len(ids) + rows)
    values = torch.tensor(ids)[torch.randperm(len(ids), generator=gen)]  # input order scrambled; sort restores runs
    batch = JaggedBatch.from_lengths(values=values, lengths=torch.ones(len(ids), dtype=torch.int64),
                                     batch_size=len(ids), num_features=1)
    opt = EmbeddingOptimizer(kind=kind, lr=0.1)
    module = TableBatchedEmbedding([TableSpec(name="t", rows=rows, dim=4)], optimizer=opt,
                                   deterministic=deterministic)
    before = module.weights.view(rows, 4).double().clone()
    grad = torch.randn(len(ids), 4, generator=gen)
    module(batch).backward(grad)
    g = torch.zeros(rows, 4, dtype=torch.float64).index_add(0, values, grad.double())  # summed per row
    if kind == "sgd":
        want = before - 0.1 * g
    else:  # rowwise adagrad from a zero accumulator
        s = (g * g).mean(1, keepdim=True)
        want = before - 0.1 * g / (s.sqrt() + opt.eps)
        torch.testing.assert_close(module.state1.double(), s.squeeze(1), rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(module.weights.view(rows, 4).double(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shift", [0, 3, P - 1])
def test_runs_of_p_p_plus_1_and_2p_at_any_alignment(shift):
    ids = [5] * shift + [0] * P + [1] * (P + 1) + [2] * (2 * P) + [3] + [4] * (3 * P + 2)
    _step_and_check(ids, rows=6, kind="rowwise_adagrad")


def test_single_row_hit_by_every_id():
    _step_and_check([2] * (5 * P + 3), rows=4, kind="rowwise_adagrad")


def test_unique_rows_and_long_runs_mixed():
    ids = list(range(10, 40)) + [0] * (2 * P - 1) + [1] * (4 * P) + list(range(40, 45))
    _step_and_check(ids, rows=50, kind="sgd", deterministic=True)


@pytest.mark.parametrize("shift", [0, 5])
def test_runs_merged_over_many_levels(shift, tile_of_p):
    """Runs of 2.5-20 tiles go through three merge levels with 8 slots per program, two with 16 or 64;
    the pieces of one run meet across program edges at every level."""
    from polyrec.perfmodel.tbe import LEVEL_TILE, merge_levels

    ids = [7] * shift + [0] * (20 * P + 3) + list(range(8, 12)) + [1] * (5 * P // 2) + [2] + [3] * (11 * P - 1)
    assert merge_levels(-(-len(ids) // P), LEVEL_TILE * tile_of_p) >= (3 if tile_of_p == 1 else 2)
    _step_and_check(ids, rows=12, kind="rowwise_adagrad")
