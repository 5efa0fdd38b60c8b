"""benchmarks/checkout_ab.py's plumbing on the CPU: one trial in a fresh process of a checkout (and only
that checkout's code), the commit naming, bad --configs."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmark_util import load_benchmark

ROOT = Path(__file__).parents[1]
ab = load_benchmark("checkout_ab")


def _args(**options) -> SimpleNamespace:
    return SimpleNamespace(row_cap=1000, warmup=1, steps=2, cuda_graphs=False,
                           **({"data": "synthetic", "precision": "auto", "embedding_dtype": "fp32"} | options))


def test_a_trial_times_the_checkouts_own_trainer_in_a_new_process():
    """It trains with the data, precision and row dtype given (the child echoes its trainer's)."""
    measured = ab.trial(ROOT, "dcnv2-small", 64, _args(data="synthetic:uniform", precision="bf16"))
    assert measured["median_step_ms"] > 0 and measured["ms_per_step"] > 0
    assert measured["options"] == {"data": "synthetic:uniform", "precision": "bf16", "embedding_dtype": "fp32"}


def test_a_trial_refuses_a_child_that_imported_another_trees_polyrec(tmp_path):
    """A folder without polyrec/: the child imports the installed (editable) one, which the trial refuses."""
    with pytest.raises(RuntimeError, match="imported polyrec from .*not the checkout's code"):
        ab.trial(tmp_path, "dcnv2-small", 64, _args())


def test_a_checkout_is_named_by_its_commit_or_its_directory(tmp_path):
    assert ab.commit_of(tmp_path) == tmp_path.name
    name = ab.commit_of(ROOT).removesuffix("-dirty")
    assert name == ROOT.name or (len(name) >= 7 and all(c in "0123456789abcdef" for c in name))


def test_a_checkout_whose_files_differ_from_its_commit_is_named_dirty(tmp_path):
    """A copy of a working tree whose git metadata stayed behind its files (the device's copies) says so."""
    import subprocess

    def git(*argv):
        subprocess.run(["git", "-C", str(tmp_path), *argv], check=True, capture_output=True, timeout=30)

    git("init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    git("add", "a.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a")
    clean = ab.commit_of(tmp_path)
    assert len(clean) >= 7 and not clean.endswith("-dirty")
    (tmp_path / "a.py").write_text("x = 2\n")
    assert ab.commit_of(tmp_path) == clean + "-dirty"


def test_configs_must_name_a_preset_and_a_batch():
    assert ab.parse_configs("mlperf-dcnv2:16384,dcnv2-small:64") == [("mlperf-dcnv2", 16384), ("dcnv2-small", 64)]
    with pytest.raises(SystemExit, match="not PRESET:BATCH"):
        ab.parse_configs("mlperf-dcnv2")


def test_rounds_alternate_which_checkout_runs_first():
    assert [ab.turn_order(r) for r in range(3)] == [("base", "change"), ("change", "base"), ("base", "change")]
