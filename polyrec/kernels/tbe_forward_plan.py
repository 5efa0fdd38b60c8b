"""Which pooled-forward launches a batch gets: one over every feature, or one per group of features
that the forward model prices best under the same config.

One launch takes one tile for every feature, yet one-hot features and long bags want different ones
(HOTS wider than a bag masks lanes; narrower, the bag takes more dependent iterations). Each feature
is priced alone (``tbe_select.select_forward``), the features that pick the same config form a group,
and the groups are launched one after another when ``polyrec.perfmodel.tbe_lookup.forward_seconds`` says
their sum, plus a launch latency per extra launch, beats the best single launch by GROUPING_MIN_GAIN.
Measured on the H200
(benchmarks/results/tbe_forward_groups_nvidia-h200_2026-11-30, MLPerf tables, power-law ids, the best
config per group): world 1 1.15 -> 1.07 ms, world-2 rank 1 1.52 -> 1.21 ms, rank 0 0.98 -> 0.93 ms.
With each feature's table rows (the L2 reuse the model expects) the plan splits rank 1's features in
two launches (1.546 -> 1.160 ms, benchmarks/results/forward_model_2026-11-30) and, since the forward
model's refit of the twenty-sixth session, world 1's too: 16 x 1 for 20 features, 4 x 4 for 6 (fp32 rows:
1.870 -> 1.772 ms uniform ids, 1.182 -> 1.082 ms power-law, benchmarks/results/gather_rate_2026-12-01);
rank 0 keeps one launch. Since the twenty-seventh session's model (warps along HOTS) world 1's fp32 rows
take 16 x 1 for 15 features: 1.747 vs 1.746 ms against the 20 + 6 plan (forward_layout_2026-12-01).
"""

from __future__ import annotations

from dataclasses import dataclass

from polyrec.hardware.calibrate import ceilings
from polyrec.hardware.types import Ceilings, DeviceSpec
from polyrec.kernels.tbe_select import ForwardConfig, forward_config_seconds, remembered, select_forward
from polyrec.perfmodel.tbe_lookup import LoopTrips
from polyrec.perfmodel.tbe_reads import least_hit_fraction


#: Least fraction of the best single launch's predicted time that a plan of several launches must save.
#: With the forward model of the twenty-seventh session, on the committed H200 sweeps
#: (benchmarks/results/gather_rate_2026-12-01/, draws 101-103), five groupings priced at 0.984-0.996 of
#: one launch measured 1.02-1.09 of it; the MLPerf tables on one GPU, priced 0.918 (fp32 rows) and 0.867
#: (fp16), measured 0.946 / 0.917 and 0.961 / 0.942 (uniform / power-law ids, forward_layout_2026-12-01),
#: and world-2 rank 1, priced 0.872, measured 0.75 (forward_model_2026-11-30). Not a clean edge: the two
#: groupings of draws 105-106 (drawn after this was set) priced 0.858 and 0.936 measured 1.01 and 1.03.
GROUPING_MIN_GAIN = 0.05


@dataclass(frozen=True, kw_only=True, slots=True)
class ForwardLaunch:
    """One pooled-forward launch: positions in the module's list of pooled features, and its config."""

    features: tuple[int, ...]
    config: ForwardConfig


def _hit_fraction(spec: DeviceSpec, *, batch_size: int, bag_lengths: list[float], table_rows: list[int] | None,
                  row_bytes: int) -> float:
    """L2 hits of these features' row reads at the least reuse (none without their tables' rows)."""
    if table_rows is None:
        return 0.0
    return least_hit_fraction(table_rows, [batch_size * length for length in bag_lengths], row_bytes, spec)


def _seconds(spec: DeviceSpec, ceil: Ceilings, cfg: ForwardConfig, *, batch_size: int, bag_lengths: list[float],
             block_d: int, row_bytes: int, vec: int, table_rows: list[int] | None,
             loop_trips: LoopTrips | None) -> float:
    hit = _hit_fraction(spec, batch_size=batch_size, bag_lengths=bag_lengths, table_rows=table_rows,
                        row_bytes=row_bytes)
    return forward_config_seconds(spec, ceil, cfg, batch_size=batch_size, bag_lengths=bag_lengths,
                                  block_d=block_d, row_bytes=row_bytes, vec=vec, hit_fraction=hit,
                                  loop_trips=loop_trips)


def _select(spec: DeviceSpec, ceil: Ceilings, *, batch_size: int, bag_lengths: list[float], block_d: int,
            row_bytes: int, vec: int, table_rows: list[int] | None, loop_trips: LoopTrips | None) -> ForwardConfig:
    """``tbe_select.select_forward`` for these features, priced at their tables' least L2 reuse; without
    ``loop_trips`` (the planner's case, which asks for the same features once per candidate plan)
    remembered (``tbe_select.remembered``)."""
    lengths = list(bag_lengths)

    def select() -> ForwardConfig:
        hit = _hit_fraction(spec, batch_size=batch_size, bag_lengths=lengths, table_rows=table_rows,
                            row_bytes=row_bytes)
        return select_forward(spec, batch_size=batch_size, num_features=len(lengths),
                              mean_bag=sum(lengths) / max(len(lengths), 1), block_d=block_d, row_bytes=row_bytes,
                              vec=vec, bag_lengths=lengths, hit_fraction=hit, loop_trips=loop_trips, ceil=ceil)

    if loop_trips is not None:
        return select()
    rows = None if table_rows is None else tuple(table_rows)
    return remembered("forward", spec, ceil, (batch_size, tuple(lengths), block_d, row_bytes, vec, rows),
                      select)


def _trips_of(loop_trips: LoopTrips | None, features: list[int]) -> LoopTrips | None:
    """``loop_trips`` of a subset of the features (positions in the plan's feature list)."""
    if loop_trips is None:
        return None
    return {tile: [trips[f] for f in features] for tile, trips in loop_trips.items()}


def one_launch(spec: DeviceSpec, *, batch_size: int, bag_lengths: list[float], block_d: int,
               row_bytes: int, vec: int, table_rows: list[int] | None = None,
               loop_trips: LoopTrips | None = None, ceil: Ceilings | None = None) -> ForwardLaunch:
    """Every feature in one launch, with the config ``tbe_select.select_forward`` picks for them all.
    ``row_bytes``, ``vec``, ``ceil``: as ``select_forward``'s; ``table_rows``: rows of each feature's table (the
    L2 reuse the model expects; none without); ``loop_trips``: as ``select_forward``'s (per feature)."""
    cfg = _select(spec, ceil or ceilings(spec), batch_size=batch_size, bag_lengths=bag_lengths, block_d=block_d,
                  row_bytes=row_bytes, vec=vec, table_rows=table_rows, loop_trips=loop_trips)
    return ForwardLaunch(features=tuple(range(len(bag_lengths))), config=cfg)


def plan_forward(spec: DeviceSpec, *, batch_size: int, bag_lengths: list[float], block_d: int,
                 row_bytes: int, vec: int, table_rows: list[int] | None = None,
                 loop_trips: LoopTrips | None = None, ceil: Ceilings | None = None) -> list[ForwardLaunch]:
    """The launches of one pooled forward over features with these mean bag lengths (see the module
    docstring): every feature in exactly one launch. ``table_rows``, ``loop_trips``, ``ceil``: as
    ``one_launch``'s (the planner has neither per-batch fact and prices bags of their mean length; the module
    has both)."""
    if not bag_lengths:
        raise ValueError("plan_forward: no pooled features to plan")
    if table_rows is not None and len(table_rows) != len(bag_lengths):
        raise ValueError(f"plan_forward: {len(table_rows)} table row counts for {len(bag_lengths)} features")
    shape = dict(batch_size=batch_size, block_d=block_d, row_bytes=row_bytes, vec=vec)
    lengths = list(bag_lengths)
    ceil = ceil or ceilings(spec)

    def rows_of(features: list[int]) -> list[int] | None:
        return None if table_rows is None else [table_rows[f] for f in features]

    single = one_launch(spec, bag_lengths=lengths, table_rows=table_rows, loop_trips=loop_trips, ceil=ceil, **shape)
    groups: dict[ForwardConfig, list[int]] = {}
    for f, length in enumerate(lengths):
        cfg = _select(spec, ceil, bag_lengths=[length], table_rows=rows_of([f]), loop_trips=_trips_of(loop_trips, [f]),
                      **shape)
        groups.setdefault(cfg, []).append(f)
    if len(groups) == 1:
        return [single]
    grouped = [ForwardLaunch(features=tuple(fs), config=cfg) for cfg, fs in groups.items()]
    grouped_s = (sum(_seconds(spec, ceil, g.config, bag_lengths=[lengths[f] for f in g.features],
                              table_rows=rows_of(list(g.features)), loop_trips=_trips_of(loop_trips, list(g.features)),
                              **shape) for g in grouped)
                 + (len(grouped) - 1) * ceil.launch_latency.value)
    single_s = _seconds(spec, ceil, single.config, bag_lengths=lengths, table_rows=table_rows, loop_trips=loop_trips,
                        **shape)
    return grouped if grouped_s < (1.0 - GROUPING_MIN_GAIN) * single_s else [single]
