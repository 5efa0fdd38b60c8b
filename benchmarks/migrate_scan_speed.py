"""CPU benchmark: `polyrec migrate scan` over 100k generated lines (target: under 10 s).

Generates a tree of CUDA and Python files (half each) built from the labelled corpus snippets with
renamed identifiers, scans it once to warm up the parser, then times scans and writes
benchmarks/results/migrate_scan_speed_cpu_<date>.json. Runs in ~10-30 s on 2 cores; --quick: 10k lines.
Needs tree-sitter-cuda (requirements/dev.txt).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from polyrec.migrate.scan import scan_paths
from polyrec.results import write_results

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "migrate_corpus" / "scan"


def generate(root: Path, total_lines: int) -> int:
    """Write files until ``total_lines`` lines exist; return the line count written."""
    snippets = [p for p in sorted(CORPUS.iterdir()) if p.suffix in (".cu", ".cuh", ".py")]
    written, i = 0, 0
    while written < total_lines:
        src = snippets[i % len(snippets)]
        text = src.read_text().replace("warp_reduce", f"warp_reduce_{i}").replace("def step", f"def step_{i}")
        body = "\n".join(text for _ in range(20))
        (root / f"f{i:05d}{src.suffix}").write_text(body + "\n")
        written += body.count("\n") + 1
        i += 1
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="10k lines instead of 100k")
    args = parser.parse_args()
    target = 10_000 if args.quick else 100_000
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        lines = generate(root, target)
        scan_paths([next(root.glob("*.cu"))])  # parser load, not timed
        times, result = [], None
        for _ in range(3):
            start = time.perf_counter()
            result = scan_paths([root])
            times.append(time.perf_counter() - start)
    assert result is not None and result.complete and result.lines_scanned == lines
    median = statistics.median(times)
    rows = [{"lines": lines, "files": result.files_scanned, "findings": len(result.findings),
             "median_s": median, "min_s": min(times), "lines_per_s": lines / median, "target_s": 10.0,
             "meets_target": median < 10.0 * lines / 100_000}]
    write_results("migrate_scan_speed", {"times_s": times}, rows=rows,
                  summary={"lines": lines, "median_s": median, "meets_target": rows[0]["meets_target"]})
    print(f"{'lines':>8} {'files':>6} {'findings':>9} {'median s':>9} {'lines/s':>10}")
    print(f"{lines:>8} {result.files_scanned:>6} {len(result.findings):>9} {median:>9.2f} {lines / median:>10.0f}")


if __name__ == "__main__":
    main()
