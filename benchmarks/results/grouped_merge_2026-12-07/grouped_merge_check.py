"""The merge of the modules ``tbe_device_times`` runs updated by a launch per dim group: the merge-level kernels'
time per step against the planner's price of one merge over every launch's slots
(``shard_cost._groups_merge_seconds``) and against the sum of a merge per group (each group's estimate's
``merge_s``, the form before 0fde132). Offline (CPU).

    PYTHONPATH=.:benchmarks python3 grouped_merge_check.py RESULTS.json [RESULTS.json ...]
"""

import json
import math
import sys

from merge_model_fit import CASES_PER_SEED, RUN_GRAD_BYTES
from sort_model_fit import device_ceilings, device_of
from tbe_groups_model_check import kernels_ms, shard_loads
from tbe_shapes import seed_cases

from polyrec.hardware.catalog import get_device
from polyrec.kernels import tbe_forward
from polyrec.perfmodel import tbe_lookup
from polyrec.planner import shard_cost

#: A forward tile for ``shard_cost._estimate`` (its forward is not used here).
FORWARD = [(tbe_lookup.ForwardTile(bags=1, hots=1, block_d=128, num_warps=1, vec=4, elem_bytes=4), (0,))]


def main() -> None:
    per_group, combined = [], []
    for path in sys.argv[1:]:
        run = json.load(open(path))
        device = device_of(run["environment"]["gpu"])
        spec, ceil = get_device(device), device_ceilings(device)
        for row in run["results"]["rows"]:
            loads = shard_loads(seed_cases(row["seed"], CASES_PER_SEED)[row["case"]])
            groups = shard_cost.dim_groups(loads, spec, ceil, RUN_GRAD_BYTES)
            if len(groups) < 2 or " / " not in row["update"]:
                continue
            parts = [shard_cost._estimate(g, loads, spec, ceil, RUN_GRAD_BYTES, FORWARD) for g in groups]
            ids, block_d = sum(s.accesses for s in loads), tbe_forward.block_d([s.dim for s in loads])
            one = shard_cost._groups_merge_seconds(groups, parts, ids, block_d, spec, ceil) * 1e3
            each = sum(est.merge_s for est, _, _ in parts) * 1e3
            measured = kernels_ms(row["kernels"], ("merge_level_kernel",))
            per_group.append(math.log(each / measured))
            combined.append(math.log(one / measured))
            print(f"{device} seed {row['seed']} case {row['case']}: merge measured {measured:.3f} ms, one merge "
                  f"{one:.3f}, a merge per group {each:.3f}")

    def stats(errors: list[float]) -> str:
        mean = sum(errors) / len(errors)
        return f"mean {mean:+.3f}, rms {math.sqrt(sum(e * e for e in errors) / len(errors)):.3f}"

    print(f"{len(combined)} grouped modules, log error of the price: one merge {stats(combined)}; "
          f"a merge per group {stats(per_group)}")


if __name__ == "__main__":
    main()
