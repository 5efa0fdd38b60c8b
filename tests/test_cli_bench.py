"""`polyrec bench e2e`'s output, through typer's test runner (the runs themselves: tests/test_cli_audit.py)."""

from __future__ import annotations

import json

import typer
from typer.testing import CliRunner

from polyrec.cli import app

runner = CliRunner()


def test_json_to_a_closed_stdout_exits_quietly_with_141(monkeypatch):
    """`polyrec bench e2e --json | head -1` shares train's 141 (docs/training.md); the result, printed after the
    run outside the error handling, ended it with exit 1."""
    import polyrec.runtime.bench

    monkeypatch.setattr(polyrec.runtime.bench, "e2e", lambda base, warmup, steps: {"rows": [], "speedup": 1.0})
    echo = typer.echo

    def closed_stdout(message=None, *args, err=False, **kwargs):
        if not err:
            raise BrokenPipeError(32, "Broken pipe")
        echo(message, *args, err=err, **kwargs)

    monkeypatch.setattr(typer, "echo", closed_stdout)
    result = runner.invoke(app, ["bench", "e2e", "--json"])
    assert result.exit_code == 141 and result.stderr == "", (result.exit_code, result.output)


def test_json_of_a_run_whose_loss_went_nan_is_strict_json(monkeypatch):
    """Was `"last_loss": NaN`, which jq and other languages' JSON parsers reject; polyrec train --json writes null."""
    import polyrec.runtime.bench

    row = {"path": "polyrec", "samples_per_s": 100.0, "last_loss": float("nan")}
    monkeypatch.setattr(polyrec.runtime.bench, "e2e", lambda base, warmup, steps: {"rows": [row], "speedup": 1.0})
    result = runner.invoke(app, ["bench", "e2e", "--json"])
    assert result.exit_code == 0, result.output

    def refuse(constant):
        raise ValueError(f"not strict JSON: {constant}")

    assert json.loads(result.stdout, parse_constant=refuse)["rows"][0]["last_loss"] is None


def test_file_data_runs_without_a_synthetic_pool_and_synthetic_with_one(monkeypatch):
    """The default pool (warmup + steps) is for synthetic data; file data gets none (open_source refuses one)."""
    import polyrec.runtime.bench

    pools = []
    monkeypatch.setattr(polyrec.runtime.bench, "e2e",
                        lambda base, warmup, steps: pools.append(base.synthetic_pool) or {"rows": [], "speedup": 1.0})
    from pathlib import Path

    for data in (f"criteo:{Path(__file__).parent / 'data' / 'criteo_sample.tsv'}", "synthetic"):
        result = runner.invoke(app, ["bench", "e2e", "--json", "--data", data, "--warmup", "2", "--steps", "3"])
        assert result.exit_code == 0, result.output
    assert pools == [0, 5]


def _rows(embeddings: str, dense: str) -> dict:
    row = {"path": "polyrec", "samples_per_s": 2.0, "embeddings": embeddings, "dense": dense,
           "embedding_optimizer": "rowwise_adagrad", "dtype": "float32"}
    return {"rows": [{**row, "path": "direct port", "samples_per_s": 1.0, "embeddings": "torch", "dense": "torch"},
                     row], "speedup": 2.0}


def test_a_ratio_of_two_plain_torch_paths_says_so(monkeypatch):
    """On a CPU "auto" runs polyrec's path on torch ops: the printed ratio compared two torch configurations and
    nothing said so."""
    import polyrec.runtime.bench

    for embeddings, noted in (("torch", True), ("polyrec", False)):
        out = _rows(embeddings, "torch")
        out["polyrec_kernels"] = polyrec.runtime.bench.uses_polyrec_kernels(out["rows"][-1])
        monkeypatch.setattr(polyrec.runtime.bench, "e2e", lambda base, warmup, steps: out)
        result = runner.invoke(app, ["bench", "e2e", "--device", "cpu"])
        assert result.exit_code == 0, result.output
        assert ("ran no polyrec kernel" in result.stdout) == noted, result.stdout
