"""CUDA scan of generated tables (one initializer line of many numbers): work that does not grow with the table.

Each run of a tree-sitter query walks the whole tree, so a 1 MB table line (200k nodes) cost one walk per query:
the scan walks each parsed tree once (one query holding every pattern), and no pattern matches a number in a table.
"""

from __future__ import annotations

import pytest

from polyrec.migrate.scan_cuda import scan_cuda

tree_sitter = pytest.importorskip("tree_sitter")
pytest.importorskip("tree_sitter_cuda")


def table_source(numbers: int) -> bytes:
    table = ", ".join(f"{i / numbers:.5f}f" for i in range(numbers))
    return (f"#define WARP_SIZE 32\n#define LANE() (threadIdx.x % 32)\n__constant__ float table[] = {{{table}}};\n"
            "__global__ void lookup(float* out) { out[threadIdx.x] = table[threadIdx.x % 32]; }\n").encode()


@pytest.fixture
def query_runs(monkeypatch):
    """Every query cursor run during the test: (number of matches it returned) per run."""
    runs: list[int] = []
    real = tree_sitter.QueryCursor

    class Counting:
        def __init__(self, query):
            self.cursor = real(query)

        def matches(self, node):
            found = self.cursor.matches(node)
            runs.append(len(found))
            return found

    monkeypatch.setattr(tree_sitter, "QueryCursor", Counting)
    return runs


def test_each_parsed_tree_is_queried_once(query_runs):
    findings = scan_cuda("table.cu", table_source(1000))
    assert sorted((f.line, f.rule) for f in findings) == [(1, "PM101"), (2, "PM101"), (4, "PM101")]
    # the file, then the body of LANE (WARP_SIZE is a constant, not scanned as code)
    assert len(query_runs) == 2


def test_query_matches_do_not_grow_with_the_table(query_runs):
    scan_cuda("small.cu", table_source(10))
    small = list(query_runs)
    query_runs.clear()
    scan_cuda("large.cu", table_source(10_000))
    assert query_runs == small
