"""Runtime input and state checks: checkpoint directory, damaged checkpoints, non-finite eval, resume
mismatches, stale temp files, file modes, and option ranges of `polyrec train` / `polyrec bench e2e`."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from polyrec.cli import app
from polyrec.runtime import TrainConfig, Trainer
from polyrec.runtime.checkpoint import load_checkpoint, save_checkpoint
from polyrec.runtime.config import resolve
from polyrec.runtime.metrics import MetricsLog
from polyrec.runtime.trainer_state import CHECKPOINT_KEYS

runner = CliRunner()
SMALL = ["--batch-size", "32", "--row-cap", "1000", "--log-every", "1", "--cpu-threads", "1"]


def config(directory: Path | None, steps: int = 2, **kw) -> TrainConfig:
    return TrainConfig(preset="dcnv2-small", steps=steps, batch_size=32, row_cap=1000, log_every=1,
                       checkpoint_dir=directory, device="cpu", cpu_threads=1, **kw)


def strict_lines(path: Path) -> list[dict]:
    def refuse(constant):
        raise ValueError(f"not strict JSON: {constant}")

    return [json.loads(line, parse_constant=refuse) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A 2-step run's checkpoint directory (copy it before changing it)."""
    directory = tmp_path_factory.mktemp("trained")
    threads = torch.get_num_threads()
    assert Trainer(config(directory), progress=False).train().status == "done"
    torch.set_num_threads(threads)
    return directory


def copy_of(trained: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(trained, tmp_path / "ckpt"))


# --- 1. an unusable --checkpoint-dir is found before training --------------------------------------------

@pytest.mark.parametrize("kind", ["file", "proc"])
def test_unusable_checkpoint_dir_fails_before_training(tmp_path, monkeypatch, kind):
    if kind == "file":
        directory = tmp_path / "afile"
        directory.write_text("x")
    else:
        if not Path("/proc/self").is_dir():
            pytest.skip("no /proc")
        directory = Path("/proc/polyrec_not_writable")
    monkeypatch.setattr(Trainer, "train_step", lambda self: pytest.fail("trained before checking the directory"))
    with pytest.raises(OSError, match="--checkpoint-dir .* cannot be used"):
        Trainer(config(directory), progress=False)
    result = runner.invoke(app, ["train", "--steps", "2", *SMALL, "--checkpoint-dir", str(directory)])
    assert result.exit_code == 2 and "error: --checkpoint-dir" in result.output, result.output


# --- 2. damaged checkpoints: one clear error -------------------------------------------------------------

def _damage(directory: Path, how: str) -> None:
    path = directory / "checkpoint.pt"
    if how == "truncated":
        path.write_bytes(path.read_bytes()[:5000])
    elif how == "random":
        path.write_bytes(os.urandom(5000))
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "list":
        torch.save([1, 2], path)
    elif how == "dict_without_keys":
        torch.save({"format": 1, "step": 3}, path)


@pytest.mark.parametrize("how", ["truncated", "random", "empty", "list", "dict_without_keys"])
def test_damaged_checkpoint_is_named(trained, tmp_path, how):
    directory = copy_of(trained, tmp_path)
    _damage(directory, how)
    with pytest.raises(ValueError, match="damaged or not a polyrec checkpoint") as info:
        load_checkpoint(directory, required=CHECKPOINT_KEYS)
    assert str(directory / "checkpoint.pt") in str(info.value)


def test_damaged_checkpoint_exit_code_from_cli(trained, tmp_path):
    directory = copy_of(trained, tmp_path)
    _damage(directory, "truncated")
    result = runner.invoke(app, ["train", "--steps", "4", *SMALL, "--checkpoint-dir", str(directory), "--resume"])
    assert result.exit_code == 2 and "damaged or not a polyrec checkpoint" in result.output, result.output


# --- 3. a non-finite eval loss: strict JSON, and the run stops like a NaN loss ----------------------------

def test_metrics_log_writes_strict_json(tmp_path):
    log = MetricsLog(tmp_path / "m.jsonl")
    log.write({"event": "eval", "logloss": float("nan"), "auc": float("inf"), "nested": [float("-inf"), 1.0]})
    log.close()
    assert strict_lines(tmp_path / "m.jsonl") == [{"event": "eval", "logloss": None, "auc": None,
                                                   "nested": [None, 1.0]}]


def test_nan_eval_loss_stops_and_keeps_last_good_checkpoint(tmp_path, monkeypatch):
    trainer = Trainer(config(tmp_path, steps=2), progress=False)
    assert trainer.train().status == "done"
    monkeypatch.setattr(trainer, "evaluate", lambda: {"step": trainer.step, "auc": 0.5, "logloss": float("nan"),
                                                      "samples": 32})
    trainer.cfg.steps = 4
    result = trainer.train()
    assert result.status == "nan" and "eval logloss became nan at step 4" in result.message
    assert load_checkpoint(tmp_path)["step"] == 2  # the bad state was not saved
    records = strict_lines(tmp_path / "metrics.jsonl")
    assert records[-2]["event"] == "eval" and records[-2]["logloss"] is None
    assert records[-1]["event"] == "stopped" and records[-1]["reason"] == "nan"


# --- 4. the dense optimizer's state is checked before a save --------------------------------------------

def test_finite_state_checks_the_dense_optimizer(tmp_path):
    trainer = Trainer(config(None, steps=1), progress=False)
    trainer.train()
    assert trainer.finite_state()
    next(iter(trainer.optimizer.state.values()))["sum"].fill_(float("nan"))
    assert not trainer.finite_state()


def test_a_non_finite_state_at_a_save_is_named_as_such(tmp_path, monkeypatch):
    """Was: 'loss became nan at step 2', where every loss was finite and the check before the save failed."""
    trainer = Trainer(config(tmp_path, steps=2), progress=False)
    monkeypatch.setattr(trainer, "finite_state", lambda: False)
    result = trainer.train()
    assert result.status == "nan" and "a weight or optimizer state became nan at step 2" in result.message
    assert all(math.isfinite(v) for v in result.losses)


# --- 5. resume refuses another run's settings; --lr applies ----------------------------------------------

@pytest.mark.parametrize("change,field", [
    ({"dense_optimizer": "adam"}, "dense_optimizer"),
    ({"pipeline": "semi-sync"}, "pipeline"),
    ({"seed": 1}, "seed"),
    ({"batch_size": 16}, "batch_size"),
    ({"data": "synthetic:uniform"}, "data"),
])
def test_resume_refuses_other_settings(trained, change, field):
    with pytest.raises(ValueError, match=f"holds {field} .*; this run has"):
        Trainer(TrainConfig(**{**_as_kwargs(config(trained, resume=True)), **change}), progress=False)


def _as_kwargs(cfg: TrainConfig) -> dict:
    return {f: getattr(cfg, f) for f in cfg.__dataclass_fields__}


def test_resume_names_every_field_that_differs(trained):
    with pytest.raises(ValueError, match=r"holds seed 0; this run has 3, and batch_size 32; this run has 16"):
        Trainer(TrainConfig(**{**_as_kwargs(config(trained, resume=True)), "seed": 3, "batch_size": 16}),
                progress=False)


def test_resume_refuses_another_embedding_backend(trained, tmp_path):
    directory = copy_of(trained, tmp_path)
    state = torch.load(directory / "checkpoint.pt", weights_only=True)
    assert state["train_config"]["embedding_backend"] == "torch"  # resolved, not "auto"
    state["train_config"]["embedding_backend"] = "polyrec"
    torch.save(state, directory / "checkpoint.pt")
    with pytest.raises(ValueError, match="holds embedding_backend 'polyrec'; this run has 'torch'"):
        Trainer(config(directory, resume=True), progress=False)


def test_resume_applies_and_logs_a_new_lr(trained, tmp_path):
    metrics = tmp_path / "m.jsonl"
    trainer = Trainer(config(trained, steps=4, resume=True, lr=0.5, metrics_path=metrics), progress=False)
    assert [g["lr"] for g in trainer.optimizer.param_groups] == [0.5]
    assert [g["lr"] for g in trainer.model.embeddings.optimizer.param_groups] == [0.5]
    trainer.log.close()
    changed = [r for r in strict_lines(metrics) if r["event"] == "lr_changed"]
    assert changed == [{"event": "lr_changed", "step": 2, "lr": 0.5, "embedding_lr": 0.5, "checkpoint_lr": 0.005,
                        "checkpoint_embedding_lr": 0.005}]


# --- 6-8. stale temp files, fresh runs over a checkpoint, file mode ----------------------------------------

def test_save_removes_stale_temp_files(tmp_path):
    stale, other = tmp_path / ".checkpoint-dead.tmp", tmp_path / "notes.tmp"
    for path in (stale, other):
        path.write_bytes(b"partial")
        os.utime(path, (1, 1))
    save_checkpoint(tmp_path, {"step": 1})
    assert not stale.exists() and other.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt", "notes.tmp"]


def test_fresh_run_refuses_an_existing_checkpoint(trained, monkeypatch):
    monkeypatch.setattr(Trainer, "train_step", lambda self: pytest.fail("trained over a checkpoint"))
    with pytest.raises(ValueError, match="exists: pass --resume to continue that run, or choose another"):
        Trainer(config(trained), progress=False)


def test_checkpoint_mode_follows_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        path = save_checkpoint(tmp_path, {"step": 1})
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o640


# --- 9. option ranges ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("change,message", [
    ({"cpu_threads": -1}, "--cpu-threads must be 0 or more"),
    ({"device": "tpu"}, "device must be auto, cpu or cuda"),
    ({"device": "meta"}, "device must be auto, cpu or cuda"),
    ({"eval_every": -2}, "--eval-every must be 0 or more"),
    ({"checkpoint_every": -2}, "--checkpoint-every must be 0 or more"),
    ({"synthetic_pool": -1}, "--synthetic-pool must be 0 or more"),
    ({"row_cap": 0}, "--row-cap must be at least 1"),
    ({"checkpoint_every": 2}, "--checkpoint-every needs --checkpoint-dir"),
    ({"metrics_path": "DIR"}, "is a directory"),
])
def test_resolve_names_bad_options(tmp_path, change, message):
    if change.get("metrics_path") == "DIR":
        change = {"metrics_path": tmp_path}
    with pytest.raises(ValueError, match=message):
        resolve(TrainConfig(**{**_as_kwargs(config(None)), **change}))


def test_polyrec_tables_on_the_cpu_need_the_interpreter(monkeypatch):
    """Without it the first lookup raised Triton's "0 active drivers" (a traceback on every rank)."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="set TRITON_INTERPRET=1"):
        resolve(config(None, embedding_backend="polyrec"))
    resolve(config(None, embedding_backend="torch"))


def test_cli_bad_option_exit_code():
    result = runner.invoke(app, ["train", "--steps", "2", *SMALL[:-2], "--cpu-threads", "-1"])
    assert result.exit_code == 2 and "error: --cpu-threads must be 0 or more" in result.output, result.output


@pytest.mark.parametrize("args", [["--steps", "0"], ["--steps", "-1"], ["--warmup", "-1"]])
def test_bench_e2e_refuses_bad_counts(args):
    result = runner.invoke(app, ["bench", "e2e", "--batch-size", "32", "--row-cap", "1000", *args])
    assert result.exit_code == 2 and "error: --steps must be at least 1 and --warmup 0 or more" in result.output


def test_benchmark_refuses_zero_steps():
    trainer = Trainer(config(None), progress=False)
    with pytest.raises(ValueError, match="steps >= 1"):
        trainer.benchmark(warmup=0, steps=0)
    assert math.isfinite(trainer.benchmark(warmup=0, steps=1)["last_loss"])


def test_strict_json_turns_tensors_and_numpy_values_into_numbers():
    """The metrics log wrote a tensor as the string "tensor(0.5000)" (``default=str``)."""
    import numpy as np

    from polyrec.jsontext import dumps

    text = dumps({"loss": torch.tensor(0.5), "rows": torch.tensor([1, 2]), "auc": np.float64("nan"),
                  "rate": np.float32(2.0), "pair": (float("inf"), 1)})
    assert json.loads(text) == {"loss": 0.5, "rows": [1, 2], "auc": None, "rate": 2.0, "pair": [None, 1]}
