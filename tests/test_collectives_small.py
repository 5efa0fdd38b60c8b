"""The small-message floor of the collectives: its fit from calibration samples, the time model
below and above it, and the link a stored calibration gives the planner."""

from __future__ import annotations

import math

import pytest

from polyrec.hardware.calibrate import save_calibration
from polyrec.perfmodel.collectives import Link, SmallMessages, all_reduce_time, all_to_all_time
from polyrec.planner.comms import (SMALL_TOLERANCE, CollectiveSample, fit_small_messages, fleet_links,
                                   link_calibration_name, link_origins)
from polyrec.planner.types import parse_fleet

KIB, MIB = 1 << 10, 1 << 20
SIZES = [96 * KIB << k for k in range(8)]  # 96 KiB .. 12 MiB


def _samples(kind: str, times_us: list[float]) -> list[CollectiveSample]:
    return [CollectiveSample(collective=kind, nbytes=n, seconds=t * 1e-6) for n, t in zip(SIZES, times_us)]


def test_the_floor_ends_between_the_last_flat_size_and_the_first_beyond_it():
    """An all-reduce flat at ~50 us to 1.5 MiB, then 66 us at 3 MiB (as on 2 H200s); another
    collective's samples do not count."""
    reduce = _samples("all_reduce", [50.0, 51.0, 51.0, 51.5, 52.0, 66.0, 75.0, 95.0])
    other = _samples("all_to_all", [10.0] * 8)
    fit = fit_small_messages(reduce + other, "all_reduce")
    assert fit["floor_s"] == pytest.approx(50.5e-6)
    assert fit["up_to_bytes"] == pytest.approx(math.sqrt(1.5 * MIB * 3 * MIB))
    assert 2 * MIB < fit["up_to_bytes"] < 3 * MIB


def test_a_floor_the_samples_never_leave_reaches_the_largest_and_too_few_give_none():
    flat = _samples("all_to_all", [50.0 * (1 + 0.9 * SMALL_TOLERANCE)] * 8)
    assert fit_small_messages(flat, "all_to_all")["up_to_bytes"] == SIZES[-1]
    assert fit_small_messages(flat[:2], "all_to_all") is None
    assert fit_small_messages(flat, "all_reduce") is None


def test_calls_below_the_floor_size_cost_the_floor_and_above_it_the_alpha_beta_terms():
    small = SmallMessages(floor_s=50e-6, up_to_bytes=2 * MIB, ranks=2)
    plain = Link(name="nvlink", alpha_s=4e-6, bandwidth=3e11, topology="switch", overhead_s=40e-6)
    link = Link(name="nvlink", alpha_s=4e-6, bandwidth=3e11, topology="switch", overhead_s=40e-6,
                all_reduce_small=small, all_to_all_small=small)
    assert all_reduce_time(1 * MIB, 2, link) == pytest.approx(50e-6)
    assert all_to_all_time(1 * MIB, 2, link) == pytest.approx(50e-6)
    for n in (2 * MIB, 16 * MIB):  # from the floor's end on, as without it
        assert all_reduce_time(n, 2, link) == all_reduce_time(n, 2, plain)
        assert all_to_all_time(n, 2, link) == all_to_all_time(n, 2, plain)
    # 4 ranks: the ring all-reduce has 2 x 3 steps against 2 x 1 on the calibration's 2, the all-to-all 3 against 1
    assert all_reduce_time(1 * MIB, 4, link) == pytest.approx(50e-6 + 4 * 4e-6)
    assert all_to_all_time(1 * MIB, 4, link) == pytest.approx(50e-6 + 2 * 4e-6)
    # a floor under the alpha-beta fit's per-call overhead (its intercept through the large sizes) holds
    high = Link(name="nvlink", alpha_s=0.0, bandwidth=3e11, topology="switch", overhead_s=90e-6,
                all_reduce_small=small)
    assert all_reduce_time(1 * MIB, 2, high) == pytest.approx(50e-6)


def test_a_stored_link_calibration_carries_its_floors_into_the_planner():
    save_calibration(link_calibration_name("H200", "nvlink"), {
        "overhead_s": 40e-6, "alpha_s": 5e-6, "bandwidth": 2.9e11, "ranks": 2, "date": "2026-11-30", "method": "test",
        "small": {"all_reduce": {"floor_s": 51e-6, "up_to_bytes": 2.1 * MIB}}})
    link = fleet_links(parse_fleet("H200x2")).intra
    assert link.all_reduce_small == SmallMessages(floor_s=51e-6, up_to_bytes=2.1 * MIB, ranks=2)
    assert link.all_to_all_small is None
    assert all_reduce_time(1 * MIB, 2, link) == pytest.approx(51e-6)
    assert all_reduce_time(4 * MIB, 2, link) == pytest.approx(40e-6 + 2 * 5e-6 + 4 * MIB / 2.9e11)
    origins = link_origins(fleet_links(parse_fleet("H200x2")))
    assert origins["link.nvlink.all_reduce_small"].startswith("calibrated: 51 us per call below 2.10 MiB on 2 GPUs")
    assert "link.nvlink.all_to_all_small" not in origins
