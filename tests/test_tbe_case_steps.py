"""benchmarks/tbe_case_steps.py: a case index outside the seed's draw is refused, naming the range, before any device
work."""

from __future__ import annotations

import sys

import pytest

from benchmark_util import load_benchmark


def test_a_case_outside_the_draw_is_named(monkeypatch, capsys):
    steps = load_benchmark("tbe_case_steps")
    monkeypatch.setattr(sys, "argv", ["tbe_case_steps.py", "--seed", "55", "--case", "16"])
    with pytest.raises(SystemExit):
        steps.main()
    assert "--case 16: seed 55 draws cases 0-15" in capsys.readouterr().err
