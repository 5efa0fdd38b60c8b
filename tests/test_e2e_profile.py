"""benchmarks/e2e_profile.py on the CPU (its profile needs a GPU): the results name says which data ran; the
two scripts that read or A/B its kind of run: profile_diff.py, graphs_x0_ab.py."""

from __future__ import annotations

import json

import pytest
import torch
from benchmark_util import load_benchmark

from polyrec.models.embeddings import PolyrecEmbeddings

profile = load_benchmark("e2e_profile")


def test_the_results_name_marks_data_other_than_the_default():
    assert profile.data_suffix("synthetic") == ""
    assert profile.data_suffix("synthetic:uniform") == "_uniform"
    assert profile.data_suffix("criteo:/data/day_0.tsv") == "_criteo"
    assert profile.data_suffix("movielens:/x/ml-100k.inter") == "_movielens"


def test_the_results_name_marks_rows_other_than_fp32():
    assert profile.rows_suffix("fp32") == ""
    assert profile.rows_suffix("bf16") == "_bf16_rows"
    assert profile.rows_suffix("fp16,fp32,fp32") == "_mixed_rows"


def test_profile_diff_reads_a_results_files_full_table(tmp_path):
    """profile_diff.py takes each kernel's calls and ms per step from a results file's full table (not the
    summary rows), so a kernel only one run launched still counts."""
    diff = load_benchmark("profile_diff")
    path = tmp_path / "profile.json"
    rows = [{"kernel": "gemm", "calls_per_step": 3.0, "ms_per_step": 1.5, "share": 0.6},
            {"kernel": "copy", "calls_per_step": 1.0, "ms_per_step": 1.0, "share": 0.4}]
    path.write_text(json.dumps({"summary": {}, "rows": rows[:1], "results": {"rows": rows}}))
    assert diff.per_kernel(str(path)) == {"gemm": (3.0, 1.5), "copy": (1.0, 1.0)}


def test_graphs_ab_baseline_refuses_to_hold_and_restores_afterwards():
    """graphs_x0_ab.py's "graphs, copied" rows: inside ``copied_input`` no lookup is held (the graph copies
    its input, as before the change); after it, even when the body raised, ``hold_output`` is the module's."""
    ab = load_benchmark("graphs_x0_ab")
    hold = PolyrecEmbeddings.hold_output
    with pytest.raises(RuntimeError), ab.copied_input():
        assert PolyrecEmbeddings.hold_output(None, torch.empty(2, 3, 4)) is False
        raise RuntimeError("a failed measurement")
    assert PolyrecEmbeddings.hold_output is hold
