"""Fifty-seventh session's audit of `polyrec plan --one-hot` and of `polyrec train --plan` with the lookups per
sample of its data: what says a plan is one-hot, and what a run whose data has other lookups is told to do."""

from __future__ import annotations

import json
import re
import sys
import warnings
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


def _as_python_shows(message, category, filename, lineno, file=None, line=None) -> None:
    """Python's own display of a warning, on stderr after "FILE:LINE: CATEGORY:" (pytest records them instead)."""
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def _train_stderr(plan: Path, data: str) -> str:
    """The stderr of a one-step CPU run of ``plan`` on ``data``, its warnings shown as Python shows them."""
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        warnings.showwarning = _as_python_shows
        result = runner.invoke(app, ["train", "--plan", str(plan), "--data", data, "--row-cap", "64", "--steps", "1",
                                     "--device", "cpu", "--cpu-threads", "1"])
    assert result.exit_code == 0, result.output
    return result.stderr


def _train_warning(plan: Path, data: str) -> str:
    """The warning of a one-step CPU run of ``plan`` on ``data`` that says the plan priced other lookups."""
    said = " ".join(_train_stderr(plan, data).split())
    assert "its choices are taken" in said, said
    return said


def test_a_plan_of_other_lookups_than_the_datas_says_how_to_plan_them(tmp_path):
    """The warning said the plan's step time and memory were not the run's, not which plan would be: `--one-hot`
    for one-hot files, no `--one-hot` for synthetic data, and neither for multi-hot days of other widths."""
    from polyrec.models.config import dcnv2_small
    from test_data_mlperf_multihot import npz, write_day

    config = dcnv2_small().with_capped_rows(64)
    multi = _small_plan(tmp_path, config, "multi.json")
    one_hot = _small_plan(tmp_path, config.replace(multi_hot=(1,) * config.num_tables), "one_hot.json")
    said = _train_warning(multi, f"criteo:{DATA / 'criteo_sample.tsv'}")
    assert "; for them, re-plan with `polyrec plan --model dcnv2-small --one-hot --row-cap 64`" in said, said
    said = _train_warning(one_hot, "synthetic")
    assert ("; for them, re-plan with `polyrec plan --model dcnv2-small --row-cap 64` (without --one-hot: the "
            "preset's lookups per sample)") in said, said
    write_day(tmp_path, 0, 32)  # widths of its own (HOT), neither the preset's nor one
    said = _train_warning(multi, f"mlperf:{npz(tmp_path)}")
    assert (f"; for them, re-plan with `polyrec plan --model dcnv2-small --data mlperf:{npz(tmp_path)} --row-cap 64`"
            " (its data's lookups per sample)") in said, said


def test_plan_data_prices_the_lookups_the_data_makes(tmp_path):
    """`polyrec plan` priced the preset's lookups per sample or one per feature: a multi-hot day of other widths
    had no plan of its own (the run's warning said so). `--data SPEC` prices the model as that data shapes it."""
    from polyrec.models.config import dcnv2_small
    from test_data_mlperf_multihot import HOT, npz, write_day

    write_day(tmp_path, 0, 32)
    day = f"mlperf:{npz(tmp_path)}"
    made = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--data", day, "--row-cap", "64", "--json"])
    assert made.exit_code == 0, made.output
    assert [t["pooling"] for t in json.loads(made.stdout)["model"]["tables"]] == list(HOT)
    plan = tmp_path / "day.json"
    plan.write_text(made.stdout)
    said = " ".join(_train_stderr(plan, day).split())
    assert "warning" not in said and "its choices are taken" not in said, said  # the plan is the run's model
    titled = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--data", day], terminal_width=200)
    assert "dcnv2-small (its data's lookups) on H200x1:" in _said(titled), titled.output
    criteo = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--data", f"criteo:{DATA / 'criteo_sample.tsv'}",
                                 "--json"])
    assert {t["pooling"] for t in json.loads(criteo.stdout)["model"]["tables"]} == {1.0}  # as --one-hot
    synthetic = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--data", "synthetic", "--json"])
    assert [t["pooling"] for t in json.loads(synthetic.stdout)["model"]["tables"]] == list(dcnv2_small().multi_hot)
    for args, needle in ((["--data", day, "--one-hot"], "--one-hot and --data"),
                         (["--data", f"movielens:{DATA / 'ml_sample.inter'}"], "builds tables of its own"),
                         (["--data", "mlperf:/no/such/day_0_sparse_multi_hot.npz"], "/no/such")):
        refused = runner.invoke(app, ["plan", "--model", "dcnv2-small", *args])
        assert refused.exit_code == 2 and needle in " ".join(refused.stderr.split()), refused.output


def test_the_plan_lookups_note_is_a_warning_line_not_pythons(tmp_path):
    """The note reached the user as Python shows a warning: "/.../polyrec/cli/train.py:210: RuntimeWarning: ..." and
    the source line `trainer = Trainer(cfg, echo_json=as_json)` under it. Now it is a `warning:` line on stderr, as
    polyrec's other messages are; a library caller of the Trainer still gets a RuntimeWarning."""
    from polyrec.models.config import dcnv2_small
    from polyrec.runtime import TrainConfig, Trainer

    plan = _small_plan(tmp_path, dcnv2_small().with_capped_rows(64))
    data = f"criteo:{DATA / 'criteo_sample.tsv'}"
    err = _train_stderr(plan, data)
    assert f"warning: {plan}: the plan was priced for other lookups per sample" in err, err
    assert "RuntimeWarning" not in err and "train.py" not in err and "Trainer(" not in err, err
    with pytest.warns(RuntimeWarning, match="its choices are taken"):
        Trainer(TrainConfig(plan=str(plan), data=data, row_cap=64, steps=1, device="cpu"), progress=False)


def test_the_plan_a_capped_run_suggests_is_one_it_takes(tmp_path):
    """A `--row-cap 64` run suggested `polyrec plan --model dcnv2-small --one-hot`, whose plan has the preset's full
    rows: the same run then refused it (rows differ). The suggestion now carries the cap, which `polyrec plan` takes."""
    from polyrec.models.config import dcnv2_small

    data = f"criteo:{DATA / 'criteo_sample.tsv'}"
    said = _train_warning(_small_plan(tmp_path, dcnv2_small().with_capped_rows(64)), data)
    command = re.search(r"re-plan with `polyrec (plan [^`]*)`", said)[1].split()
    suggested = tmp_path / "suggested.json"
    made = runner.invoke(app, [*command, "--batch-per-gpu", "16", "--dense-dtype", "fp32", "-o", str(suggested)])
    assert made.exit_code == 0, made.output  # a CPU-sized batch and dtype: neither shapes the model
    err = _train_stderr(suggested, data)
    assert "warning" not in err, err


def test_plan_row_cap_cuts_the_tables_as_train_row_cap_does(tmp_path):
    from polyrec.models.config import dcnv2_small

    result = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--row-cap", "64", "--json"])
    assert result.exit_code == 0, result.output
    rows = tuple(t["rows"] for t in json.loads(result.stdout)["model"]["tables"])
    assert rows == dcnv2_small().with_capped_rows(64).table_rows and max(dcnv2_small().table_rows) > 64
    titled = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--row-cap", "64", "--one-hot"], terminal_width=200)
    assert "dcnv2-small (one-hot, rows <= 64) on H200x1:" in _said(titled), titled.output  # it priced other tables
    uncut = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--row-cap", "10000000"], terminal_width=200)
    assert "dcnv2-small on H200x1:" in _said(uncut), uncut.output  # a cap above every table cuts none
    refused = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--row-cap", "0"])
    assert refused.exit_code == 2 and "--row-cap must be at least 1 (or left out), got 0" in refused.stderr
    # --compare and --codesign make no plan for a run: refused, not ignored
    for mode in (["--compare", "H200", "--out-dir", str(tmp_path)], ["--codesign", "--fleet", "H200"]):
        refused = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--row-cap", "64", *mode])
        assert refused.exit_code == 2 and "--row-cap cuts the tables of a plan" in refused.stderr, refused.output


def test_a_run_and_a_plan_cut_to_other_rows_say_how_to_agree(tmp_path):
    """A `--row-cap 64` run refused a plan of the preset's full rows naming the rows, not how to plan them (`polyrec
    plan` had no row cap); a run without one refused a plan cut to 64 rows the same way."""
    full, capped = tmp_path / "full.json", tmp_path / "capped.json"
    for path, extra in ((full, []), (capped, ["--row-cap", "64"])):
        made = runner.invoke(app, ["plan", "--model", "dcnv2-small", *extra, "-o", str(path)])
        assert made.exit_code == 0, made.output
    result = runner.invoke(app, ["train", "--plan", str(full), "--row-cap", "64", "--steps", "1", "--device", "cpu"])
    said = " ".join(result.stderr.split())
    assert result.exit_code == 2 and "the plan's 50000, the run's 64" in said, said
    assert ("this run cuts its tables to 64 rows (--row-cap): plan them with `polyrec plan --model dcnv2-small "
            "--row-cap 64`") in said, said
    result = runner.invoke(app, ["train", "--plan", str(capped), "--steps", "1", "--device", "cpu"])
    said = " ".join(result.stderr.split())
    assert result.exit_code == 2 and "the plan's 64, the run's 50000" in said, said
    assert ("the plan's tables are this model's cut to 64 rows (`polyrec plan --row-cap 64`): train with --row-cap "
            "64, or plan without --row-cap") in said, said
