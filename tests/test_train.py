"""The trainer and the `polyrec train` / `polyrec bench e2e` commands: learning, NaN stop, SIGTERM and Ctrl-C,
nothing left to train, bad rows."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from polyrec.cli import app
from polyrec.runtime import TrainConfig, Trainer
from polyrec.runtime.checkpoint import load_checkpoint
from test_data_bugs import criteo_eval_with_bad_rows

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).parent.parent
runner = CliRunner()


def _sigint_missed(signum: int, frame) -> None:
    raise AssertionError("SIGINT reached the handler the test set, not the trainer's")


@pytest.fixture
def sigint_handled():
    """SIGINT handled here by ``_sigint_missed`` (a KeyboardInterrupt would end the pytest session rather
    than fail the test) and not ignored in the children this test starts, even when pytest inherited it
    ignored (started with `&` by a script)."""
    previous = signal.signal(signal.SIGINT, _sigint_missed)
    yield
    signal.signal(signal.SIGINT, previous)


def invoke(args: list[str]):
    return runner.invoke(app, [*args, "--cpu-threads", "1"] if args[0] == "train" else args)


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_demo_path_learns(tmp_path):
    """What `make demo` runs, shortened: dcnv2-small on synthetic data, AUC clearly above chance."""
    result = invoke(["train", "--steps", "120", "--batch-size", "256", "--eval-every", "60",
                                 "--log-every", "20", "--checkpoint-dir", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    lines = json_lines(result.output)
    evals = [r for r in lines if r.get("event") == "eval"]
    assert len(evals) == 2 and evals[-1]["auc"] > 0.65
    assert lines[-1]["event"] == "result" and lines[-1]["status"] == "done"
    end = [r for r in lines if r.get("event") == "end"][0]
    assert set(end["timing_ms_per_step"]) == {"data", "emb_fwd", "dense", "emb_bwd", "optimizer"}
    assert all(v > 0 for v in end["timing_ms_per_step"].values())
    logged = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["event"] for r in logged].count("train") == 6


def test_table_output_without_json(tmp_path):
    result = invoke(["train", "--steps", "4", "--batch-size", "32", "--row-cap", "1000", "--log-every", "2"])
    assert result.exit_code == 0, result.output
    assert "samples/s" in result.output and "eval AUC" in result.output and "ms/step dense" in result.output


def test_nan_loss_stops_and_keeps_last_good_checkpoint(tmp_path):
    cfg = TrainConfig(steps=8, batch_size=32, row_cap=1000, log_every=2, checkpoint_every=4, checkpoint_dir=tmp_path,
                      device="cpu", cpu_threads=1)
    trainer = Trainer(cfg, progress=False)
    assert trainer.train().status == "done"
    with torch.no_grad():
        trainer.model.top.weights[0].fill_(float("nan"))
    trainer.cfg.steps = 20
    result = trainer.train()
    assert result.status == "nan" and result.step == 9
    assert "loss became nan at step 9" in result.message and str(tmp_path / "checkpoint.pt") in result.message
    state = load_checkpoint(tmp_path)
    assert state["step"] == 8
    stopped = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    assert stopped["event"] == "stopped" and stopped["reason"] == "nan" and stopped["step"] == 9
    assert all(torch.isfinite(t).all() for t in state["dense"]["top"].values())


def test_nan_loss_mid_window_logs_the_steps_before_it(tmp_path, monkeypatch, capsys):
    """Was: a loss that became NaN between two log lines dropped the window's finite steps from the metrics
    log, the result and the printed lines. Log lines every 4 steps, NaN from step 7: steps 5 and 6 get a
    `train` line at step 6 before the `stopped` one."""
    cfg = TrainConfig(steps=20, batch_size=32, row_cap=1000, log_every=4, checkpoint_dir=tmp_path, device="cpu",
                      cpu_threads=1)
    trainer = Trainer(cfg, progress=False)
    real_step, ran = trainer.train_step, []

    def step_then_poison_at_6():
        loss = real_step()
        ran.append(loss.item())
        if trainer.step == 6:
            with torch.no_grad():
                trainer.model.top.weights[0].fill_(float("nan"))
        return loss

    monkeypatch.setattr(trainer, "train_step", step_then_poison_at_6)
    result = trainer.train()
    assert result.status == "nan" and "loss became nan at step 7" in result.message
    assert len(ran) == 8 and math.isnan(ran[6]) and result.losses == ran[:6]
    records = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    trains = [r for r in records if r["event"] == "train"]
    assert [r["step"] for r in trains] == [4, 6]
    assert trains[-1]["loss"] == pytest.approx((ran[4] + ran[5]) / 2) and trains[-1]["last_loss"] == ran[5]
    assert records[-1]["event"] == "stopped" and records[-1]["step"] == 7
    assert f"step 6/20  loss {ran[5]:.4f}" in capsys.readouterr().out


def test_nan_loss_exit_code_from_cli(tmp_path):
    result = invoke(["train", "--steps", "30", "--batch-size", "32", "--row-cap", "1000", "--lr", "1e30",
                                 "--log-every", "1", "--checkpoint-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert "training stopped; no checkpoint was written before it" in result.output


def test_bad_rows_cli(tmp_path):
    bad = f"criteo:{DATA / 'criteo_bad.tsv'}"
    result = invoke(["train", "--data", bad, "--steps", "2", "--batch-size", "8", "--row-cap", "100"])
    assert result.exit_code == 2 and "criteo_bad.tsv:5: expected 40 tab-separated columns" in result.output
    result = invoke(["train", "--data", bad, "--steps", "2", "--batch-size", "8", "--row-cap", "100",
                                 "--skip-bad-rows", "--json"])
    assert result.exit_code == 0, result.output
    end = [r for r in json_lines(result.output) if r.get("event") == "end"][0]
    assert end["bad_rows"] == 4 and "criteo_bad.tsv:10" in end["bad_row_examples"][1]
    assert end["eval_bad_rows"] == 0 and end["eval_bad_row_examples"] == []


def test_eval_bad_rows_cli(tmp_path):
    """The eval file's bad rows: in the `end` record of --json, and in the table and on stderr without it."""
    eval_path = criteo_eval_with_bad_rows(tmp_path)
    args = ["train", "--data", f"criteo:{DATA / 'criteo_sample.tsv'}", "--eval-data", f"criteo:{eval_path}",
            "--eval-batches", "2", "--steps", "2", "--batch-size", "8", "--row-cap", "100", "--skip-bad-rows"]
    result = invoke([*args, "--json"])
    assert result.exit_code == 0, result.output
    end = [r for r in json_lines(result.output) if r.get("event") == "end"][0]
    assert end["bad_rows"] == 0 and end["eval_bad_rows"] == 2
    assert end["eval_bad_row_examples"][1] == f"{eval_path}:8: expected 40 tab-separated columns, found 2"
    result = invoke(args)
    assert result.exit_code == 0, result.output
    assert "│ eval bad rows skipped" in result.output and "│ bad rows skipped" not in result.output
    assert "skipped 2 bad eval rows" in " ".join(result.output.split())


def test_mlperf_binary_cli_with_eval_data(tmp_path):
    rng = np.random.default_rng(0)
    for name, n in (("train.bin", 64), ("eval.bin", 32)):
        rec = np.concatenate([rng.integers(0, 2, (n, 1)), rng.integers(0, 50, (n, 13)), rng.integers(0, 10**6, (n, 26))], 1)
        rec.astype("<i4").tofile(tmp_path / name)
    result = invoke(["train", "--data", f"mlperf:{tmp_path / 'train.bin'}", "--eval-data", f"mlperf:{tmp_path / 'eval.bin'}",
                     "--eval-batches", "2", "--steps", "6", "--batch-size", "16", "--row-cap", "1000", "--json"])
    assert result.exit_code == 0, result.output
    evals = [r for r in json_lines(result.output) if r.get("event") == "eval"]
    assert len(evals) == 1 and evals[0]["samples"] == 32


def test_movielens_cli(tmp_path):
    result = invoke(["train", "--data", f"movielens:{DATA / 'ml_sample.data'}", "--steps", "20",
                                 "--batch-size", "64", "--json"])
    assert result.exit_code == 0, result.output
    start = [r for r in json_lines(result.output) if r.get("event") == "start"][0]
    assert start["model"]["table_rows"] == [30, 40] and start["model"]["num_dense"] == 1
    assert 0.0 <= json_lines(result.output)[-1]["final_auc"] <= 1.0


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_saves_a_checkpoint_and_exits_cleanly(tmp_path, sigint_handled, signum):
    """SIGTERM, and Ctrl-C's SIGINT (which ended the run with a KeyboardInterrupt and no checkpoint)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "polyrec", "train", "--steps", "1000000", "--batch-size", "32", "--row-cap", "1000",
           "--log-every", "5", "--checkpoint-dir", str(tmp_path), "--json", "--cpu-threads", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    metrics = tmp_path / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if metrics.is_file() and '"event": "train"' in metrics.read_text():
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert f"stopped by signal {signum} ({signal.Signals(signum).name}) at step" in err
    state = load_checkpoint(tmp_path)
    assert state["step"] >= 5 and state["data"]["position"] == state["step"]
    last = json.loads(metrics.read_text().splitlines()[-1])
    assert last["event"] == "end" and last["status"] == "sigterm" and last["step"] == state["step"]


def _signal_after(trainer: Trainer, step: int, *signals: int) -> None:
    """Raise ``signals`` in this process (their handlers run at once) when the trainer's step ``step`` is done."""
    train_step = trainer.train_step

    def signalled_step():
        loss = train_step()
        if trainer.step == step:
            for signum in signals:
                signal.raise_signal(signum)
        return loss

    trainer.train_step = signalled_step


@pytest.mark.parametrize("during", ["save", "evaluate"])
def test_a_signal_during_a_save_or_an_evaluation_stops_without_another_step(tmp_path, sigint_handled, during):
    """SIGTERM while step 4's periodic checkpoint (or evaluation) is written: the run stops at step 4 with
    one checkpoint written there (it ran step 5 and wrote a second, doubling the time to exit)."""
    cfg = TrainConfig(steps=50, batch_size=32, row_cap=1000, log_every=100, checkpoint_every=4, eval_every=4,
                      checkpoint_dir=tmp_path, device="cpu", cpu_threads=1)
    trainer = Trainer(cfg, progress=False)
    saves, pause = [], getattr(trainer, during)
    save = trainer.save

    def counted_save():
        saves.append(trainer.step)
        return save()

    def signalled_pause():
        out = pause() if during == "evaluate" else counted_save()
        signal.raise_signal(signal.SIGTERM)
        return out

    trainer.save = counted_save
    setattr(trainer, during, signalled_pause)
    result = trainer.train()
    assert (result.status, result.step) == ("sigterm", 4), result.message
    assert saves == [4] and load_checkpoint(tmp_path)["step"] == 4


def test_ctrl_c_stops_with_a_checkpoint_and_a_second_interrupts(tmp_path, sigint_handled):
    """The first SIGINT stops the run as SIGTERM does (it raised KeyboardInterrupt: no checkpoint); a
    second while stopping interrupts. The handlers are put back either way."""
    cfg = TrainConfig(steps=50, batch_size=32, row_cap=1000, log_every=100, checkpoint_dir=tmp_path, device="cpu",
                      cpu_threads=1)
    trainer = Trainer(cfg, progress=False)
    _signal_after(trainer, 2, signal.SIGINT)
    result = trainer.train()
    assert (result.status, result.step, result.checkpoint) == ("sigterm", 2, tmp_path / "checkpoint.pt")
    assert result.message == f"stopped by signal 2 (SIGINT) at step 2; checkpoint {tmp_path / 'checkpoint.pt'}"
    assert load_checkpoint(tmp_path)["step"] == 2
    assert signal.getsignal(signal.SIGINT) is _sigint_missed
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL

    resumed = Trainer(dataclasses.replace(cfg, resume=True), progress=False)
    _signal_after(resumed, 3, signal.SIGINT, signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        resumed.train()
    assert load_checkpoint(tmp_path)["step"] == 2
    assert signal.getsignal(signal.SIGINT) is _sigint_missed


def test_an_ignored_sigint_stays_ignored(sigint_handled):
    """A run started with `&` by a script ignores SIGINT (the shell set it so): Ctrl-C at the script does
    not stop it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    trainer = Trainer(TrainConfig(steps=3, batch_size=32, row_cap=1000, device="cpu", cpu_threads=1), progress=False)
    _signal_after(trainer, 1, signal.SIGINT)
    assert (trainer.train().status, trainer.step) == ("done", 3)
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def test_train_with_no_steps_left_trains_nothing_and_keeps_the_checkpoint(tmp_path, monkeypatch):
    """Trainer.train() on a trainer resumed at --steps evaluated and wrote the checkpoint again (the CLI
    alone checked for it)."""
    cfg = TrainConfig(steps=2, batch_size=32, row_cap=1000, log_every=2, checkpoint_dir=tmp_path, device="cpu",
                      cpu_threads=1)
    Trainer(cfg, progress=False).train()
    ckpt, metrics = tmp_path / "checkpoint.pt", tmp_path / "metrics.jsonl"
    saved, mtime, logged = ckpt.read_bytes(), ckpt.stat().st_mtime_ns, metrics.read_text()
    for steps in (2, 1):
        resumed = Trainer(dataclasses.replace(cfg, resume=True, steps=steps), progress=False)
        monkeypatch.setattr(resumed, "evaluate", lambda: pytest.fail("evaluated with nothing to train"))
        result = resumed.train()
        assert (result.status, result.step, result.nothing_to_train, result.checkpoint) == ("done", 2, True, ckpt)
        assert result.message == (f"checkpoint {tmp_path} is at step 2; --steps {steps} asks for no more: "
                                  "nothing to train")
        assert ckpt.stat().st_mtime_ns == mtime and ckpt.read_bytes() == saved and metrics.read_text() == logged


def test_bench_e2e_cli():
    result = invoke(["bench", "e2e", "--steps", "3", "--warmup", "1", "--batch-size", "32",
                                 "--row-cap", "1000", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)  # warnings go to stderr: a pipe to jq sees stdout only
    direct, ours = out["rows"]
    assert direct["path"] == "direct port" and direct["embedding_optimizer"] == "adagrad" and direct["dtype"] == "float32"
    assert ours["path"] == "polyrec" and ours["embedding_optimizer"] == "rowwise_adagrad"
    assert math.isclose(out["speedup"], ours["samples_per_s"] / direct["samples_per_s"])
    assert ours["median_step_ms"] > 0 and ours["data_host_ms"] > 0 and ours["dense_host_ms"] > 0


def test_semi_sync_reads_tables_one_update_old():
    """Reference written out: batch i+1's lookup happens before batch i's embedding update."""
    cfg = TrainConfig(steps=4, batch_size=32, row_cap=1000, device="cpu", cpu_threads=1, pipeline="semi-sync")
    trainer = Trainer(cfg, progress=False)
    losses = [float(trainer.train_step()) for _ in range(4)]

    ref = Trainer(dataclasses.replace(cfg, pipeline="sync"), progress=False)
    model, source = ref.model, ref.source
    batch = source.next_batch()
    emb = model.embed(batch.values, batch.offsets, batch.batch_size)
    want = []
    for _ in range(4):
        nxt = source.next_batch()
        nxt_emb = model.embed(nxt.values, nxt.offsets, nxt.batch_size)  # before this step's update
        leaf = emb.detach().requires_grad_()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model.dense_forward(batch.dense, leaf), batch.labels)
        loss.backward()
        emb.backward(leaf.grad)
        ref.optimizer.step()
        ref.optimizer.zero_grad()
        model.embeddings.apply_gradients()
        want.append(float(loss))
        batch, emb = nxt, nxt_emb
    assert losses == want
    sync_losses = [float(Trainer(dataclasses.replace(cfg, pipeline="sync"), progress=False).train_step())]
    assert sync_losses[0] == losses[0]  # the first step has nothing stale yet


def test_median_step_interval_ignores_a_slow_step(monkeypatch):
    """PhaseTimer.median_step_ms: the median of the gaps between step boundaries, so one stalled step
    (a GC pause) does not move it while the mean does."""
    from polyrec.runtime.metrics import PhaseTimer

    clock = iter([0.0, 0.010, 0.020, 0.130, 0.140, 0.150])  # seconds; the third step stalls 100 ms
    monkeypatch.setattr("polyrec.runtime.metrics.time.perf_counter", lambda: next(clock))
    timer = PhaseTimer(torch.device("cpu"))
    with pytest.raises(ValueError, match="two step boundaries"):
        timer.median_step_ms()
    for _ in range(6):
        timer.step_boundary()
    assert timer.median_step_ms() == pytest.approx(10.0)
