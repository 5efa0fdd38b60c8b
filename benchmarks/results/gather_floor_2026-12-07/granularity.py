"""The row-read floor by row size (``gather_rate --floor``) as the rate of bytes the reads touch, counted in 32 B
sectors and in 64 B units (``perfmodel.tbe_reads.gather_efficiency``), over the copy rate of the same run: the unit
under which rows of every size run at one rate is the one the device fetches. CPU only, nothing measured.

    PYTHONPATH=.:benchmarks python3 benchmarks/results/gather_floor_2026-12-07/granularity.py FILE
"""

import json
import sys
from pathlib import Path

from polyrec.perfmodel.tbe_reads import gather_efficiency


def main() -> None:
    run = json.loads(Path(sys.argv[1]).read_text())
    copy = run["summary"]["copy_tb_s"] * 1e12
    print(f"{run['environment']['gpu']}, copy {copy / 1e12:.2f} TB/s")
    print(" row B | useful/copy | touched 32 B: bytes, /copy | touched 64 B: bytes, /copy | G ids/s")
    for r in run["results"]["rows"]:
        if r["kind"] != "floor":
            continue
        rate = r["ids"] / (r["ms"] * 1e-3)
        cols = []
        for unit in (32, 64):
            touched = r["row_bytes"] / gather_efficiency(r["row_bytes"], unit)
            cols.append(f"{touched:6.0f} {rate * touched / copy:5.3f}")
        print(f"{r['row_bytes']:6d} | {r['of_copy']:11.3f} | {cols[0]:>25} | {cols[1]:>25} | {rate / 1e9:6.2f}")


if __name__ == "__main__":
    main()
