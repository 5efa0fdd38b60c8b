"""Ragged bags in the pooled forward's price: ``tbe_forward.loop_trips`` counts the loop iterations a
program takes (its longest bag over HOTS), the forward model takes them, and the module plans with them."""

from __future__ import annotations

import math
import random

import torch

from polyrec.hardware.catalog import get_device
from polyrec.kernels import tbe as tbe_module
from polyrec.kernels import tbe_select
from polyrec.kernels.jagged import JaggedBatch
from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec
from polyrec.kernels.tbe_forward import loop_trips
from polyrec.kernels.tbe_forward_plan import plan_forward
from polyrec.perfmodel.tbe_lookup import ForwardTile, forward_seconds

SPEC = get_device("H200")
TILES = [(1, 1), (4, 4), (8, 4), (3, 16), (16, 1)]


def _batch(lengths: list[list[int]]) -> JaggedBatch:
    flat = torch.tensor([n for feature in lengths for n in feature])
    return JaggedBatch.from_lengths(values=torch.zeros(int(flat.sum()), dtype=torch.int64), lengths=flat,
                                    batch_size=len(lengths[0]), num_features=len(lengths))


def _brute(lengths: list[int], bags: int, hots: int) -> float:
    programs = [lengths[i:i + bags] for i in range(0, len(lengths), bags)]
    return sum(math.ceil(max(p) / hots) for p in programs) / len(programs)


def test_loop_trips_match_a_count_by_hand():
    """Ragged bags with empty ones, a batch that is no multiple of BAGS, a subset of the features."""
    rng = random.Random(7)
    lengths = [[rng.choice([0, 0, 1, 5, 17, 40]) for _ in range(37)] for _ in range(3)]
    got = loop_trips(_batch(lengths).offsets, 37, [0, 2], TILES)
    for bags, hots in TILES:
        assert got[(bags, hots)] == [_brute(lengths[f], bags, hots) for f in (0, 2)]


def test_fixed_bags_take_the_mean_bags_iterations():
    """Bags of one length per feature: the counted trips are ceil(length / HOTS), which the model assumes
    without them, so fixed-length batches (MLPerf's) are priced and planned as before."""
    lengths = [[3] * 64, [1] * 64, [100] * 64]
    trips = loop_trips(_batch(lengths).offsets, 64, [0, 1, 2], TILES)
    for bags, hots in TILES:
        assert trips[(bags, hots)] == [math.ceil(n[0] / hots) for n in lengths]
    shape = dict(batch_size=64, block_d=128, row_bytes=512, vec=4)
    plain = plan_forward(SPEC, bag_lengths=[3.0, 1.0, 100.0], **shape)
    tiles = [(c.bags, c.hots) for c in tbe_select.forward_candidates(128, SPEC.warp_size)]
    counted = plan_forward(SPEC, bag_lengths=[3.0, 1.0, 100.0], loop_trips=loop_trips(
        _batch(lengths).offsets, 64, [0, 1, 2], tiles), **shape)
    assert counted == plain


def test_ragged_bags_cost_more_than_their_mean():
    """Half the bags empty, half 32 long (mean 16): each 8-bag program loops over 32 ids, as the counted
    trips say, not 16; the model's price grows with them."""
    lengths = [[0, 32] * 4096]
    trips = loop_trips(_batch(lengths).offsets, 8192, [0], [(8, 4)])[(8, 4)]
    assert trips == [8.0]
    tile = ForwardTile(bags=8, hots=4, block_d=128, num_warps=2, vec=4, elem_bytes=4)
    kw = dict(batch_size=8192, bag_lengths=[16.0], row_bytes=512, out_bytes=4)
    ceil = tbe_select.ceilings(SPEC)
    assert forward_seconds(tile, SPEC, ceil, loop_trips=trips, **kw) > forward_seconds(tile, SPEC, ceil, **kw)


def test_the_module_plans_with_the_batchs_trips(monkeypatch):
    seen = {}

    def spy(spec, **kw):
        seen.update(kw)
        return plan_forward(spec, **kw)

    monkeypatch.setattr(tbe_module, "plan_forward", spy)
    module = TableBatchedEmbedding([TableSpec(name="a", rows=50, dim=8), TableSpec(name="b", rows=9, dim=8)],
                                   optimizer=EmbeddingOptimizer(kind="sgd", lr=0.1))
    lengths = [[0, 5, 2, 0, 9], [1, 1, 1, 1, 1]]
    batch = _batch(lengths)
    module.forward_plan(batch)
    tiles = [(c.bags, c.hots) for c in tbe_select.forward_candidates(module.block_d, 32)]
    assert seen["loop_trips"] == loop_trips(batch.offsets, 5, [0, 1], tiles)
    assert all(seen["loop_trips"][(bags, hots)] == [_brute(n, bags, hots) for n in lengths] for bags, hots in tiles)

