"""The planner prices a module of mixed dims as it runs (``TableBatchedEmbedding.key_plan``): one update
launch per BLOCK_D group where ``tbe_select.groups_pay`` says so, each group's ids at its own BLOCK_D and
config, the merge over every launch's slots; one launch at the widest BLOCK_D otherwise."""

from __future__ import annotations

import math

import pytest

from polyrec.hardware.calibrate import ceilings
from polyrec.hardware.catalog import get_device
from polyrec.perfmodel import tbe, tbe_lookup
from polyrec.planner.shard_cost import ShardLoad, _estimate, dim_groups, tbe_group_seconds, update_config

SPEC = get_device("H200")
CEIL = ceilings(SPEC)


def _loads(accesses: float) -> tuple[ShardLoad, ...]:
    """Two 20M-row fp32 tables of dims 16 and 128, row-wise Adagrad, ``accesses`` ids each."""
    return tuple(ShardLoad(table=f"t{d}", rank=0, rows=20_000_000, dim=d, accesses=accesses, bags=65536,
                           weight_dtype="fp32", optimizer="rowwise_adagrad", memory="device", cache_rows=0,
                           skew="uniform") for d in (16, 128))


def _single_backward(loads: tuple[ShardLoad, ...]) -> float:
    fwd = [(tbe_lookup.ForwardTile(bags=1, hots=1, block_d=128, num_warps=1, vec=4, elem_bytes=4),
            (0, 1))]
    return _estimate(loads, loads, SPEC, CEIL, 2, fwd)[0].backward_s


def test_a_long_mixed_dims_update_is_priced_per_dim_group():
    loads = _loads(10_000_000)
    groups = dim_groups(loads, SPEC, CEIL, 2)
    assert [[s.dim for s in g] for g in groups] == [[16], [128]]
    fwd_s, bwd_s, sort_s, label = tbe_group_seconds(loads, SPEC, CEIL, 2)
    # the dim-16 ids no longer take the lanes of dim 128 (7.8% less since their 32 B rows cost
    # RANDOM_READ_MIN_BYTES each: both forms read them)
    assert bwd_s < 0.95 * _single_backward(loads)
    assert "update D16 lane" in label and " / D128 lane" in label
    small, wide = (update_config(g, SPEC, CEIL, 2, module=loads) for g in groups)
    assert small.tile > wide.tile  # the narrow group takes longer tiles, as the module selects them


def test_each_group_launch_pays_for_its_programs_over_the_other_groups_ids():
    """Every group's launch covers all the module's sorted positions (``tbe_fused_backward``): its programs over
    the other groups' ids each load two keys and exit (IDLE_PROGRAM_TRIPS round trips over the resident
    programs), which the grouped price adds to the groups' own; and one merge runs over every launch's slots
    (``slots_merge_seconds``) in place of a merge per group."""
    loads = _loads(10_000_000)
    groups = dim_groups(loads, SPEC, CEIL, 2)
    fwd = [(tbe_lookup.ForwardTile(bags=1, hots=1, block_d=128, num_warps=1, vec=4, elem_bytes=4), (0,))]
    parts = [_estimate(g, loads, SPEC, CEIL, 2, fwd) for g in groups]
    own = sum(est.backward_s - est.merge_s for est, _, _ in parts)
    idle = [tbe.idle_programs_seconds(shape, SPEC, programs=10_000_000 / cfg.span) for _, cfg, shape in parts]
    lat = tbe.LOADED_LATENCY_S[SPEC.vendor]
    for (_, cfg, shape), seconds in zip(parts, idle):
        assert seconds == 10_000_000 / cfg.span / tbe.update_resident(shape, SPEC) * tbe.IDLE_PROGRAM_TRIPS * lat
    launches = [tbe.MergeLaunch(programs=math.ceil(10_000_000 / cfg.span), grad_row_bytes=est.grad_row_bytes,
                                crossing=1 - est.unique_rows / 10_000_000) for est, cfg, _ in parts]
    merge = tbe.slots_merge_seconds(launches, programs=sum(math.ceil(20_000_000 / cfg.span) for _, cfg, _ in parts),
                                    spec=SPEC, ceil=CEIL, chunks=parts[-1][1].merge_chunks, rounded_block_d=128)
    assert tbe_group_seconds(loads, SPEC, CEIL, 2)[1] == pytest.approx(own + sum(idle) + merge, rel=1e-12)
    assert 0 < sum(idle) < 0.1 * own
    assert merge > 0


def test_one_merge_over_every_launchs_slots():
    """``slots_merge_seconds`` of one launch whose programs are all the slots' is ``merge_seconds``; slots of other
    launches' programs (empty) cost MERGE_IDLE_TILE_TRIPS per tile and count in the levels."""
    kw = dict(spec=SPEC, ceil=CEIL, chunks=1)
    one = tbe.MergeLaunch(programs=4096, crossing=0.3, grad_row_bytes=256)
    assert tbe.slots_merge_seconds([one], programs=4096, **kw) == pytest.approx(
        tbe.merge_seconds(nnz=4096 * 64, unique=0.7 * 4096 * 64, tile=64, grad_row_bytes=256, **kw), rel=1e-12)
    assert tbe.merge_seconds(nnz=4096 * 64, unique=0.7 * 4096 * 64, tile=64, grad_row_bytes=256, chunks=8,
                             spec=SPEC, ceil=CEIL) == pytest.approx(
        tbe.slots_merge_seconds([one], programs=4096, spec=SPEC, ceil=CEIL, chunks=8), rel=1e-12)
    with_idle = tbe.slots_merge_seconds([one], programs=4 * 4096, **kw)
    assert with_idle > tbe.slots_merge_seconds([one], programs=4096, **kw)


def test_a_short_one_is_priced_as_one_launch():
    loads = _loads(100_000)
    assert dim_groups(loads, SPEC, CEIL, 2) == [loads]
    assert tbe_group_seconds(loads, SPEC, CEIL, 2)[1] == _single_backward(loads)
    assert dim_groups(_loads(10_000_000), SPEC, CEIL, 2, host_bound=True) == [_loads(10_000_000)]


def test_the_host_counts_each_update_launch_and_the_merge_over_all_of_them():
    from polyrec.models.config import preset
    from polyrec.planner import parse_fleet
    from polyrec.planner.estimate import Estimator
    from polyrec.planner.shard_cost import module_nnz
    from polyrec.planner.types import model_spec_from_config

    est = Estimator(model_spec_from_config(preset("dcnv2-small")), parse_fleet("H200"))
    loads = _loads(10_000_000)
    small, wide = est.tbe_update_configs("H200", loads)
    one_launch = tbe.update_merge_levels(module_nnz(loads), wide.span, wide.merge_chunks)
    assert est.tbe_merge_levels("H200", loads) >= one_launch  # the narrow group's programs park slots too
    assert len(est.tbe_update_configs("H200", _loads(100_000))) == 1
