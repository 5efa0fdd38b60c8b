"""Statistics and measuring orders the benchmark scripts share."""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def kendall_tau(x: list[float], y: list[float]) -> float:
    """Kendall's tau-b of two paired lists (ties in either list are accounted for; NaN if all tie)."""
    concordant = discordant = ties_x = ties_y = 0
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            dx, dy = x[i] - x[j], y[i] - y[j]
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                ties_x += 1
            elif dy == 0:
                ties_y += 1
            elif (dx > 0) == (dy > 0):
                concordant += 1
            else:
                discordant += 1
    denom = math.sqrt((concordant + discordant + ties_x) * (concordant + discordant + ties_y))
    return (concordant - discordant) / denom if denom else float("nan")


def rotated(variants: Sequence[T], round_: int) -> list[T]:
    """``variants`` in round ``round_``'s order: each round starts one later, so that no variant always runs
    first (or right after the same neighbour) in a process whose speed drifts."""
    shift = round_ % len(variants) if variants else 0
    return [*variants[shift:], *variants[:shift]]


def median_where(rows: list[dict[str, Any]], key: str, **match: Any) -> float | None:
    """Median of ``key`` over the rows whose fields equal every ``match``; rows without ``key`` (a failed
    measurement carries an ``error`` instead) are left out; None when no row has it."""
    values = [r[key] for r in rows if key in r and all(r.get(k) == v for k, v in match.items())]
    return statistics.median(values) if values else None


def case_rounds(base: Any, cases: Sequence[tuple[str, dict[str, Any]]], variants: Sequence[str], rounds: int,
                measure: Callable[[Any, str, str], dict[str, Any]]) -> list[dict[str, Any]]:
    """Each case (label, changes to the dataclass ``base``) measured in each variant once per round, the
    variants in ``rotated`` order: rows {"case", "variant", "round", **measure(config, variant, label)},
    each printed with its ms per step and dense phase as it comes."""
    widths = max(len(label) for label, _ in cases), max(len(v) for v in variants)
    rows = []
    for round_ in range(rounds):
        for label, changes in cases:
            cfg = dataclasses.replace(base, **changes)
            for variant in rotated(variants, round_):
                row = measure(cfg, variant, label)
                rows.append({"case": label, "variant": variant, "round": round_, **row})
                print(f"{label:<{widths[0]}} {variant:<{widths[1]}} {row.get('ms_per_step', math.nan):8.2f} ms "
                      f"(dense {row.get('dense_ms', math.nan):6.2f})  {row.get('error', '')}", flush=True)
    return rows
