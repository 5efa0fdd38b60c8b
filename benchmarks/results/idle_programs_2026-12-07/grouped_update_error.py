"""Mean and rms log error (priced over measured) of the update phase of the modules with one update launch per dim
group, in ``tbe_groups_model_check`` files: each argument one set, its files joined by commas.

    python3 grouped_update_error.py NAME=FILE.json[,FILE.json ...] [NAME=...]
"""

import json
import math
import sys


def main() -> None:
    for arg in sys.argv[1:]:
        name, _, paths = arg.partition("=")
        errors = [math.log(row["update_predicted_ms"] / row["update_measured_ms"])
                  for path in paths.split(",") for row in json.load(open(path))["rows"] if row["planner_groups"]]
        mean = sum(errors) / len(errors)
        rms = math.sqrt(sum(e * e for e in errors) / len(errors))
        print(f"{name:18s} {len(errors):3d} grouped modules: mean {mean:+.3f}, rms {rms:.3f}")


if __name__ == "__main__":
    main()
