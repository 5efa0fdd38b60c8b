"""Offline (CPU): the planner's eager step for graphs_auto_check's configs on the H200 catalog entry,
and its host time without the dense launches (a first guess at the graphed step's host side), beside
the graphed / eager steps measured in ../graphs_auto_check_nvidia-h200_2026-12-01.json.

    PYTHONPATH=. python3 benchmarks/results/host_side_probes_2026-12-01/graphed_host_offline.py
"""
import json
from pathlib import Path

from polyrec.models import preset
from polyrec.planner import PlanConstraints, make_plan, model_spec_from_config, parse_fleet
from polyrec.planner.estimate import Estimator
from polyrec.planner.host import host_costs

here = Path(__file__).parent
measured = json.loads((here.parent / "graphs_auto_check_nvidia-h200_2026-12-01.json").read_text())["rows"]
for row in measured:
    spec = model_spec_from_config(preset(row["preset"]).with_capped_rows(4_000_000))
    fleet = parse_fleet("H200")
    plan = make_plan(spec, fleet, PlanConstraints(batch_per_gpu=row["batch"], weight_dtypes=("fp32",),
                                                  allow_host_cache=False, overlap="none"))
    dense = Estimator(spec, fleet, overlap="none").dense_seconds("H200", row["batch"])
    device = plan.step.total_ms - plan.step.host_excess_ms
    host_without_dense = plan.step.host_ms - 1e3 * dense.launches.seconds(host_costs("H200"))
    print(f"{row['preset']:20s} {row['batch']:6d}  eager: predicted max(host {plan.step.host_ms:.2f}, device "
          f"{device:.2f}) = {plan.step.total_ms:.2f}, measured {row['eager_ms']:.2f} | graphed: predicted "
          f"max({host_without_dense:.2f}, {device:.2f}) = {max(host_without_dense, device):.2f}, "
          f"measured {row['graphed_ms']:.2f}")
