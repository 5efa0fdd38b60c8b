"""A first user's audit of `polyrec train` and the data readers on the CPU: what it found broken."""

from __future__ import annotations

import codecs
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from polyrec.cli import app
from polyrec.data import DataError, open_source
from polyrec.models import preset
from polyrec.runtime import TrainConfig, Trainer
from polyrec.runtime.checkpoint import load_checkpoint
from polyrec.startup import trains_with_json

DATA = Path(__file__).parent / "data"
runner = CliRunner()


def criteo_with_bad_row(path: Path, after: int) -> Path:
    """The Criteo sample written to ``path`` with a malformed row (2 columns of 40) after its first ``after`` lines,
    so at line ``after + 1``."""
    lines = (DATA / "criteo_sample.tsv").read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:after]) + b"1\t2\n" + b"".join(lines[after:]))
    return path


def criteo_config(run: Path, eval_path: Path, steps: int, **extra) -> TrainConfig:
    return TrainConfig(preset="dcnv2-small", data=f"criteo:{DATA / 'criteo_sample.tsv'}", eval_data=f"criteo:{eval_path}",
                       steps=steps, batch_size=8, row_cap=100, log_every=1000, checkpoint_dir=run, device="cpu",
                       cpu_threads=1, **extra)


def test_a_bad_eval_file_keeps_the_trained_state(tmp_path):
    """An eval file with a malformed row (found at the run's end, its first evaluation) stopped the run without
    its checkpoint: every step trained was lost. Now the state is saved, the error names it, and a resume with
    the eval file fixed goes on from it, the evaluation the first run owed made first."""
    bad = criteo_with_bad_row(tmp_path / "eval_bad.tsv", after=2)
    run = tmp_path / "run"
    with pytest.raises(DataError, match=r"eval_bad\.tsv:3: expected 40 .*state at step 3 is saved in .*checkpoint\.pt"):
        Trainer(criteo_config(run, bad, 3), progress=False).train()
    assert load_checkpoint(run)["step"] == 3
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert (logged[-1]["event"], logged[-1]["reason"], logged[-1]["step"]) == ("stopped", "eval data", 3)
    result = Trainer(criteo_config(run, DATA / "criteo_sample.tsv", 4, resume=True), progress=False).train()
    assert (result.status, result.step, [e["step"] for e in result.evals]) == ("done", 4, [3, 4])


def test_a_resume_at_the_last_step_runs_the_evaluation_its_eval_data_stopped(tmp_path):
    """A run whose final evaluation a bad eval row stopped saved its state at its last step; a resume with the eval
    file fixed and the same --steps said "nothing to train" and never evaluated: the run's AUC was out of reach
    without training on."""
    bad = criteo_with_bad_row(tmp_path / "eval_bad.tsv", after=2)
    run = tmp_path / "run"
    with pytest.raises(DataError, match=r"eval_bad\.tsv:3: expected 40"):
        Trainer(criteo_config(run, bad, 3), progress=False).train()
    with pytest.raises(DataError, match=r"eval_bad\.tsv:3: expected 40"):  # still bad: still owed
        Trainer(criteo_config(run, bad, 3, resume=True), progress=False).train()
    trained = load_checkpoint(run)["dense"]
    result = Trainer(criteo_config(run, DATA / "criteo_sample.tsv", 3, resume=True), progress=False).train()
    assert (result.status, result.step, [e["step"] for e in result.evals]) == ("done", 3, [3]), result.message
    assert not result.nothing_to_train and "evaluated" in result.message, result.message
    saved = load_checkpoint(run)
    assert saved["step"] == 3 and not saved["eval_owed"]
    assert all(torch.equal(saved["dense"][k][n], t) for k in trained for n, t in trained[k].items())  # no step
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["event"] for r in logged[-3:]] == ["start", "eval", "end"] and logged[-2]["step"] == 3
    again = Trainer(criteo_config(run, DATA / "criteo_sample.tsv", 3, resume=True), progress=False).train()
    assert again.nothing_to_train and again.evals == []  # owed no more


def test_a_resume_runs_the_periodic_evaluation_its_eval_data_stopped_before_training_on(tmp_path):
    """A periodic evaluation (--eval-every) that a bad eval row stopped saved the state at its step; a resume with the
    eval file fixed trained on from there without it: the metrics log lacked that step's AUC for good."""
    bad = criteo_with_bad_row(tmp_path / "eval_bad.tsv", after=2)
    run = tmp_path / "run"
    with pytest.raises(DataError, match=r"eval_bad\.tsv:3: expected 40 .*state at step 2 is saved"):
        Trainer(criteo_config(run, bad, 4, eval_every=2), progress=False).train()
    assert load_checkpoint(run)["eval_owed"]
    result = Trainer(criteo_config(run, DATA / "criteo_sample.tsv", 4, eval_every=2, resume=True),
                     progress=False).train()
    assert (result.status, result.step, [e["step"] for e in result.evals]) == ("done", 4, [2, 4]), result.message
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    resumed = logged[max(i for i, r in enumerate(logged) if r["event"] == "start"):]
    assert [(r["event"], r["step"]) for r in resumed[:2]] == [("start", 2), ("eval", 2)]
    assert not load_checkpoint(run)["eval_owed"]


def test_movielens_rows_of_another_width_are_bad(tmp_path):
    """u.data has 4 columns and an .inter row its header's count: a Criteo TSV given as MovieLens was read as
    ratings (user = label, item = I1, rating = I2, time = I3) until a row had an empty one of those fields."""
    with pytest.raises(DataError, match=r"criteo_sample\.tsv:1: expected 4 tab-separated columns, found 40"):
        open_source(f"movielens:{DATA / 'criteo_sample.tsv'}", preset("dcnv2-small"), batch_size=8, seed=0,
                    device=torch.device("cpu"))
    lines = (DATA / "ml_sample.inter").read_text().splitlines(keepends=True)
    wide = tmp_path / "wide.inter"
    wide.write_text("".join(lines[:3]) + lines[3].rstrip("\n") + "\t7\n" + "".join(lines[4:]))
    with pytest.raises(DataError, match=r"wide\.inter:4: expected 4 tab-separated columns, found 5"):
        open_source(f"movielens:{wide}", preset("dcnv2-small"), batch_size=8, seed=0, device=torch.device("cpu"))


def train_config(run: Path, data: Path, steps: int, **extra) -> TrainConfig:
    return TrainConfig(preset="dcnv2-small", data=f"criteo:{data}", steps=steps, batch_size=8, row_cap=100,
                       log_every=2, eval_batches=1, checkpoint_dir=run, device="cpu", cpu_threads=1, **extra)


@pytest.mark.parametrize(("pipeline", "saved_step"), [("sync", 3), ("semi-sync", 2)])
def test_a_bad_training_row_keeps_the_last_step(tmp_path, pipeline, saved_step):
    """A malformed training row mid-run (line 28: the 4th row of the 4th batch of 8) stopped the run with exit 2,
    no checkpoint and no `stopped` event: every step since the last periodic checkpoint was lost. Now the last
    step's state is saved with the data position at the start of the batch that failed (not at its 4th row), and a
    resume, with the file fixed or with skip_bad_rows, trains as a run that never stopped. Semi-sync fails a step
    earlier: it reads the next batch before its step."""
    data, run = criteo_with_bad_row(tmp_path / "train.tsv", after=27), tmp_path / "run"
    with pytest.raises(DataError, match=rf"train\.tsv:28: expected 40 .*state at step {saved_step} is saved in"):
        Trainer(train_config(run, data, 6, pipeline=pipeline), progress=False).train()
    assert load_checkpoint(run)["step"] == saved_step
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert (logged[-1]["event"], logged[-1]["reason"], logged[-1]["step"]) == ("stopped", "training data", saved_step)
    skipping = tmp_path / "run_skipping"
    shutil.copytree(run, skipping)

    def losses(directory: Path, **extra) -> list[float]:
        return Trainer(train_config(directory, data, 6, pipeline=pipeline, **extra), progress=False).train().losses

    uninterrupted_skipping = losses(tmp_path / "whole_skipping", skip_bad_rows=True)
    assert losses(skipping, resume=True, skip_bad_rows=True) == uninterrupted_skipping[saved_step:]
    data.write_bytes((DATA / "criteo_sample.tsv").read_bytes())  # fixed
    assert losses(run, resume=True) == losses(tmp_path / "whole")[saved_step:]


@pytest.mark.parametrize("args,said", [
    (["--data", "criteo:/no/such/file.tsv"], "/no/such/file.tsv"),
    (["--row-cap", "0"], "--row-cap must be at least 1"),
    (["--resume"], "--resume needs --checkpoint-dir"),
])
def test_bad_input_before_the_first_step_ends_json_output_with_a_result(args, said):
    """With --json, input refused while the run starts (exit 2) printed nothing on stdout: a script reading the last
    line found none, where a bad row at any step ends with a `result` line."""
    result = runner.invoke(app, ["train", "--steps", "2", "--batch-size", "8", "--cpu-threads", "1", "--json", *args])
    assert result.exit_code == 2, result.output
    last = json.loads(result.stdout.splitlines()[-1])
    assert (last["event"], last["status"], last["step"]) == ("result", "bad_input", None), last
    assert said in last["message"] and said in result.stderr, (last, result.stderr)
    plain = runner.invoke(app, ["train", "--steps", "2", "--batch-size", "8", "--cpu-threads", "1", *args])
    assert plain.exit_code == 2 and plain.stdout == "", plain.stdout  # without --json: the error on stderr alone


def test_out_of_memory_while_starting_ends_json_output_with_a_result(monkeypatch):
    import polyrec.cli.train as train_cli

    def no_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")

    monkeypatch.setattr(train_cli, "Trainer", no_memory)
    result = runner.invoke(app, ["train", "--steps", "2", "--json"])
    assert result.exit_code == 2, result.output
    last = json.loads(result.stdout.splitlines()[-1])
    assert last["status"] == "bad_input" and last["message"] == ("out of memory (try a smaller --batch-size or "
                                                                 "--row-cap): CUDA out of memory. Tried to allocate "
                                                                 "80.00 GiB"), last


def test_a_bad_training_row_ends_json_output_with_a_result(tmp_path):
    """With --json the stop printed no `result` line (the last line a script reads)."""
    data = criteo_with_bad_row(tmp_path / "train.tsv", after=12)
    result = runner.invoke(app, ["train", "--data", f"criteo:{data}", "--steps", "4", "--batch-size", "8",
                                 "--row-cap", "100", "--cpu-threads", "1", "--json", "--checkpoint-dir",
                                 str(tmp_path / "run")])
    assert result.exit_code == 2
    out = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["event"] for r in out[-2:]] == ["stopped", "result"]
    assert (out[-1]["status"], out[-1]["step"]) == ("data_error", 1)
    assert "train.tsv:13: expected 40" in out[-1]["message"] and "state at step 1 is saved" in out[-1]["message"]


@pytest.mark.parametrize("option", ["--checkpoint-dir", "--metrics", "--plan"])
def test_an_empty_path_option_is_refused(tmp_path, monkeypatch, option):
    """typer reads "" as the working directory: `--checkpoint-dir ""` wrote the checkpoint there, `--metrics ""`
    said ". is a directory"."""
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["train", "--steps", "1", "--batch-size", "8", "--cpu-threads", "1", option, ""])
    assert result.exit_code == 2
    assert f"error: {option} is empty: give a path, or leave the option out" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_tilde_in_a_path_option_is_the_home_directory(tmp_path, monkeypatch):
    """`--checkpoint-dir=~/x` (no shell expansion after '=') made a directory named '~'."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["train", "--steps", "1", "--batch-size", "8", "--row-cap", "100", "--cpu-threads",
                                 "1", "--checkpoint-dir=~/run", "--metrics=~/log.jsonl", "--json"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "home" / "run" / "checkpoint.pt").is_file() and (tmp_path / "home" / "log.jsonl").is_file()
    assert not (tmp_path / "~").exists()


def test_a_fresh_run_refuses_another_runs_metrics_log(tmp_path):
    """A fresh run appended its records to a metrics.jsonl left in its checkpoint directory (by a run that saved no
    checkpoint there): two runs in one log. Refused, as another run's checkpoint is."""
    (tmp_path / "metrics.jsonl").write_text('{"event": "start", "step": 0}\n')
    cfg = TrainConfig(steps=1, batch_size=8, row_cap=100, device="cpu", cpu_threads=1, checkpoint_dir=tmp_path)
    with pytest.raises(ValueError, match=r"metrics\.jsonl holds another run's metrics .* remove it, or choose another"):
        Trainer(cfg, progress=False)
    (tmp_path / "metrics.jsonl").write_text("")  # empty: nothing to mix with
    assert Trainer(cfg, progress=False).train().status == "done"


def criteo_source(spec: str, **extra):
    return open_source(spec, preset("dcnv2-small"), batch_size=8, seed=0, device=torch.device("cpu"), **extra)


@pytest.mark.parametrize("skip", [False, True])
def test_criteo_blank_lines_and_a_byte_order_mark_are_not_bad_rows(tmp_path, skip):
    """A trailing blank line was a bad row (it stopped a run without --skip-bad-rows), and a BOM before the first
    label made it "label must be 0 or 1, got b'\\xef\\xbb\\xbf1'"."""
    lines = (DATA / "criteo_sample.tsv").read_bytes().splitlines(keepends=True)
    odd = tmp_path / "odd.tsv"
    odd.write_bytes(codecs.BOM_UTF8 + b"".join(lines[:20]) + b"\r\n" + b"".join(lines[20:]) + b"\n\n")
    plain = criteo_source(f"criteo:{DATA / 'criteo_sample.tsv'}")
    read = criteo_source(f"criteo:{odd}", skip_bad_rows=skip)
    for _ in range(13):  # two epochs and more
        want, got = plain.next_batch(), read.next_batch()
        assert torch.equal(want.values, got.values) and torch.equal(want.dense, got.dense)
    assert read.bad_rows.count == 0


@pytest.mark.parametrize("name", ["ml_sample.data", "ml_sample.inter"])
def test_movielens_blank_lines_are_not_bad_rows(tmp_path, name):
    text = (DATA / name).read_bytes()
    blank = tmp_path / name
    blank.write_bytes(text + b"\n\r\n")
    source = open_source(f"movielens:{blank}", preset("dcnv2-small"), batch_size=8, seed=0,
                         device=torch.device("cpu"))
    assert source.bad_rows.count == 0 and len(source.label) == text.count(b"\n") - name.endswith(".inter")


def test_an_all_bad_criteo_file_says_so(tmp_path):
    """Under --skip-bad-rows a 5-line file of bad rows was read over and over to "1001 bad rows in a row"."""
    bad = tmp_path / "bad.tsv"
    bad.write_bytes(b"1\t2\n" * 5)
    with pytest.raises(DataError, match=r"bad\.tsv:1: no good row in the file: all 5 rows read are bad"):
        criteo_source(f"criteo:{bad}", skip_bad_rows=True).next_batch()
    with pytest.raises(DataError, match=r"no good row in any of the 2 files: all 10 rows read are bad"):
        criteo_source(f"criteo:{bad},{bad}", skip_bad_rows=True).next_batch()


def test_a_criteo_directory_is_refused_with_the_list_to_give(tmp_path):
    """`criteo:DIR` was refused without saying what to give: the files, comma-separated (no glob there)."""
    for name in ("day_0", "day_1", "day_2"):
        (tmp_path / name).write_bytes((DATA / "criteo_sample.tsv").read_bytes())
    with pytest.raises(FileNotFoundError) as caught:
        criteo_source(f"criteo:{tmp_path}")
    message = str(caught.value)
    assert f"{tmp_path} is a directory, not a file: list its files comma-separated" in message
    assert f"(criteo:{tmp_path}/day_0,{tmp_path}/day_1,...)" in message
    assert f"criteo:$(ls -d {tmp_path}/* | paste -sd, -)" in message
    paths = ",".join(str(tmp_path / name) for name in ("day_0", "day_1", "day_2"))
    assert criteo_source(f"criteo:{paths}").next_batch().batch_size == 8


#: `polyrec train` whose trainer waits 60 s as it opens its data source: a signal sent once it prints "building"
#: lands in its start-up, after the imports and before the training loop.
def _slowed(module: str, name: str, says: str) -> str:
    """Code that runs polyrec's CLI with ``module.name`` first printing ``says`` and sleeping 60 s."""
    return f"""
import time
import {module} as target
slowed = target.{name}
def slow(*args, **kwargs):
    print("{says}", flush=True)
    time.sleep(60)
    return slowed(*args, **kwargs)
target.{name} = slow
from polyrec.cli import main
main()
"""


SLOW_START = _slowed("polyrec.runtime.trainer", "open_source", "building")
SMALL_RUN = ["train", "--batch-size", "8", "--row-cap", "100", "--device", "cpu", "--cpu-threads", "1", "--json"]
STOPPED_STARTING = "stopped by signal 15 (SIGTERM) while starting"


def _polyrec(args: list[str], *, code: str | None = None) -> subprocess.Popen:
    """`python -m polyrec ARGS`, or ``code`` run with ARGS as its sys.argv[1:]."""
    command = [sys.executable, "-c", code] if code else [sys.executable, "-m", "polyrec"]
    return subprocess.Popen([*command, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, OMP_NUM_THREADS="1"))


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("resume", [False, True])
def test_sigterm_while_the_trainer_is_built_exits_cleanly(tmp_path, resume, signum):
    """SIGTERM in the start-up of `polyrec train` (here while its data source opens), before the training loop
    handles it, ended the process with SIGTERM's default action: exit code 143 (-15 to Popen), no word; Ctrl-C
    (SIGINT) with exit code 130 and no word. Now either exits 0 saying so, and --json ends with a `result` line;
    nothing is trained or written, and the checkpoint a resume was to continue stays as it was."""
    if signum == signal.SIGINT and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        pytest.skip("Ctrl-C is ignored in this process, so in its children too")
    run = tmp_path / "run"
    steps = "2"
    if resume:
        Trainer(TrainConfig(steps=2, batch_size=8, row_cap=100, device="cpu", cpu_threads=1, checkpoint_dir=run),
                progress=False).train()
        saved, steps = (run / "checkpoint.pt").read_bytes(), "4"
    proc = _polyrec([*SMALL_RUN, "--steps", steps, "--checkpoint-dir", str(run), *(["--resume"] if resume else [])],
                    code=SLOW_START)
    assert proc.stdout.readline() == "building\n"
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, (proc.returncode, err[-3000:])
    said = f"stopped by signal {int(signum)} ({signum.name}) while starting, before the first step: nothing trained"
    assert f"{said}, nothing saved" in err, err[-3000:]
    assert "Traceback" not in err
    result = json.loads(out)  # the one line: no step ran
    assert (result["event"], result["status"], result["step"]) == ("result", "sigterm", None), result
    assert said in result["message"]
    if resume:
        assert f"{run / 'checkpoint.pt'} is kept as it was" in err
        assert (run / "checkpoint.pt").read_bytes() == saved
    else:
        assert not (run / "checkpoint.pt").exists()


def _wait_until_caught(pid: int, signum: int) -> None:
    """Until process ``pid`` handles ``signum`` (its bit in /proc/PID/status's SigCgt mask)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        caught = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                      if line.startswith("SigCgt:"))
        if int(caught.split()[1], 16) >> (signum - 1) & 1:
            return
        time.sleep(0.005)
    raise AssertionError(f"process {pid} did not handle signal {signum} within 60 s")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the signal mask from /proc")
def test_sigterm_while_polyrec_imports_exits_cleanly():
    """SIGTERM while `python -m polyrec` imports its modules (torch: seconds), the first part of its start-up:
    exit 0 and a message, where it was exit code 143. (Before, the first handler of SIGTERM was the training loop's,
    seconds later.)"""
    proc = _polyrec([*SMALL_RUN, "--steps", "1000"])
    _wait_until_caught(proc.pid, signal.SIGTERM)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, (proc.returncode, err[-3000:])
    assert STOPPED_STARTING in err and "Traceback" not in err, err[-3000:]
    assert [json.loads(line) for line in out.splitlines()] == [  # --json: the run's result all the same (none before)
        {"event": "result", "status": "sigterm", "step": None, "final_auc": None, "samples_per_s": None,
         "message": "stopped by signal 15 (SIGTERM) while starting, before the command ran"}], out[-2000:]


@pytest.mark.parametrize(("argv", "json_result"), [
    (["train", "--json"], True), (["train", "--steps", "3", "--json", "--device", "cpu"], True),
    (["train"], False), (["plan", "--json"], False), (["--json", "train"], False),
    (["train", "--", "--json"], False)])
def test_which_command_lines_end_with_a_json_result_while_starting(argv, json_result):
    """Only ``polyrec train ... --json`` writes a result record: the other commands' --json output is one document."""
    assert trains_with_json(argv) is json_result


SLOW_REPORT = _slowed("polyrec.cli.train", "_report", "reporting")


def test_sigterm_while_a_finished_run_reports_exits_cleanly(tmp_path):
    """SIGTERM after the run ended, while it reports (the training loop's handlers are gone by then), ended the
    process with SIGTERM's default action: exit code 143 (-15 to Popen), no word, though the run had finished and
    saved its checkpoint. Now the report is cut short with a message and the run's own exit code (0)."""
    run = tmp_path / "run"
    proc = _polyrec([*SMALL_RUN, "--steps", "2", "--checkpoint-dir", str(run)], code=SLOW_REPORT)
    assert "reporting\n" in iter(proc.stdout.readline, "")  # after the run's --json records
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, (proc.returncode, err[-3000:])
    assert ("stopped by signal 15 (SIGTERM) while reporting, after the run ended (done at step 2): the report is cut "
            f"short; its checkpoint is {run / 'checkpoint.pt'}") in err, err[-3000:]
    assert "Traceback" not in err and out.count('"event": "result"') == 1  # --json's record of how it ended
    assert load_checkpoint(run)["step"] == 2
