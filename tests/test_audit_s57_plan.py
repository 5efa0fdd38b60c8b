"""Fifty-seventh session's audit of `polyrec plan --one-hot` and of `polyrec train --plan` with the lookups per
sample of its data: what says a plan is one-hot, and what a run whose data has other lookups is told to do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from polyrec.cli import app
from test_user_audit_plan import _small_plan

runner = CliRunner()
DATA = Path(__file__).parent / "data"


def _said(result) -> str:
    return " ".join(result.output.split())


def test_a_one_hot_plans_table_says_it_is_one_hot():
    """The tables of `plan --one-hot` were those of the preset's multi-hot plan with other numbers: nothing said
    which lookups per sample were priced (only the JSON's per-table pooling did)."""
    one_hot = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--one-hot"], terminal_width=200)
    multi = runner.invoke(app, ["plan", "--model", "dcnv2-small"], terminal_width=200)
    assert one_hot.exit_code == 0 and multi.exit_code == 0, one_hot.output + multi.output
    assert "dcnv2-small (one-hot) on H200x1:" in _said(one_hot)
    assert "dcnv2-small on H200x1:" in _said(multi) and "one-hot" not in multi.output


def test_a_one_hot_compare_report_is_named_and_titled_so(tmp_path):
    """`plan --compare K --one-hot` wrote whatif_<model>.png/.html, the multi-hot report's files, titled alike:
    one run overwrote the other's report, and neither said which it was."""
    for extra in ([], ["--one-hot"]):
        result = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--compare", "H200", "--out-dir",
                                     str(tmp_path), *extra])
        assert result.exit_code == 0, result.output
    assert "dcnv2-small (one-hot): the same model" in (tmp_path / "whatif_dcnv2-small_one-hot.html").read_text()
    assert "one-hot" not in (tmp_path / "whatif_dcnv2-small.html").read_text()


def test_a_one_hot_codesign_table_says_it_is_one_hot():
    result = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--one-hot", "--codesign", "--fleet", "H200",
                                 "--target-samples-per-s", "1e5"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "co-design of dcnv2-small (one-hot) for" in _said(result)


def _train_warning(plan: Path, data: str) -> str:
    """The RuntimeWarning of a one-step CPU run of ``plan`` on ``data``."""
    with pytest.warns(RuntimeWarning, match="its choices are taken") as caught:
        result = runner.invoke(app, ["train", "--plan", str(plan), "--data", data, "--row-cap", "64", "--steps", "1",
                                     "--device", "cpu", "--cpu-threads", "1"])
    assert result.exit_code == 0, result.output
    return " ".join(str(w.message) for w in caught if "its choices are taken" in str(w.message))


def test_a_plan_of_other_lookups_than_the_datas_says_how_to_plan_them(tmp_path):
    """The warning said the plan's step time and memory were not the run's, not which plan would be: `--one-hot`
    for one-hot files, no `--one-hot` for synthetic data, and neither for multi-hot days of other widths."""
    from polyrec.models.config import dcnv2_small
    from test_data_mlperf_multihot import npz, write_day

    config = dcnv2_small().with_capped_rows(64)
    multi = _small_plan(tmp_path, config, "multi.json")
    one_hot = _small_plan(tmp_path, config.replace(multi_hot=(1,) * config.num_tables), "one_hot.json")
    said = _train_warning(multi, f"criteo:{DATA / 'criteo_sample.tsv'}")
    assert "; for them, re-plan with `polyrec plan --model dcnv2-small --one-hot`" in said, said
    said = _train_warning(one_hot, "synthetic")
    assert ("; for them, re-plan with `polyrec plan --model dcnv2-small` (without --one-hot: the preset's lookups "
            "per sample)") in said, said
    write_day(tmp_path, 0, 32)  # widths of its own (HOT), neither the preset's nor one
    said = _train_warning(multi, f"mlperf:{npz(tmp_path)}")
    assert ("; `polyrec plan` prices the preset's lookups per sample or one per feature (--one-hot), not this "
            "data's") in said, said
