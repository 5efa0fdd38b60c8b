"""benchmarks/gather_rate.py: the timer-floor kernel (interpreter), and its new rows left out of the forward fit's
cases, which take the run's measured floor."""

from __future__ import annotations

import json

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
