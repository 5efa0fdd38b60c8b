"""Two kernel tables side by side (``e2e_profile.py`` results files): each kernel's milliseconds per step
in both and the difference, largest difference first; the totals last.

    python3 benchmarks/profile_diff.py A.json B.json [--top 30]
"""

from __future__ import annotations

import argparse
import json


def per_kernel(path: str) -> dict[str, tuple[float, float]]:
    """kernel name -> (calls per step, ms per step) of one results file's full table."""
    rows = json.load(open(path))["results"]["rows"]
    return {r["kernel"]: (r["calls_per_step"], r["ms_per_step"]) for r in rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    a, b = per_kernel(args.a), per_kernel(args.b)
    rows = [(name, a.get(name, (0, 0.0)), b.get(name, (0, 0.0))) for name in a.keys() | b.keys()]
    rows.sort(key=lambda r: -abs(r[2][1] - r[1][1]))
    print(f"{'A ms':>8} {'calls':>6} {'B ms':>8} {'calls':>6} {'B-A':>8}  kernel")
    for name, (ca, ma), (cb, mb) in rows[:args.top]:
        print(f"{ma:8.3f} {ca:6.0f} {mb:8.3f} {cb:6.0f} {mb - ma:+8.3f}  {name[:90]}")
    ta, tb = sum(m for _, m in a.values()), sum(m for _, m in b.values())
    print(f"{ta:8.3f} {'':6} {tb:8.3f} {'':6} {tb - ta:+8.3f}  total")


if __name__ == "__main__":
    main()
