"""Bugs found by using every `polyrec` command as a user would: bad values of options give a clear error
naming the option and exit 2 (never a traceback, a wrong verdict or a silently ignored option), and
`--json` where the README promises it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from polyrec.cli import app

runner = CliRunner()
ROOT = Path(__file__).parent.parent
VERIFY = Path(__file__).parent / "migrate_corpus" / "verify"
PORT_KERNEL = Path(__file__).parent / "migrate_corpus" / "port" / "axpy.cu"
CUDA = ("#include <cuda_runtime.h>\n"
        "__global__ void k(float* x) { int lane = threadIdx.x % 32; x[lane] = 1.0f; }\n"
        "int main() { k<<<1, 32>>>(nullptr); cudaDeviceSynchronize(); }\n")


def said(text: str) -> str:
    """Output with rich's line wrapping undone."""
    return " ".join(text.split())


def refused(args: list[str], *needles: str) -> str:
    """Run ``args``; assert exit 2, an empty stdout (`train --json`: its `result` line of status bad_input alone)
    and every needle in stderr; return stderr."""
    result = runner.invoke(app, args)
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    if args[0] == "train" and "--json" in args:
        record = json.loads(result.stdout)
        assert (record["event"], record["status"]) == ("result", "bad_input"), record
        assert said(record["message"]) in said(result.stderr), (record, result.stderr)
    else:
        assert result.stdout == ""
    for needle in needles:
        assert needle in said(result.stderr), result.stderr
    return result.stderr


# --- user input quoted in error messages is not read as rich markup or emoji codes ---------------

def test_plan_errors_quote_markup_and_emoji_codes_verbatim():
    refused(["plan", "--fleet", "[/]x1", "--json"], "fleet '[/]x1'")  # was: MarkupError traceback, exit 1
    refused(["plan", "--model", "dcnv2-small", "--weight-dtypes", "fp16,[/x]"], "['[/x]'] not allowed")
    refused(["plan", "--fleet", "H200:x:x1", "--json"], "'H200:x:x1'")  # was: 'H200❌x1'


def test_hw_errors_quote_markup_and_emoji_codes_verbatim(monkeypatch):
    refused(["hw", "show", "[/x]"], "unknown device '[/x]'")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    refused(["hw", "compile-check", "-k", "no_such_module:x"], "--kernel no_such_module:x: No module named")


def test_migrate_errors_quote_markup_verbatim(tmp_path):
    refused(["migrate", "scan", str(tmp_path / "x[/y]")], "x[/y] does not exist")
    refused(["migrate", "hipify", str(tmp_path / "[/x]"), "-o", str(tmp_path / "out")], "[/x]")


def test_scan_table_shows_bracketed_file_names(tmp_path, monkeypatch):
    (tmp_path / "[bold]k.cu").write_text(CUDA)
    monkeypatch.chdir(tmp_path)  # a short relative path: rich wraps the table at 80 columns
    result = runner.invoke(app, ["migrate", "scan", "."])
    assert result.exit_code == 1 and "[bold]k.cu:2" in result.stdout, result.output


# --- polyrec plan: options of one mode are not silently ignored in another -----------------------

def test_plan_output_with_compare_or_codesign_is_refused(tmp_path):
    out = tmp_path / "p.json"
    refused(["plan", "--model", "dcnv2-small", "--compare", "H200", "--out-dir", str(tmp_path), "-o", str(out),
             "--json"], "-o/--output writes one plan")
    refused(["plan", "--model", "dcnv2-small", "--codesign", "-o", str(out), "--json"], "-o/--output")
    assert not out.exists()


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_codesign_target_must_be_finite_and_not_negative(value):
    refused(["plan", "--model", "dcnv2-small", "--codesign", "--target-samples-per-s", value, "--json"],
            "--target-samples-per-s must be a finite number")


def test_codesign_target_without_codesign_is_refused():
    refused(["plan", "--model", "dcnv2-small", "--target-samples-per-s", "3e6", "--json"],
            "--target-samples-per-s is the target of --codesign")


@pytest.mark.parametrize("extra", [[], ["--codesign"]])
@pytest.mark.parametrize("kinds", [",", ""])
def test_compare_naming_no_device_is_refused(tmp_path, kinds, extra):
    refused(["plan", "--model", "dcnv2-small", "--compare", kinds, "--out-dir", str(tmp_path), "--json", *extra],
            "names no device kind")
    assert not list(tmp_path.iterdir())  # no empty report written


def test_no_host_cache_flag_has_no_double_negative():
    result = runner.invoke(app, ["plan", "--help"], env={"COLUMNS": "200"})
    assert "--no-host-cache" in result.stdout and "--no-no-host-cache" not in result.stdout


# --- polyrec migrate ------------------------------------------------------------------------------

def test_scan_sarif_to_a_path_that_cannot_be_written(tmp_path):
    (tmp_path / "k.cu").write_text(CUDA)
    refused(["migrate", "scan", str(tmp_path), "--json", "--sarif", str(tmp_path / "no" / "x.sarif")],
            "--sarif", "No such file or directory")
    refused(["migrate", "scan", str(tmp_path), "--sarif", str(tmp_path)], "--sarif", "Is a directory")


def test_scan_fail_on_names_the_option(tmp_path):
    (tmp_path / "k.cu").write_text(CUDA)
    refused(["migrate", "scan", str(tmp_path), "--fail-on", "nope"], "--fail-on must be one of", "'nope'")


@pytest.mark.parametrize("ref, says", [("os:getcwd", "cannot be called with one DeviceSpec"),
                                       ("os:sep", "str is not a function"),
                                       ("no_such_module:f", "--compile-jobs no_such_module:f: No module named")])
def test_scan_compile_jobs_that_cannot_be_used(tmp_path, monkeypatch, ref, says):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    (tmp_path / "k.cu").write_text(CUDA)
    refused(["migrate", "scan", str(tmp_path), "--json", "--compile-jobs", ref], says)


def test_hipify_out_that_is_a_file_is_a_clear_error(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "k.cu").write_text(CUDA)
    (tmp_path / "afile").write_text("")
    refused(["migrate", "hipify", str(tmp_path / "src"), "-o", str(tmp_path / "afile")], "--out", "afile")
    refused(["migrate", "hipify", str(tmp_path / "src"), "-o", str(tmp_path / "afile" / "sub")], "--out")


@pytest.mark.parametrize("as_file", [False, True])
def test_hipify_refuses_to_overwrite_its_sources(tmp_path, as_file):
    src = tmp_path / "k.cu"
    src.write_text(CUDA)
    refused(["migrate", "hipify", str(src if as_file else tmp_path), "-o", str(tmp_path)], "overwrite")
    assert src.read_text() == CUDA


def test_hipify_json(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "k.cu").write_text(CUDA)
    result = runner.invoke(app, ["migrate", "hipify", str(tmp_path / "src"), "-o", str(tmp_path / "out"), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc == json.loads((tmp_path / "out" / "hipify-report.json").read_text())
    assert [f["path"] for f in doc["files"]] == ["k.cu"]


def test_verify_candidate_missing_or_a_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ref = ["--reference", "migrate_ref_ops:axpy", "--no-compile", "--json"]
    refused(["migrate", "verify", "nope.py", *ref], "nope.py: no such file")  # relative: rich wraps long paths
    refused(["migrate", "verify", str(tmp_path), *ref], "a directory, not a Python file")


@pytest.mark.parametrize("timeout", ["0", "-5", "nan"])
def test_verify_timeout_must_be_positive(timeout):
    refused(["migrate", "verify", str(VERIFY / "good_axpy.py"), "--reference", "migrate_ref_ops:axpy",
             "--no-compile", "--timeout", timeout, "--json"], "--timeout must be a positive number of seconds")


def test_port_out_that_is_a_file_and_json(tmp_path, monkeypatch):
    for name in ("POLYREC_LLM_URL", "POLYREC_LLM_MODEL", "POLYREC_LLM_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.syspath_prepend(str(VERIFY))
    (tmp_path / "afile").write_text("")
    args = ["migrate", "port", str(PORT_KERNEL), "--reference", "migrate_ref_ops:axpy", "--no-compile"]
    refused([*args, "-o", str(tmp_path / "afile")], "--out", "afile")
    result = runner.invoke(app, [*args, "-o", str(tmp_path / "out"), "--json"])
    assert result.exit_code == 1, result.output  # no provider: not ported
    doc = json.loads(result.stdout)
    assert doc["accepted"] is False and doc == json.loads((tmp_path / "out" / "port-report.json").read_text())


def test_port_of_a_directory_says_so(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kernels").mkdir()
    refused(["migrate", "port", "kernels", "--reference", "migrate_ref_ops:axpy", "--no-compile", "-o", "out"],
            "kernel file kernels is a directory, not a file")


# --- polyrec train / bench e2e ---------------------------------------------------------------------

TRAIN = ["train", "--steps", "2", "--batch-size", "16", "--row-cap", "100", "--cpu-threads", "1", "--json"]


@pytest.mark.parametrize("option, value", [("--lr", "inf"), ("--lr", "nan"), ("--lr", "-1"),
                                           ("--embedding-lr", "nan"), ("--embedding-lr", "-0.1"),
                                           ("--embedding-lr", "0")])
def test_train_learning_rates_are_checked(option, value):
    """inf/NaN trained to a NaN loss (exit 1), a negative --embedding-lr trained (exit 0) and 0 meant --lr."""
    import torch

    threads = torch.get_num_threads()
    try:
        refused([*TRAIN, option, value], f"{option} must be a finite number")
    finally:
        torch.set_num_threads(threads)


def _cpu_allocator_error(*args, **kwargs):
    raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
                       "you tried to allocate 20800000000000 bytes. Error code 12 (Cannot allocate memory)")


def test_train_out_of_memory_is_a_clear_error(monkeypatch):
    import polyrec.cli.train as train_cli

    monkeypatch.setattr(train_cli, "Trainer", _cpu_allocator_error)
    refused([*TRAIN, "--batch-size", "100000000000"], "out of memory (try a smaller --batch-size",
            "can't allocate memory")


@pytest.mark.parametrize("error", [MemoryError("Unable to allocate 2.91 TiB for an array with shape "
                                               "(10000000000, 40) and data type int64"), MemoryError()])
def test_train_numpy_out_of_memory_is_a_clear_error(monkeypatch, error):
    """A file source's batch buffer is a numpy array: numpy raises MemoryError, not torch's RuntimeError."""
    import polyrec.cli.train as train_cli

    def numpy_allocation(*args, **kwargs):
        raise error

    monkeypatch.setattr(train_cli, "Trainer", numpy_allocation)
    refused([*TRAIN, "--batch-size", "10000000000"], "out of memory (try a smaller --batch-size",
            str(error) or "MemoryError")


def test_bench_out_of_memory_is_a_clear_error(monkeypatch):
    import polyrec.runtime.bench

    monkeypatch.setattr(polyrec.runtime.bench, "e2e", _cpu_allocator_error)
    refused(["bench", "e2e", "--batch-size", "100000000000", "--json"], "out of memory (try a smaller --batch-size")


def test_other_runtime_errors_still_raise(monkeypatch):
    import polyrec.cli.train as train_cli

    def broken(*args, **kwargs):
        raise RuntimeError("a bug, not bad input")

    monkeypatch.setattr(train_cli, "Trainer", broken)
    result = runner.invoke(app, TRAIN)
    assert isinstance(result.exception, RuntimeError)


def test_train_names_a_bad_row_cap():
    """The cap shaped the model before the option checks ran, so the error blamed the model config."""
    result = runner.invoke(app, ["train", "--steps", "1", "--batch-size", "8", "--row-cap", "-1"])
    assert result.exit_code == 2 and "--row-cap must be at least 1" in result.output, result.output


@pytest.mark.parametrize("under", ["", "a/b"])
def test_train_metrics_under_a_file_names_the_file(tmp_path, monkeypatch, under):
    """Was: 'error: [Errno 17] File exists: ...', naming neither the metrics log nor the file in the way."""
    monkeypatch.chdir(tmp_path)  # relative paths: the message stays on one line
    Path("afile").write_text("x")
    metrics = str(Path("afile", under, "m.jsonl"))
    refused([*TRAIN, "--metrics", metrics],
            f"metrics log {metrics} cannot be written: afile is a file, not a directory")


@pytest.fixture
def keep_threads():
    """--cpu-threads 1 changes a process-wide setting."""
    import torch

    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_train_stdout_closed_by_its_reader_exits_quietly(tmp_path):
    """`polyrec train --json | head -1` ended with 'error: [Errno 32] Broken pipe' and exit 2 (bad input)."""
    cmd = [sys.executable, "-m", "polyrec", *TRAIN, "--steps", "1000000", "--log-every", "1"]
    with open(tmp_path / "stderr", "w+b") as stderr:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, cwd=ROOT,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert json.loads(proc.stdout.readline())["event"] == "start"
        proc.stdout.close()  # as `head -1` does
        assert proc.wait(timeout=120) == 141
        stderr.seek(0)
        assert stderr.read() == b""  # no error line, no traceback, no "Exception ignored" at exit


def test_train_broken_pipe_in_process(monkeypatch):
    import polyrec.cli.train as train_cli

    def closed(*args, **kwargs):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(train_cli, "Trainer", closed)
    result = runner.invoke(app, TRAIN)
    assert result.exit_code == 141 and result.stderr == "", (result.exit_code, result.output)


def test_train_keeps_the_traceback_of_a_runtime_error_not_from_a_peer(monkeypatch):
    """Only gloo's transport errors (a peer gone) are said in one line (tests/test_dist_faults.py); any
    other RuntimeError is a bug to see whole."""
    import polyrec.cli.train as train_cli

    def broken(*args, **kwargs):
        raise RuntimeError("[/src/gloo/gloo/allreduce.cc:10] not a transport error")

    monkeypatch.setattr(train_cli, "Trainer", broken)
    result = runner.invoke(app, TRAIN)
    assert isinstance(result.exception, RuntimeError) and "not a transport error" in str(result.exception)


@pytest.mark.parametrize("steps", ["2", "1"])
def test_resume_with_no_steps_left_trains_nothing_and_keeps_the_checkpoint(tmp_path, keep_threads, steps):
    """It trained 0 steps, evaluated, and rewrote the checkpoint, saying only 'trained 0 steps'."""
    ckpt = tmp_path / "ck"
    first = runner.invoke(app, [*TRAIN, "--checkpoint-dir", str(ckpt)])
    assert first.exit_code == 0, first.output
    saved, logged = (ckpt / "checkpoint.pt").read_bytes(), (ckpt / "metrics.jsonl").read_text()
    mtime = (ckpt / "checkpoint.pt").stat().st_mtime_ns
    result = runner.invoke(app, [*TRAIN, "--checkpoint-dir", str(ckpt), "--resume", "--steps", steps])
    assert result.exit_code == 0, result.output
    message = f"checkpoint {ckpt} is at step 2; --steps {steps} asks for no more: nothing to train"
    assert message in said(result.stderr)
    record = json.loads(result.stdout)
    assert record["event"] == "result" and record["step"] == 2 and record["message"] == message
    assert (ckpt / "checkpoint.pt").stat().st_mtime_ns == mtime
    assert (ckpt / "checkpoint.pt").read_bytes() == saved and (ckpt / "metrics.jsonl").read_text() == logged


def test_train_help_names_no_subcommand_and_the_exit_codes():
    """The usage line read `polyrec train [OPTIONS] COMMAND [ARGS]...` (it has no subcommands) and the
    help named no exit codes; --eval-batches read as an exact count."""
    from typer.main import get_command

    result = runner.invoke(app, ["train", "--help"], prog_name="polyrec")
    assert result.exit_code == 0, result.output
    text = said(result.output)
    assert "Usage: polyrec train [OPTIONS]" in text and "COMMAND" not in text, text
    for code in ("0 done", "stopped by SIGTERM or Ctrl-C (SIGINT; a second Ctrl-C interrupts at once)",
                 "1 a non-finite loss", "2 bad input", "3 another rank failed", "141 stdout closed by its reader"):
        assert code in text, text
    eval_batches = next(p for p in get_command(app).commands["train"].params if p.name == "eval_batches")
    assert "at most once" in eval_batches.help


def test_every_option_of_every_command_says_what_it_does():
    """Was: `bench e2e --seed`, `migrate rules --json` and `migrate verify --json` listed in --help with no text."""
    import typer

    def options(command, path):
        for name, sub in getattr(command, "commands", {}).items():
            yield from options(sub, [*path, name])
        for param in getattr(command, "params", []):
            if type(param).__name__.endswith("Option") and param.name != "help":
                yield " ".join(path), param

    silent = [f"{path} {param.opts[0]}" for path, param in options(typer.main.get_command(app), ["polyrec"])
              if not param.help]
    assert not silent, f"options without help text: {silent}"
