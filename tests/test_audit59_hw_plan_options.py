"""A first-time user's audit (fifty-ninth session): `polyrec plan`'s refusals of what the planner's constraints and
model do not take name the option the user typed, not the planner's field; the Python API keeps its field names."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from polyrec.cli import app
from polyrec.planner.types import PlanConstraints

runner = CliRunner()


def _said(result) -> str:
    """The CLI's output with rich's line wrapping undone."""
    return " ".join(result.output.split())


@pytest.mark.parametrize("mode", [[], ["--compare", "H100"], ["--codesign"]], ids=["plan", "compare", "codesign"])
@pytest.mark.parametrize("args, message", [
    (["--batch-per-gpu", "0"], "error: --batch-per-gpu 0: must be an integer >= 1"),
    (["--batch-per-gpu", "-3"], "error: --batch-per-gpu -3: must be an integer >= 1"),
    (["--max-batch-per-gpu", "0"], "error: --max-batch-per-gpu 0: must be an integer >= 1"),
    (["--weight-dtypes", "fp32,foo,bar"], "error: --weight-dtypes fp32,foo,bar: ['foo', 'bar'] not allowed; valid: "
                                          "fp32, fp16, bf16"),
    (["--weight-dtypes", ","], "error: --weight-dtypes ,: empty not allowed; valid: fp32, fp16, bf16"),
    (["--weight-dtypes", "fp32,fp32"], "error: --weight-dtypes fp32,fp32: fp32 listed more than once"),
    (["--optimizers", "sgdx"], "error: --optimizers sgdx: ['sgdx'] not allowed; valid: sgd, rowwise_adagrad"),
    (["--optimizers", ""], "error: --optimizers '': empty not allowed; valid: sgd, rowwise_adagrad"),
    (["--optimizers", "adam, adam"], "error: --optimizers 'adam, adam': adam listed more than once"),
    (["--overlap", "foo"], "error: --overlap foo: not one of none, ddp, pipeline"),
    (["--distribution", "foo"], "error: --distribution foo: not one of uniform, log_uniform, zipf"),
    (["--distribution", "foo", "--data", "synthetic:zipf"], "error: --distribution foo: not one of uniform, "
                                                             "log_uniform, zipf"),
])
def test_a_refused_option_is_named_as_typed(mode, args, message):
    """Were "constraint batch_per_gpu must be an integer >= 1, got 0", "constraint weight_dtypes: ['foo', 'bar'] not
    allowed; ..." (the list as tests/test_cli_audit.py pins it), "constraint overlap: 'foo'; valid: ...", and "model 'dcnv2-small': index_distribution must be one
    of ..." (or, beside --data synthetic:zipf, "--data synthetic:zipf draws zipf ids", as if foo were a distribution)."""
    result = runner.invoke(app, ["plan", "--model", "dcnv2-small", *mode, *args, "--json"])
    assert result.exit_code == 2 and result.stdout == "", result.output
    said = _said(result)
    assert said.startswith(message), said
    assert "constraint " not in said and "index_distribution" not in said, said


@pytest.mark.parametrize("change, field, problem", [
    (dict(batch_per_gpu=0), "batch_per_gpu", "must be an integer >= 1"),
    (dict(weight_dtypes=("fp32", "foo")), "weight_dtypes", "['foo'] not allowed; valid: fp32, fp16, bf16"),
    (dict(optimizers=("sgd", "sgd")), "optimizers", "sgd listed more than once"),
    (dict(overlap="foo"), "overlap", "not one of none, ddp, pipeline"),
])
def test_the_api_keeps_its_field_names_and_says_the_field_and_problem_apart(change, field, problem):
    """A library caller still reads "constraint FIELD ..."; the CLI reads the field and the problem to name its
    option instead."""
    from polyrec.planner.types import ConstraintError

    with pytest.raises(ConstraintError) as refused:
        PlanConstraints(**change)
    assert str(refused.value).startswith(f"constraint {field}")
    assert isinstance(refused.value, ValueError)
    assert (refused.value.field, refused.value.problem) == (field, problem)
