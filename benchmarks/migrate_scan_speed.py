"""CPU benchmark: `polyrec migrate scan` over 100k generated lines (target: under 10 s).

Generates a tree of CUDA and Python files (half each) built from the labelled corpus snippets with
renamed identifiers, scans it once to warm up the parser, then times scans and writes
benchmarks/results/migrate_scan_speed_cpu_<date>.json. Runs in ~10-30 s on 2 cores; --quick: 10k lines.
--wide adds one .cu file per size holding a generated table on one line (``__constant__ float table[] =
{0.12345f, ...};``, 25k / 50k / 100k numbers, the last 1 MB), timed next to tree-sitter's parse of the same
bytes (the floor: no scan can skip parsing). Needs tree-sitter-cuda (requirements/dev.txt).
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from polyrec.migrate.scan import scan_paths
from polyrec.results import write_results

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "migrate_corpus" / "scan"
WIDE_NUMBERS = (25_000, 50_000, 100_000)  # numbers on the table's line; 10 bytes each ("0.12345f, ")
REPEATS = 3


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


def wide_source(numbers: int, seed: int) -> bytes:
    """A generated lookup table on one line, then a kernel reading it (one PM101 finding: ``% 32``)."""
    rng = random.Random(seed)
    table = ", ".join(f"{rng.random():.5f}f" for _ in range(numbers))
    return (f"__constant__ float table[] = {{{table}}};\n"
            "__global__ void lookup(float* out) { out[threadIdx.x] = table[threadIdx.x % 32]; }\n").encode()


def timed(fn: Callable[[], object]) -> list[float]:
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def tree_row(target: int) -> tuple[dict, list[float]]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        lines = generate(root, target)
        scan_paths([next(root.glob("*.cu"))])  # parser load, not timed
        results = []
        times = timed(lambda: results.append(scan_paths([root])))
    result = results[-1]
    assert result.complete and result.lines_scanned == lines
    median = statistics.median(times)
    return {"case": "tree", "lines": lines, "files": result.files_scanned, "findings": len(result.findings),
            "median_s": median, "min_s": min(times), "lines_per_s": lines / median, "target_s": 10.0,
            "meets_target": median < 10.0 * lines / 100_000}, times


def wide_row(numbers: int) -> tuple[dict, list[float]]:
    import tree_sitter
    import tree_sitter_cuda

    parser = tree_sitter.Parser(tree_sitter.Language(tree_sitter_cuda.language()))
    data = wide_source(numbers, seed=numbers)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "table.cu"
        path.write_bytes(data)
        results = []
        times = timed(lambda: results.append(scan_paths([path])))
    parse = statistics.median(timed(lambda: parser.parse(data)))
    assert results[-1].complete and [f.rule for f in results[-1].findings] == ["PM101"]
    median = statistics.median(times)
    return {"case": "wide", "lines": 2, "files": 1, "findings": 1, "median_s": median, "min_s": min(times),
            "numbers": numbers, "bytes": len(data), "parse_s": parse, "x_parse": median / parse}, times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="10k lines instead of 100k")
    parser.add_argument("--wide", action="store_true", help="also time one-line tables of 25k/50k/100k numbers")
    args = parser.parse_args()
    row, times = tree_row(10_000 if args.quick else 100_000)
    rows, payload = [row], {"times_s": times}
    summary = {"lines": row["lines"], "median_s": row["median_s"], "meets_target": row["meets_target"]}
    if args.wide:
        for numbers in WIDE_NUMBERS:
            wide, wide_times = wide_row(numbers)
            rows.append(wide)
            payload[f"wide_{numbers}_times_s"] = wide_times
        summary.update({"wide_bytes": rows[-1]["bytes"], "wide_median_s": rows[-1]["median_s"],
                        "wide_parse_s": rows[-1]["parse_s"]})
    write_results("migrate_scan_speed", payload, rows=rows, summary=summary)
    print(f"{'case':>5} {'lines':>7} {'numbers':>8} {'files':>6} {'findings':>9} {'median s':>9} {'parse s':>8}")
    for r in rows:
        parse = f"{r['parse_s']:>8.3f}" if "parse_s" in r else f"{'':>8}"
        print(f"{r['case']:>5} {r['lines']:>7} {r.get('numbers', ''):>8} {r['files']:>6} {r['findings']:>9} "
              f"{r['median_s']:>9.2f} {parse}")


if __name__ == "__main__":
    main()
