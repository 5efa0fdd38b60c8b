"""Signed mean log error (priced over measured) of the update phase of ``tbe_groups_model_check`` rows, by row dtype
and by whether the module has one dim, one update launch of several dims, or a launch per dim group.

    python3 phase_by_dtype.py FILE.json [FILE.json ...]
"""

import collections
import json
import math
import sys


def kind(row: dict) -> str:
    if len(set(row["dims"].split("/"))) == 1:
        return "one dim"
    return "dim groups" if row["planner_groups"] else "mixed, one launch"


def main() -> None:
    errors = collections.defaultdict(list)
    for path in sys.argv[1:]:
        for row in json.load(open(path))["rows"]:
            errors[(row["dtype"], kind(row))].append(math.log(row["update_predicted_ms"] / row["update_measured_ms"]))
    for (dtype, what), values in sorted(errors.items()):
        print(f"{dtype} {what:18s} {len(values):3d} modules, mean {sum(values) / len(values):+.3f}")


if __name__ == "__main__":
    main()
