"""The planner prices a lookup split between TBE modules (tables of several row dtypes on one rank,
``polyrec.models.mixed_embeddings``): the split's copies of the ids and offsets in the forward's device time,
its torch ops in the host's, and the copies it keeps for the backward in the rank's memory. A rank of one
row dtype pays none of it."""

from __future__ import annotations

import pytest
import torch

from polyrec.models.config import preset
from polyrec.models.embeddings import bag_bounds
from polyrec.models.mixed_embeddings import feature_subset
from polyrec.planner import estimate as estimate_module
from polyrec.planner import memory as mem
from polyrec.planner import parse_fleet
from polyrec.planner.estimate import Estimator
from polyrec.planner.host import Launches, split_launches
from polyrec.planner.shard_cost import module_key, modules, shard_loads, split_seconds
from polyrec.planner.types import TablePlan, model_spec_from_config

MODEL = model_spec_from_config(preset("dcnv2-small"))
BATCH = 8192


def plans(half: frozenset[int] = frozenset()) -> list[TablePlan]:
    """Every table on rank 0, fp32 rows but the tables ``half`` (fp16)."""
    return [TablePlan(table=t.name, sharding="table_wise", ranks=(0,),
                      weight_dtype="fp16" if i in half else "fp32") for i, t in enumerate(MODEL.tables)]


def rank_loads(half: frozenset[int] = frozenset()):
    return shard_loads(MODEL, plans(half), BATCH, 1)


def test_one_row_dtype_pays_no_split():
    est = Estimator(MODEL, parse_fleet("H200"))
    loads = rank_loads()
    assert split_seconds(list(modules(loads).values()), est.ceilings["H200"]) == 0.0
    assert split_launches(1) == Launches()
    assert mem.split_index_bytes(lookups=1e6, bags=BATCH, modules=1) == 0


def test_the_split_copies_add_to_the_forward_of_the_two_modules():
    est = Estimator(MODEL, parse_fleet("H200"))
    loads = rank_loads(frozenset({0, 3}))
    grouped = modules(loads)
    assert len(grouped) == 2
    fwd = est.embedding_seconds(0, loads)[0]
    alone = sum(est.tbe_seconds("H200", module_key(group))[0] for group in grouped.values())
    ids = sum(s.accesses for s in loads)
    copy = est.ceilings["H200"].copy_bandwidth.value
    # at least the ids read and written once in int64 at the copy rate, on top of the two lookups
    assert fwd - alone >= 2 * mem.INDEX_BYTES * ids / copy
    assert fwd - alone == pytest.approx(split_seconds(list(grouped.values()), est.ceilings["H200"]))


def test_the_host_issues_the_split(monkeypatch):
    est = Estimator(MODEL, parse_fleet("H200"))
    loads = rank_loads(frozenset({1}))
    dense = est.dense_seconds("H200", BATCH)
    with_split = est.host_seconds(0, loads, dense)
    monkeypatch.setattr(estimate_module, "split_launches", lambda modules: Launches())
    without = est.host_seconds(0, loads, dense)
    assert with_split - without == pytest.approx(split_launches(2).seconds(est.host["H200"]))
    assert with_split > without


def test_the_rank_memory_holds_the_split_copies():
    est = Estimator(MODEL, parse_fleet("H200"))
    one, mixed = (est.rank_memory(0, rank_loads(half), BATCH) for half in (frozenset(), frozenset({2})))
    ids = sum(s.accesses for s in rank_loads())
    expected = mem.split_index_bytes(lookups=ids, bags=BATCH * len(MODEL.tables), modules=2)
    assert expected > 0
    assert mixed.activations - one.activations == expected


def test_split_index_bytes_are_what_the_runtime_split_makes():
    """``feature_subset`` of each dtype's features: the ids and offsets the split makes (and its lookup keeps)
    are ``memory.split_index_bytes``'s, in int64 (``memory.INDEX_BYTES`` each)."""
    gen = torch.Generator().manual_seed(5)
    batch, features = 13, 6
    lengths = torch.randint(0, 4, (features * batch,), generator=gen)
    offsets = torch.zeros(lengths.numel() + 1, dtype=torch.int64)
    offsets[1:] = lengths.cumsum(0)
    values = torch.randint(0, 50, (int(offsets[-1]),), generator=gen)
    bounds = bag_bounds(offsets, batch, features)
    groups = [[0, 2, 5], [1, 3, 4]]
    parts = [feature_subset(values, offsets, bounds, batch, g, torch.tensor(g)) for g in groups]
    made = sum(t.numel() * t.element_size() for part in parts for t in part)
    assert all(t.element_size() == mem.INDEX_BYTES for part in parts for t in part)
    assert made == mem.split_index_bytes(lookups=values.numel(), bags=features * batch, modules=len(groups))
