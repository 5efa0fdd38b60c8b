"""benchmarks/gather_rate.py: the timer-floor kernel (interpreter), and its new rows left out of the forward fit's
cases, which take the run's measured floor."""

from __future__ import annotations

import argparse
import json

import pytest
import torch

from benchmark_util import load_benchmark

gather = load_benchmark("gather_rate")
fit = load_benchmark("forward_model_fit")


def test_the_timer_floor_kernel_stores_one_zero_per_program():
    sink = torch.full((3,), 7.0)
    gather.timer_floor_kernel[(2,)](sink)
    assert sink.tolist() == [0.0, 0.0, 7.0]


def test_a_run_with_timer_checks_gives_the_fit_its_lookups_priced_with_the_checks_timer(tmp_path):
    """The fit takes the lookup rows alone as cases, each priced with the timer_check rows' timer (the lookups' own
    launch path), not the summary's one-program floor."""
    path = fit.RESULTS / "h100_forward_2026-12-07" / "gather_rate_draw108_nvidia-h100-80gb-hbm3_2026-12-07.json"
    run = json.loads(path.read_text())
    lookups = sum(r["kind"] == "lookup" for r in run["results"]["rows"])
    run["results"]["rows"].append({"kind": "timer_check", "dim": 8, "batch": 8192, "bags": [2], "timed_ms": 0.012,
                                   "kernels_ms": 0.005, "timer_ms": 0.007})
    run["summary"]["timer_floor_ms"] = 0.006
    newer = tmp_path / path.name
    newer.write_text(json.dumps(run))
    cases = fit.gather_cases(newer)
    assert len(cases) == lookups and {c.timer_floor_ms for c in cases} == {0.007}


def test_the_floor_kernel_sums_rows_of_a_size_between_powers_of_two_and_writes_nothing_past_them():
    """Rows of 5 fp32 elements read as 8 lanes (3 masked off): each program's sum of its ids' rows, duplicates and a
    tail program with fewer ids than a tile included, against torch; the row past each program's stays poisoned."""
    row, ids_per_iter, iters = 5, 4, 2
    table = torch.randn(13 * row, dtype=torch.float32)
    ids = torch.tensor([3, 3, 0, 12, 7, 1, 1, 9, 4, 11, 2], dtype=torch.int64)
    programs = -(-ids.numel() // (ids_per_iter * iters))
    out = torch.full((programs + 1, row), float("nan"))
    gather.gather_sum_kernel[(programs,)](table, ids, out, ids.numel(), ROW=row, BLOCK=8, IDS=ids_per_iter,
                                          ITERS=iters)
    rows = table.view(13, row)
    for p in range(programs):
        mine = ids[p * ids_per_iter * iters:(p + 1) * ids_per_iter * iters]
        torch.testing.assert_close(out[p], rows[mine].sum(0))
    assert out[programs].isnan().all()


def test_two_runs_at_once_are_refused(monkeypatch, capsys):
    """--quick, --draw and --floor each choose a different set to measure: any two together are refused."""
    for pair in (["--floor", "--quick"], ["--floor", "--draw", "5"], ["--quick", "--draw", "5"]):
        monkeypatch.setattr("sys.argv", ["gather_rate.py", *pair])
        with pytest.raises(SystemExit) as raised:
            gather.main()
        assert raised.value.code == 2
        assert "not allowed with argument" in capsys.readouterr().err


def test_each_mode_measures_its_own_set():
    """--floor: every row size, ascending, and no lookup; --draw: its seed's lookups alone, the same each time; the
    default: the floor at the powers of two and the fixed lookups."""
    def mode(**kw):
        return argparse.Namespace(**({"quick": False, "draw": None, "floor": False, "cases": 3} | kw))

    sizes, lookups = gather.measured_set(mode(floor=True))
    assert sizes == tuple(sorted(gather.ROW_BYTES + gather.BETWEEN_ROW_BYTES)) and len(sizes) == 16 and lookups == ()
    sizes, lookups = gather.measured_set(mode(draw=7))
    assert sizes == () and len(lookups) == 3 and lookups == gather.measured_set(mode(draw=7))[1]
    assert gather.measured_set(mode()) == (gather.ROW_BYTES, gather.LOOKUPS)
