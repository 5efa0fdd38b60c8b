"""Each ``update_floor`` case's rate counted in the bytes its accesses touch, in 32 B sectors and in 64 B units, over
the copy rate of the same run: if sorted rows written back fetch whole 64 B units, rows between powers of two (dim
40: 160 B, dim 56: 224 B) run at their neighbours' fraction only when counted in 64 B units. CPU only, nothing
measured; cases of the separate state layout only. Touched bytes are counted on a smaller table of the run's density
(distinct units of the sorted rows and of their row-wise state; one gradient slice per visit, each slice's units
apart).

    PYTHONPATH=. python3 benchmarks/update_units.py FILE...
"""

import json
import sys
from pathlib import Path

import numpy as np

from polyrec.perfmodel.tbe_reads import gather_efficiency

#: Rows of the smaller table the touched units are counted on (the run's fraction of distinct rows kept).
SAMPLE_ROWS = 4_000_000
GRAD_BYTES = {"float32": 4, "bfloat16": 2}


def distinct_units(starts: np.ndarray, nbytes: int, unit: int) -> int:
    """Distinct ``unit``-byte units touched by accesses of ``nbytes`` bytes at byte offsets ``starts``."""
    first, last = starts // unit, (starts + nbytes - 1) // unit
    spans = [first + k for k in range(int((last - first).max()) + 1)]
    return int(np.unique(np.concatenate([s[s <= last] for s in spans])).size)


def touched_per_visit(rows: int, unique: int, dim: int, unit: int) -> tuple[float, float]:
    """Bytes touched per visited row: (its fp32 row, its fp32 state in an array of its own), counted over a table of
    SAMPLE_ROWS rows at the run's density, each distinct unit once."""
    n = min(rows, SAMPLE_ROWS)
    k = max(1, round(unique * n / rows))
    chosen = np.sort(np.random.default_rng(0).choice(n, size=k, replace=False))
    row = distinct_units(chosen * 4 * dim, 4 * dim, unit) * unit / k
    state = distinct_units(chosen * 4, 4, unit) * unit / k
    return row, state


def case_touched(mode: str, grad_dtype: str, dim: int, per_row: tuple[float, float], unit: int) -> float:
    """Bytes one case touches per visit: rows (and state) read, written back where the mode writes, and a
    gradient slice per visit in the update."""
    row, state = per_row
    if mode == "read":
        return row
    slice_bytes = GRAD_BYTES[grad_dtype] * dim
    grad = slice_bytes / gather_efficiency(slice_bytes, unit) if mode == "update" else 0.0
    return 2 * (row + state) + grad


def report(path: Path) -> None:
    run = json.loads(path.read_text())
    s = run["summary"]
    rows, unique, dim, copy = s["rows"], s["unique"], s["dim"], s["copy_TBps"] * 1e12
    per_unit = {unit: touched_per_visit(rows, unique, dim, unit) for unit in (32, 64)}
    print(f"{path.name}: {run['environment']['gpu']}, dim {dim}, {unique} of {rows} rows, copy {copy / 1e12:.3f} TB/s")
    print(f"  touched per visit, row / state: 32 B {per_unit[32][0]:.1f} / {per_unit[32][1]:.1f}, "
          f"64 B {per_unit[64][0]:.1f} / {per_unit[64][1]:.1f} (row {4 * dim} B)")
    print("  case                               | ms     | counted/copy | 32 B/copy | 64 B/copy")
    for key, best in s.items():
        if not key.endswith("_best"):
            continue
        mode, grad, _order, *layout = key[:-5].split("_")
        if layout:  # the state kept elsewhere than its own array: its units are not counted here
            continue
        seconds = best["ms"] * 1e-3
        fracs = [unique * case_touched(mode, grad, dim, per_unit[unit], unit) / seconds / copy for unit in (32, 64)]
        print(f"  {key[:-5]:34} | {best['ms']:6.3f} | {best['frac_of_copy']:12.3f} | {fracs[0]:9.3f} | {fracs[1]:9.3f}")


def main() -> None:
    for name in sys.argv[1:]:
        report(Path(name))


if __name__ == "__main__":
    main()
