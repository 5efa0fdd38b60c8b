"""The pooled forward's launch plan (polyrec.kernels.tbe_forward_plan): every feature in exactly one
launch, one launch when the features agree or when splitting is not predicted to pay, groups when it
is; the forward itself in several launches is checked in test_tbe.py."""

from __future__ import annotations

import pytest

from polyrec.hardware.catalog import get_device
from polyrec.kernels import tbe_forward_plan
from polyrec.kernels.tbe_forward_plan import plan_forward
from polyrec.kernels.tbe_select import ForwardConfig

SPEC = get_device("H200")
SHAPE = dict(batch_size=65536, block_d=128, row_bytes=512)
#: MLPerf DLRM-DCNv2's ids per bag per table (MLPerf Training recommendation_v2 multi-hot sizes).
MLPERF_HOTS = [3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1]
ONE_HOT, LONG = ForwardConfig(bags=16, hots=1, num_warps=2), ForwardConfig(bags=4, hots=4, num_warps=2)


def _covers_once(launches, n: int) -> bool:
    return sorted(f for launch in launches for f in launch.features) == list(range(n))


def test_every_feature_is_in_exactly_one_launch():
    launches = plan_forward(SPEC, bag_lengths=MLPERF_HOTS, **SHAPE)
    assert _covers_once(launches, len(MLPERF_HOTS))


def _per_feature(monkeypatch, seconds):
    """Features of length 1 pick ONE_HOT, the others LONG; a launch costs ``seconds(config, lengths)``."""
    monkeypatch.setattr(tbe_forward_plan, "select_forward", lambda spec, *, num_features, bag_lengths, **kw:
                        (ONE_HOT if bag_lengths == [1] else LONG) if num_features == 1 else LONG)
    monkeypatch.setattr(tbe_forward_plan, "_seconds", lambda spec, cfg, *, bag_lengths, **kw: seconds(cfg, bag_lengths))


def test_groups_when_their_sum_beats_one_launch(monkeypatch):
    """One-hot features under LONG cost 4 lanes per id (a stand-in price), under ONE_HOT one: the split pays."""
    _per_feature(monkeypatch, lambda cfg, lengths: sum(4 * l if (cfg == LONG and l == 1) else l for l in lengths))
    launches = plan_forward(SPEC, bag_lengths=[1, 6, 1, 100], **SHAPE)
    assert {launch.config: launch.features for launch in launches} == {ONE_HOT: (0, 2), LONG: (1, 3)}


def test_one_launch_when_splitting_does_not_pay(monkeypatch):
    _per_feature(monkeypatch, lambda cfg, lengths: sum(lengths))  # the same price either way: the extra launch loses
    launches = plan_forward(SPEC, bag_lengths=[1, 6, 1, 100], **SHAPE)
    assert len(launches) == 1 and launches[0].config == LONG and _covers_once(launches, 4)


def test_no_features_is_refused():
    with pytest.raises(ValueError, match="no pooled features"):
        plan_forward(SPEC, bag_lengths=[], **SHAPE)
