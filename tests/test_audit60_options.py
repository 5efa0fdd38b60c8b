"""Sixtieth session's audit: errors of `polyrec plan` and `polyrec train` name the option they refuse (`--model`,
`--preset`, `--data synthetic:D`), as the others do."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from polyrec.cli import app
from polyrec.data.sources import canonical_spec, parse_spec

runner = CliRunner()


def _said(result) -> str:
    return " ".join((result.stderr or result.output).split())


def test_plan_names_model_for_an_unknown_preset():
    """Was "unknown preset 'foo'": the option is --model (or its alias --preset), words the message did not say."""
    for mode in ([], ["--codesign"], ["--compare", "H100,H200"]):
        for option in ("--model", "--preset"):
            result = runner.invoke(app, ["plan", option, "foo", *mode])
            assert result.exit_code == 2, result.output
            assert "--model/--preset foo: unknown preset 'foo'; known: mlperf-dcnv2" in _said(result), mode


def test_train_names_preset_for_an_unknown_preset():
    from polyrec.runtime import TrainConfig, Trainer

    with pytest.raises(ValueError, match="^--preset foo: unknown preset 'foo'; known: mlperf-dcnv2"):
        Trainer(TrainConfig(preset="foo", device="cpu", embedding_backend="torch", dense_backend="torch"),
                progress=False)


@pytest.mark.parametrize("spec", ["synthetic:foo", "synthetic:Uniform"])
def test_a_synthetic_distribution_it_does_not_draw_is_unknown_data(spec):
    """Was "synthetic distribution must be 'zipf' or 'uniform', got 'foo'", once the source was built (after the
    model, for train): now where the spec is read, as an unknown kind of data is, naming the spec."""
    message = f"unknown data '{spec}': synthetic data draws zipf or uniform ids"
    with pytest.raises(ValueError, match=message):
        parse_spec(spec)
    with pytest.raises(ValueError, match=message):
        canonical_spec(spec)
    result = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--data", spec])
    assert result.exit_code == 2 and message in _said(result), result.output
    assert parse_spec("synthetic:uniform") == ("synthetic", "uniform") and parse_spec("synthetic") == ("synthetic", "")
