"""The pooled forward's launch plan (polyrec.kernels.tbe_forward_plan): every feature in exactly one
launch, one launch when the features agree or when splitting is not predicted to pay, groups when it
is; the forward itself in several launches is checked in test_tbe.py."""

from __future__ import annotations

import pytest

from polyrec.hardware.calibrate import save_calibration
from polyrec.hardware.catalog import get_device
from polyrec.kernels import tbe_forward_plan
from polyrec.kernels.tbe_forward_plan import plan_forward
from polyrec.kernels.tbe_select import ForwardConfig

SPEC = get_device("H200")
SHAPE = dict(batch_size=65536, block_d=128, row_bytes=512, vec=4)
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
    monkeypatch.setattr(tbe_forward_plan, "_seconds",
                        lambda spec, ceil, cfg, *, bag_lengths, **kw: seconds(cfg, bag_lengths))


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


#: MLPerf DLRM-DCNv2's rows per table (MLPerf Training recommendation_v2).
MLPERF_ROWS = [40000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 40000000, 3067956, 405282, 10, 2209, 11938,
               155, 4, 976, 14, 40000000, 40000000, 40000000, 590152, 12973, 108, 36]


@pytest.mark.parametrize("copy_rate", [None, 4.237e12])
def test_mlperf_short_bags_take_their_own_launch(copy_rate):
    """With the tables' rows (their least L2 reuse), the 26 MLPerf features on one GPU plan two launches:
    16 x 1 tiles for the one- and two-id bags and for short bags on tables that stay in L2, 4 x 4 for the
    others (measured against one 4 x 4 launch, fp32 rows: benchmarks/results/gather_rate_2026-12-01/
    forward_plan_ab_*); so do the 20 features the default world-2 placement gives rank 1 (1.546 -> 1.160
    ms with the constants of then, benchmarks/results/forward_model_2026-11-30). The same with the datasheet's
    copy rate and with the H200's measured one (benchmarks/results/calibrate_nvidia-h200_2026-11-29): until
    the forward priced each feature's bound in turn, a stored calibration made the plan one 4 x 4 launch.
    Rank 1's one 16 x 1 launch (what pricing each bag's whole output row plans) measured 1.02x / 1.10x
    slower than these two at the H200's measured copy rate, uniform / skewed ids
    (benchmarks/results/capture_forward_2026-12-05)."""
    if copy_rate is not None:
        save_calibration(SPEC.name, {"copy_bandwidth": copy_rate})
    shape = dict(block_d=128, row_bytes=512, vec=4)
    one_gpu = plan_forward(SPEC, batch_size=65536, bag_lengths=[float(h) for h in MLPERF_HOTS],
                           table_rows=MLPERF_ROWS, **shape)
    assert _covers_once(one_gpu, 26) and len(one_gpu) == 2
    by_config = {launch.config: launch.features for launch in one_gpu}
    assert all(f in by_config[ONE_HOT] for f, h in enumerate(MLPERF_HOTS) if h == 1)
    l2_rows = 50e6 / 512  # rows of 512 B in the H200's 50 MB L2
    assert all(MLPERF_HOTS[f] <= 2 or MLPERF_ROWS[f] < l2_rows for f in by_config[ONE_HOT])
    assert MLPERF_HOTS.index(100) in by_config[LONG]
    rank1 = [1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15, 19, 21, 22, 23, 24, 25]
    launches = plan_forward(SPEC, batch_size=131072, bag_lengths=[float(MLPERF_HOTS[t]) for t in rank1],
                            table_rows=[MLPERF_ROWS[t] for t in rank1], **shape)
    assert _covers_once(launches, len(rank1)) and len(launches) == 2
    by_config = {launch.config: [MLPERF_HOTS[rank1[f]] for f in launch.features] for launch in launches}
    assert 1 not in by_config[LONG] and 27 in by_config[LONG]


def test_groups_only_for_a_clear_gain(monkeypatch):
    """A split priced just under one launch (within GROUPING_MIN_GAIN) keeps one launch; a clear gain splits."""
    for gain, groups in ((0.03, 1), (0.2, 2)):
        _per_feature(monkeypatch, lambda cfg, lengths, gain=gain: (  # the split's launches, each 1 - gain of its share
            sum(lengths) * (1 - gain) if cfg == ONE_HOT or 1 not in lengths else sum(lengths)))
        assert len(plan_forward(SPEC, bag_lengths=[1, 6, 1, 100], **SHAPE)) == groups, gain


def test_table_rows_must_match_the_features():
    with pytest.raises(ValueError, match="2 table row counts for 3 features"):
        plan_forward(SPEC, bag_lengths=[1, 2, 3], table_rows=[10, 20], **SHAPE)
