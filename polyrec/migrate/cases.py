"""The inputs a candidate is checked on: the reference's ``SHAPES`` and shapes derived from them.

A port that is right only on the declared sizes (a grid of ``n // BLOCK`` instead of ``cdiv``, which
leaves the tail unwritten) passes on block-aligned ``SHAPES``, so every seed also runs shapes derived from
them, within the dims the reference declares:

- a dim is *free* where the declared shapes of its rank hold integers that disagree, and stays as declared
  where they all agree (a fixed head or embedding dim) or are not integers; free dims take sizes in
  [1, their largest declared size] (their range), and one size above it (the last item);
- per declared shape, the off-by-one neighbours: every free dim minus one and every free dim plus one
  (clamped to that range), which puts a ragged tail next to each aligned size;
- per rank, the size-1 case: every free dim 1;
- per rank and seed, one random shape: every free dim uniform in its range, drawn from ``random.Random(seed)``,
  so the same seed derives the same shapes (``--seed`` repeats a run) and a candidate cannot know them;
- per free dim, one size above its range (``above``): the first declared shape holding its largest size, with
  that dim one past the smallest power of two holding it (4096 -> 4097, 4097 -> 8193). A port right only up to
  some size (one program whose power-of-two block covers the largest declared size, a grid sized for the
  largest declared case) fails on it. One dim at a time, so each such case costs at most twice the declared
  shape it comes from (``above(n) <= 2 n``), where raising every free dim at once would cost up to 2^rank times.

``make_inputs`` may raise ValueError for a shape the op does not support: such a derived shape is left
out (a declared one is bad input).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

#: Cases per seed at most: each case's generator is seeded ``seed * CASES_PER_SEED + index``.
CASES_PER_SEED = 1000


@dataclass(frozen=True, kw_only=True, slots=True)
class Case:
    """One input tuple and where it came from (for the failure messages)."""

    shape: tuple[int, ...]
    seed: int
    derived: bool  # not in the reference's SHAPES
    inputs: tuple

    def label(self, index: int) -> str:
        kind = "derived shape" if self.derived else "shape"
        return f"case {index} ({kind} {self.shape}, seed {self.seed})"


def _is_size(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def free_dims(shapes: list[tuple[int, ...]]) -> dict[int, dict[int, int]]:
    """rank -> {free dim position -> its largest declared size}: where shapes of that rank hold differing integers."""
    by_rank: dict[int, list[tuple[int, ...]]] = {}
    for shape in shapes:
        by_rank.setdefault(len(shape), []).append(shape)
    return {rank: {d: max(s[d] for s in group) for d in range(rank)
                   if all(_is_size(s[d]) for s in group) and len({s[d] for s in group}) > 1}
            for rank, group in by_rank.items()}


def _resized(shape: tuple[int, ...], free: dict[int, int], sizes: dict[int, int]) -> tuple[int, ...]:
    """``shape`` with each free dim ``d`` set to ``sizes[d]`` clamped to [1, its largest declared size]."""
    return tuple(min(max(sizes[d], 1), free[d]) if d in free else n for d, n in enumerate(shape))


def derived_shapes(shapes: list[tuple[int, ...]], seed: int) -> list[tuple[int, ...]]:
    """The shapes derived from ``shapes`` for ``seed`` (module docstring), none of them declared, no repeats."""
    free = free_dims(shapes)
    rng = random.Random(seed)
    found = [_resized(s, free[len(s)], {d: s[d] + step for d in free[len(s)]}) for s in shapes for step in (-1, 1)]
    for rank, shape in {len(s): s for s in shapes}.items():  # any shape of the rank: its free dims are all set
        found.append(_resized(shape, free[rank], dict.fromkeys(free[rank], 1)))
        found.append(_resized(shape, free[rank], {d: rng.randint(1, top) for d, top in free[rank].items()}))
    found += _above_shapes(shapes, free)
    declared = set(shapes)
    return [s for s in dict.fromkeys(found) if s not in declared]


def above(top: int) -> int:
    """One past the smallest power of two >= ``top`` (4096 -> 4097, 4097 -> 8193, 70 -> 129): no block of a power
    of two that holds ``top`` in one program holds it. At most ``2 * top``."""
    return (1 << (top - 1).bit_length()) + 1


def _above_shapes(shapes: list[tuple[int, ...]], free: dict[int, dict[int, int]]) -> list[tuple[int, ...]]:
    """Per free dim, the first declared shape holding its largest size with that dim (only) set to ``above``."""
    found = []
    for rank, tops in free.items():
        for d, top in tops.items():
            shape = next(s for s in shapes if len(s) == rank and s[d] == top)
            found.append((*shape[:d], above(top), *shape[d + 1:]))
    return found


def make_cases(module: Any, seeds: tuple[int, ...]) -> list[Case]:
    """Per seed: the declared shapes, then the derived ones, each case from its own generator."""
    import torch

    declared = [tuple(s) for s in module.SHAPES]
    cases = []
    for seed in seeds:
        shapes = [*declared, *derived_shapes(declared, seed)]
        if len(shapes) > CASES_PER_SEED:
            raise ValueError(f"SHAPES: {len(declared)} shapes derive {len(shapes)} cases per seed, "
                             f"more than {CASES_PER_SEED}")
        for i, shape in enumerate(shapes):
            gen = torch.Generator().manual_seed(seed * CASES_PER_SEED + i)
            derived = i >= len(declared)
            try:
                inputs = tuple(module.make_inputs(shape, gen))
            except ValueError:
                if not derived:
                    raise
                continue  # the reference does not support this size
            cases.append(Case(shape=shape, seed=seed, derived=derived, inputs=inputs))
    return cases
