"""benchmarks/module_forward_check.py: the table sets it times, and the planner's price beside each."""

from __future__ import annotations

import pytest

from benchmark_util import load_benchmark
from polyrec.hardware.catalog import get_device
from polyrec.models.config import preset


@pytest.fixture(scope="module")
def check():
    return load_benchmark("module_forward_check")


def test_the_plan_modules_split_the_tables_and_the_fp32_one_splits_by_size(check):
    rows = preset("mlperf-dcnv2").table_rows
    sets = {name: (tables, dtype) for name, tables, dtype in check.cases(rows)}
    fp16, fp32 = sets["plan's fp16 module"][0], sets["plan's fp32 module"][0]
    assert sorted(fp16 + fp32) == list(range(len(rows)))
    small, large = sets["fp32 module, small tables"][0], sets["fp32 module, large tables"][0]
    assert sorted(small + large) == fp32
    assert all(rows[t] <= check.LARGE_ROWS for t in small) and all(rows[t] > check.LARGE_ROWS for t in large)
    assert sets["every table, bf16"] == (list(range(len(rows))), "bf16")
    tiny, mid = sets["fp32 module, tiny tables"][0], sets["fp32 module, mid tables"][0]
    assert sorted(tiny + mid) == sorted(small) and tiny and mid
    assert max(rows[t] for t in tiny) <= check.TINY_ROWS < min(rows[t] for t in mid)
    assert sets["fp32 module's mid tables, bf16"] == (mid, "bf16")


def test_small_tables_are_priced_with_more_l2_hits_than_large_ones(check):
    config = preset("mlperf-dcnv2")
    priced = {}
    for name, tables, dtype in check.cases(config.table_rows):
        priced[name] = check.predicted([config.table_rows[t] for t in tables], [config.multi_hot[t] for t in tables],
                                       dtype, 65536, get_device("H100"))
    assert priced["fp32 module, small tables"][1] > 0.5 > priced["fp32 module, large tables"][1]
    assert all(ms > 0 for ms, _ in priced.values())
