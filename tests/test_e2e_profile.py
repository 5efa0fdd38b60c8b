"""benchmarks/e2e_profile.py on the CPU (its profile needs a GPU): the results name says which data ran."""

from __future__ import annotations

from benchmark_util import load_benchmark

profile = load_benchmark("e2e_profile")


def test_the_results_name_marks_data_other_than_the_default():
    assert profile.data_suffix("synthetic") == ""
    assert profile.data_suffix("synthetic:uniform") == "_uniform"
    assert profile.data_suffix("criteo:/data/day_0.tsv") == "_criteo"
    assert profile.data_suffix("movielens:/x/ml-100k.inter") == "_movielens"
