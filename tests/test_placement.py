"""Default table placement of sharded runs (``default_shardings``): lookups balanced under a bytes cap."""

from __future__ import annotations

import pytest

from polyrec.models import preset
from polyrec.runtime.distributed_embeddings import BYTES_SLACK, default_shardings


def _loads(shardings, rows, lookups, world):
    look, held = [0.0] * world, [0.0] * world
    for t, s in enumerate(shardings):
        for r in s.ranks:
            look[r] += lookups[t] / len(s.ranks)
            held[r] += rows[t] / len(s.ranks)
    return look, held


@pytest.mark.parametrize("world", [2, 3, 4, 8])
def test_mlperf_lookups_balanced_and_bytes_capped(world):
    config = preset("mlperf-dcnv2")
    rows, hots = config.table_rows, config.multi_hot
    shardings = default_shardings(rows, config.embedding_dim, world, lookups=hots)
    look, held = _loads(shardings, rows, hots, world)
    assert max(look) <= 1.3 * sum(hots) / world  # bytes-balanced placement put 80% on one of 2 ranks
    assert max(held) <= BYTES_SLACK * sum(rows) / world + max(rows)  # tables are indivisible
    hot = [t for t, h in enumerate(hots) if h > sum(hots) / world]
    assert all(shardings[t].kind == "row" and len(shardings[t].ranks) == world for t in hot)


def test_without_lookups_bytes_are_balanced_and_bad_lengths_are_named():
    rows = [100, 90, 50, 40, 10, 10]
    shardings = default_shardings(rows, 8, 2)
    _, held = _loads(shardings, rows, [1] * len(rows), 2)
    assert abs(held[0] - held[1]) <= 10
    with pytest.raises(ValueError, match="3 lookup counts for 6 tables"):
        default_shardings(rows, 8, 2, lookups=[1, 2, 3])
