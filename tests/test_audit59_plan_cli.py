"""A first-time user's audit of `polyrec plan` (fifty-ninth session): a closed stdout, the index distribution of
`--data synthetic:D`, co-design's answer where no design meets the target, the memory table of a mixed fleet, and
`--compare` errors that name the option."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from polyrec.cli import app

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()


def _said(result) -> str:
    """The CLI's output with rich's line wrapping undone."""
    return " ".join(result.output.split())


@pytest.mark.parametrize("mode", [["--json"], [], ["--compare", "H100", "--json"]], ids=["json", "table", "compare"])
def test_a_stdout_closed_by_its_reader_exits_quietly_with_141(mode, tmp_path):
    """`polyrec plan --compare H100 --json | true` said "error: [Errno 32] Broken pipe" and exited 2 (bad input); a
    plan's JSON or tables exited 1, which `polyrec plan` means "does not fit". Now train's and bench's 141, quietly."""
    cmd = [sys.executable, "-m", "polyrec", "plan", "--model", "dcnv2-small", *mode]
    if "--compare" in mode:
        cmd += ["--out-dir", str(tmp_path)]
    with open(tmp_path / "stderr", "w+b") as stderr:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, cwd=ROOT,
                                env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"})
        proc.stdout.close()  # the reader is gone before a byte is written, as with `| true`
        assert proc.wait(timeout=120) == 141
        stderr.seek(0)
        assert stderr.read() == b""  # no error line, no traceback, no "Exception ignored" at exit


def test_synthetic_data_of_a_distribution_prices_that_distribution():
    """`polyrec plan --data synthetic:zipf` priced uniform ids (the --distribution default), and `polyrec train --plan
    plan.json --data synthetic:zipf` refused the plan it wrote: "the run sets data 'synthetic:zipf' (the plan:
    'synthetic:uniform')"."""
    zipf = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--data", "synthetic:zipf", "--json"])
    assert zipf.exit_code == 0, zipf.output
    assert json.loads(zipf.stdout)["model"]["index_distribution"] == "zipf"
    plain = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--data", "synthetic", "--json"])
    assert json.loads(plain.stdout)["model"]["index_distribution"] == "uniform"  # plain synthetic takes the plan's


@pytest.mark.parametrize("args, message", [
    (["--data", "synthetic:uniform", "--distribution", "zipf"],
     "--distribution zipf: --data synthetic:uniform draws uniform ids"),
    (["--data", "synthetic", "--distribution", "log_uniform"],
     "--distribution log_uniform: --data synthetic draws zipf or uniform ids"),
])
def test_a_distribution_the_synthetic_data_does_not_draw_is_refused(args, message):
    """Both were planned (exit 0), and the trainer refused the plan with that data."""
    result = runner.invoke(app, ["plan", "--model", "dcnv2-small", *args, "--json"])
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert message in _said(result)


def test_codesign_without_a_design_says_what_the_smallest_reaches():
    """Was "even the smallest design misses the target or does not fit" (which one, by how much?), and its JSON
    "params": 0 where the table printed "-" and every other number was null."""
    result = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--codesign", "--target-samples-per-s", "1e12",
                                 "--json"])
    assert result.exit_code == 1, result.output
    design = json.loads(result.stdout)[0]
    assert design["fits"] is False and design["params"] is None and design["samples_per_s"] is None
    assert "misses the target" in design["reason"] and "samples/s on H200x1" in design["reason"]
    assert "does not fit" not in design["reason"]


def test_codesign_where_the_smallest_design_does_not_fit_says_so():
    result = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--codesign", "--batch-per-gpu", "100000000",
                                 "--json"])
    assert result.exit_code == 1, result.output
    reason = json.loads(result.stdout)[0]["reason"]
    assert "does not fit H200x1 at batch 100,000,000 per GPU" in reason and "misses" not in reason


def test_the_memory_table_of_a_mixed_fleet_shows_its_fullest_ranks():
    """On H100x4,H200x4 the table showed the 4 ranks of the most bytes, all H200s (20-21 of 141 GB), and not the
    H100s, which are fuller (19 of 80 GB), under a title that did not say ranks were left out."""
    from polyrec.cli.plan_tables import memory_table
    from polyrec.models.config import mlperf_dcnv2
    from polyrec.planner import make_plan, model_spec_from_config, parse_fleet

    plan = make_plan(model_spec_from_config(mlperf_dcnv2()), parse_fleet("H100x4,H200x4"))
    console = Console(width=200, record=True)
    console.print(memory_table(plan))
    text = console.export_text()
    shown = [line.split("│")[2].strip() for line in text.splitlines() if line.startswith("│")]
    fullest = max(plan.memory, key=lambda m: m.used / m.capacity)
    assert fullest.device == "H100" and "H100" in shown
    assert "4 fullest of 8 ranks" in text


@pytest.mark.parametrize("codesign", [[], ["--codesign"]], ids=["what-if", "codesign"])
@pytest.mark.parametrize("compare, message", [
    ("H100,Foo", "--compare H100,Foo: unknown device 'Foo'; valid devices: A100"),
    ("H200,h200", "--compare H200,h200: H200 is listed twice"),
])
def test_compare_errors_name_the_option(codesign, compare, message):
    """Were "unknown device 'Foo'; valid names: ..." (--fleet says "valid devices") and "what-if: H200 is listed
    twice" / "co-design: ...", naming no option."""
    result = runner.invoke(app, ["plan", "--model", "dcnv2-small", *codesign, "--compare", compare, "--json"])
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert message in _said(result)


def test_a_plan_written_that_the_trainer_would_refuse_says_so(tmp_path):
    """Two H100s with the overlap 'pipeline' priced: the trainer's ranks overlap as 'ddp' prices, so `polyrec train
    --plan` refuses it, which the user learnt only when the run started. Plans that mix row dtypes train (one TBE
    per dtype): two H100s at batch 262144 per GPU keep tables in fp16 to fit, one H100 four 40M-row tables: no note;
    nor for the H200's plan, of one dtype."""
    for fleet, options, refused in (("H100x2", ["--overlap", "pipeline"], True),
                                    ("H100x2", ["--batch-per-gpu", "262144"], False), ("H100x1", [], False),
                                    ("H200x1", [], False)):
        path = tmp_path / f"{fleet}.json"
        result = runner.invoke(app, ["plan", "--fleet", fleet, *options, "-o", str(path)])
        assert result.exit_code == 0 and path.is_file(), result.output
        said = _said(result)
        assert ("polyrec train --plan would refuse it:" in said) is refused, said
        if refused:
            assert "overlap 'pipeline'" in said, said
        else:
            assert len(set(t["weight_dtype"] for t in json.loads(path.read_text())["tables"])) == (
                1 if fleet == "H200x1" else 2)


def test_preset_names_the_model_as_in_polyrec_train():
    """`polyrec train --preset P` and `polyrec bench e2e --preset P` name a model; `polyrec plan --preset P` plans the
    same model as `--model P` (it was refused: "No such option: --preset")."""
    by_preset = runner.invoke(app, ["plan", "--preset", "dcnv2-small", "--json"])
    by_model = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--json"])
    assert by_preset.exit_code == by_model.exit_code == 0, by_preset.output
    assert json.loads(by_preset.output) == json.loads(by_model.output)
    assert json.loads(by_preset.output) != json.loads(runner.invoke(app, ["plan", "--json"]).output)
