"""benchmarks/profiling.py: each launch of a step kept apart, by its place among the step's launches of its kernel."""

from __future__ import annotations

import pytest

from benchmark_util import load_benchmark


@pytest.fixture(scope="module")
def profiling():
    return load_benchmark("profiling")


def test_launches_are_averaged_by_their_place_in_the_step(profiling):
    # two steps, each: lane (group 0), lane (group 1), merge, merge; listed out of order, one other kernel between
    launches = [("lane", 110.0, 40.0), ("lane", 0.0, 10.0), ("merge", 30.0, 2.0), ("lane", 10.0, 30.0),
                ("merge", 32.0, 4.0), ("sort", 5.0, 99.0), ("lane", 100.0, 12.0), ("merge", 150.0, 6.0),
                ("merge", 156.0, 8.0)]
    calls = profiling.calls_in_order(launches, ("lane", "merge"), reps=2)
    assert calls == {"lane": pytest.approx([0.011, 0.035]), "merge": pytest.approx([0.004, 0.006])}


def test_a_kernel_launched_unevenly_over_the_steps_gets_no_places(profiling):
    """Three launches over two steps (a merge of one level more in one step) cannot be lined up: None, not a guess."""
    launches = [("lane", 0.0, 1.0), ("lane", 1.0, 1.0), ("lane", 2.0, 1.0), ("merge", 3.0, 1.0), ("merge", 4.0, 3.0)]
    assert profiling.calls_in_order(launches, ("lane", "merge"), reps=2) == {"lane": None, "merge": [0.002]}
