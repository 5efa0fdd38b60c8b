"""Checkpoints: atomic writes, weights_only loads, and resume that continues the same loss curve bit for bit."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from polyrec.cli import app
from polyrec.runtime import TrainConfig, Trainer
from polyrec.runtime.checkpoint import load_checkpoint, save_checkpoint

DATA = Path(__file__).parent / "data"


def config(tmp: Path, steps: int, data: str = "synthetic", **kw) -> TrainConfig:
    return TrainConfig(preset="dcnv2-small", data=data, steps=steps, batch_size=32, row_cap=2000, log_every=1,
                       checkpoint_dir=tmp, device="cpu", cpu_threads=1, **kw)


@pytest.mark.parametrize("data,optimizer", [
    ("synthetic", "rowwise_adagrad"),
    (f"criteo:{DATA / 'criteo_sample.tsv'}", "adagrad"),  # 48 rows: the stream wraps into a new epoch
    (f"movielens:{DATA / 'ml_sample.inter'}", "adam"),
])
def test_resume_continues_the_same_losses_bitwise(tmp_path, data, optimizer):
    kw = {"data": data, "embedding_optimizer": optimizer, "dense_optimizer": "adam" if optimizer == "adam" else "adagrad"}
    straight = Trainer(config(tmp_path / "a", 10, **kw), progress=False).train()
    first = Trainer(config(tmp_path / "b", 5, **kw), progress=False).train()
    assert first.status == "done" and first.checkpoint == tmp_path / "b" / "checkpoint.pt"
    resumed = Trainer(config(tmp_path / "b", 10, resume=True, **kw), progress=False).train()
    assert len(straight.losses) == 10 and len(resumed.losses) == 5
    assert first.losses == straight.losses[:5]
    assert resumed.losses == straight.losses[5:]  # bitwise: same floats, not merely close
    assert resumed.step == 10


def test_checkpoint_holds_only_plain_data(tmp_path):
    Trainer(config(tmp_path, 3), progress=False).train()
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert state["step"] == 3 and state["data"] == {"position": 3}
    assert set(state) >= {"dense", "embeddings", "dense_optimizer", "rng", "train_config", "model_config"}
    assert not list(tmp_path.glob(".checkpoint-*"))  # no temp file left behind


def test_a_write_syncs_its_directory_after_the_rename(tmp_path, monkeypatch):
    """The rename is on disk only once the directory is synced (was not: a power cut could lose the new name;
    the sharded checkpoint's manifest was not synced at all)."""
    import errno
    import os

    import polyrec.files as files
    from polyrec.runtime.sharded_checkpoint import MANIFEST

    synced, sync = [], files.sync_directory
    monkeypatch.setattr(files, "sync_directory", lambda d: synced.append((d, sorted(os.listdir(d)))) or sync(d))
    save_checkpoint(tmp_path, {"step": 1})
    assert synced == [(tmp_path, ["checkpoint.pt"])]  # after the rename, the temp file gone
    files.atomic_write(tmp_path / MANIFEST, lambda f: f.write(b"{}"), prefix=".m-")
    assert synced[-1] == (tmp_path, ["checkpoint.pt", MANIFEST]) and (tmp_path / MANIFEST).read_text() == "{}"

    def failing(code):
        def fsync(fd):
            raise OSError(code, os.strerror(code))
        return fsync

    monkeypatch.setattr(os, "fsync", failing(errno.EINVAL))
    sync(tmp_path)  # a file system that cannot sync a directory: nothing more to do
    monkeypatch.setattr(os, "fsync", failing(errno.EIO))
    with pytest.raises(OSError, match=os.strerror(errno.EIO)):
        sync(tmp_path)


def test_failed_write_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    save_checkpoint(tmp_path, {"step": 1})

    def broken_save(obj, f):
        f.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(tmp_path, {"step": 2})
    monkeypatch.undo()
    assert load_checkpoint(tmp_path)["step"] == 1
    assert not list(tmp_path.glob(".checkpoint-*"))


def test_resume_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint to resume from: .*none/typo does not exist"):
        Trainer(config(tmp_path / "none" / "typo", 3, resume=True), progress=False)
    assert not (tmp_path / "none").exists()  # was: created before the refusal
    Trainer(config(tmp_path, 2), progress=False).train()
    other = TrainConfig(preset="dcnv2-small", steps=4, batch_size=32, row_cap=500, checkpoint_dir=tmp_path,
                        device="cpu", resume=True)
    with pytest.raises(ValueError, match="holds another model, table_rows"):
        Trainer(other, progress=False)


def test_the_last_steps_checkpoint_is_written_once(tmp_path, monkeypatch):
    """Was twice when the last step was also a periodic checkpoint's (a second 100 GB write at full size,
    inside a scheduler's grace period after a signal)."""
    import polyrec.runtime.trainer_state as trainer_state

    written, save = [], trainer_state.save_checkpoint

    def counted(directory, state):
        written.append(state["step"])
        return save(directory, state)

    monkeypatch.setattr(trainer_state, "save_checkpoint", counted)
    Trainer(config(tmp_path, 4, checkpoint_every=2), progress=False).train()
    assert written == [2, 4]


def test_resume_refuses_a_data_file_that_changed(tmp_path):
    """The saved byte position beyond a cut Criteo file: refused naming the file, exit code 2 through the CLI."""
    path = tmp_path / "mut.tsv"
    full = (DATA / "criteo_sample.tsv").read_bytes()
    path.write_bytes(full)
    Trainer(config(tmp_path / "run", 1, data=f"criteo:{path}"), progress=False).train()  # 32 of 48 lines read
    path.write_bytes(b"".join(full.splitlines(keepends=True)[:10]))
    with pytest.raises(ValueError, match=f"{path} changed since the checkpoint was written: .* is beyond its end"):
        Trainer(config(tmp_path / "run", 2, data=f"criteo:{path}", resume=True), progress=False)
    result = CliRunner().invoke(app, ["train", "--data", f"criteo:{path}", "--steps", "2", "--batch-size", "32",
                                      "--row-cap", "2000", "--checkpoint-dir", str(tmp_path / "run"), "--resume",
                                      "--device", "cpu", "--cpu-threads", "1"])
    assert result.exit_code == 2 and "changed since the checkpoint was written" in result.output, result.output


@pytest.mark.parametrize("backend", ["torch", "polyrec"])
def test_semi_sync_resume_is_bitwise_too(tmp_path, backend):
    """The semi-sync pipeline's batch in flight (and its one-update-old lookup) travels in the checkpoint. With
    polyrec's tables the resumed step's backward refused the lookup written in place (a custom Function's view)."""
    run = dict(pipeline="semi-sync", embedding_backend=backend)
    straight = Trainer(config(tmp_path / "a", 8, **run), progress=False).train()
    Trainer(config(tmp_path / "b", 3, **run), progress=False).train()
    assert torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=True)["prefetched"]["emb"].shape == (32, 26, 16)
    resumed = Trainer(config(tmp_path / "b", 8, resume=True, **run), progress=False).train()
    assert resumed.losses == straight.losses[3:]
