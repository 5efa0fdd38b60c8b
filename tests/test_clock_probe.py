"""benchmarks/clock_probe.py: nvidia-smi's samples read, and a line that is not two numbers named."""

from __future__ import annotations

import pytest

from benchmark_util import load_benchmark


@pytest.fixture(scope="module")
def probe():
    return load_benchmark("clock_probe")


def test_samples_are_read_after_the_start_up_lines(probe):
    out = "1410, 80.5\n1980, 300.25\n1755, 512.00\n"
    assert probe.samples_of(out, skip=1) == [(1980.0, 300.25), (1755.0, 512.0)]


@pytest.mark.parametrize("line", ["1980, [N/A]", "1980", "1980, 300, 1"])
def test_a_line_not_clock_and_power_is_named(probe, line):
    with pytest.raises(SystemExit, match="line 2 is not 'clock, power'"):
        probe.samples_of(f"1980, 300\n{line}\n", skip=0)


def test_no_samples_left_is_an_error(probe):
    with pytest.raises(SystemExit, match="no samples after its first 2 lines"):
        probe.samples_of("1980, 300\n1980, 301\n", skip=2)


def test_a_line_cut_off_by_the_stopped_sampler_is_left_out(probe):
    assert probe.samples_of("1980, 300\n1980, 301\n19", skip=0) == [(1980.0, 300.0), (1980.0, 301.0)]
