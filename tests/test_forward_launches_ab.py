"""benchmarks/forward_launches_ab.py: the launch plans it reads."""

from __future__ import annotations

import pytest

from benchmark_util import load_benchmark


@pytest.fixture(scope="module")
def ab():
    return load_benchmark("forward_launches_ab")


def test_a_plan_reads_its_launches_and_features(ab):
    name, launches = ab.parse_plan("old=4x4w2:0,2;16x1w4:1,3", 4)
    assert name == "old"
    assert [(c.bags, c.hots, c.num_warps, ids) for c, ids in launches] == [(4, 4, 2, [0, 2]), (16, 1, 4, [1, 3])]
    assert ab.parse_plan("new=8x4w2:all", 3)[1][0][1] == [0, 1, 2]


@pytest.mark.parametrize("text", ["4x4w2:all", "x=4x4:all", "x=4x4w2:0,1", "x=4x4w2:0,1,1,2", "x=4x4w2:all;4x4w2:0"])
def test_a_plan_that_is_malformed_or_misses_a_feature_is_refused(ab, text):
    with pytest.raises(SystemExit):
        ab.parse_plan(text, 3)
