"""A first-time user's audit of `polyrec hw` (fifty-ninth session): a closed stdout, the wording of an unknown device,
and the `cpu` that `hw detect` names without a GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from polyrec.cli import app
from polyrec.hardware.compile import CompileJob

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()


def _said(result) -> str:
    """The CLI's output with rich's line wrapping undone."""
    return " ".join(result.output.split())


def scale_jobs(spec) -> list[CompileJob]:
    """One small compile job, for `hw compile-check -k test_audit59_hw_cli:scale_jobs`."""
    from triton_kernels import scale_kernel

    return [CompileJob(label="scale", kernel=scale_kernel,
                       signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                       constexprs={"BLOCK": 512})]


def _exit_with_stdout_closed(args: list[str], tmp_path: Path) -> tuple[int, bytes]:
    """(exit code, stderr) of `python -m polyrec ARGS` whose stdout's reader is gone before a byte is written."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}", "COLUMNS": "200"}
    env.pop("TRITON_INTERPRET", None)  # compile-check refuses the interpreter
    with open(tmp_path / "stderr", "w+b") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "polyrec", *args], stdout=subprocess.PIPE, stderr=stderr,
                                cwd=ROOT, env=env)
        proc.stdout.close()  # as with `| true`
        code = proc.wait(timeout=300)
        stderr.seek(0)
        return code, stderr.read()


@pytest.mark.parametrize("args", [["hw", "list"], ["hw", "list", "--json"], ["hw", "show", "H200"],
                                  ["hw", "show", "H200", "--json"], ["hw", "detect"], ["hw", "detect", "--json"]],
                         ids=" ".join)
def test_a_stdout_closed_by_its_reader_exits_quietly_with_141(args, tmp_path):
    """`polyrec hw list | head -1` exited 1 (rich's answer to a broken pipe), and `--json` printed a traceback: 1 is
    what `hw compile-check` means by "a config does not fit". Now 141, quietly, as plan, train and bench."""
    assert _exit_with_stdout_closed(args, tmp_path) == (141, b"")


@pytest.mark.compile
@pytest.mark.parametrize("as_json", [[], ["--json"]], ids=["table", "json"])
def test_compile_check_to_a_closed_stdout_exits_quietly_with_141(as_json, tmp_path):
    """Its exit 1 means "a config does not fit": a closed stdout said so of configs that fit."""
    args = ["hw", "compile-check", "-d", "H200", "-k", "test_audit59_hw_cli:scale_jobs", *as_json]
    assert _exit_with_stdout_closed(args, tmp_path) == (141, b"")


@pytest.mark.parametrize("args", [["hw", "show", "H300"], ["hw", "compile-check", "-d", "H300"]], ids=" ".join)
def test_an_unknown_device_lists_the_valid_devices_as_plan_does(args, monkeypatch):
    """Said "valid names: ..." where `polyrec plan --fleet` and `--compare` say "valid devices: ..."."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert "error: unknown device 'H300'; valid devices: A100, B200, H100, H200" in _said(result)
    assert "valid names" not in _said(result)


@pytest.fixture
def no_gpu(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_detect_without_a_gpu_says_plainly_that_there_is_none(no_gpu):
    """Printed "cpu (host CPU (2 cores)), matched by cpu", as if `cpu` were a device of the catalog."""
    result = runner.invoke(app, ["hw", "detect"])
    assert result.exit_code == 0, result.output
    said = _said(result)
    assert said.startswith("no GPU: torch sees no CUDA or ROCm device;"), said
    assert "the host CPU stands in: cpu (host CPU (" in said and "not a catalog device" in said
    assert "matched by" not in said


@pytest.mark.parametrize("args, name", [(["hw", "show", "cpu"], "cpu"), (["hw", "show", "CPU", "--json"], "CPU"),
                                        (["hw", "compile-check", "-d", "cpu"], "cpu")], ids=["show", "show-json", "compile-check"])
def test_the_cpu_that_detect_names_is_explained_where_a_device_is_asked(args, name, monkeypatch):
    """`hw detect` names `cpu` without a GPU, and `hw show cpu` said only "unknown device 'cpu'"."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and result.stdout == "", result.output
    said = _said(result)
    assert f"unknown device '{name}'" in said, said
    assert ("cpu is the host CPU, which `polyrec hw detect` names where torch sees no GPU; it is not a catalog "
            "device (`polyrec hw detect --json` prints its spec)") in said, said
    assert "valid devices: A100" in said


def test_the_catalog_table_shows_every_value_whole_at_80_columns():
    """`make demo` (stdout not a terminal: 80 columns) printed `sm_1…`, `TFLO…` and `LDS/…`: the B200's arch and the
    headers were cut."""
    from polyrec.hardware import catalog

    proc = subprocess.run([sys.executable, "-m", "polyrec", "hw", "list"], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80"}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "…" not in proc.stdout and max(map(len, proc.stdout.splitlines())) <= 80, proc.stdout
    assert all(spec.arch in proc.stdout for spec in catalog().values()), proc.stdout
