"""Statistics and measuring orders the benchmark scripts share."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
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
