"""A first-time user's checkpoints and resume: a metrics log torn by a crash mid-write, two runs pointed at one
checkpoint directory (user audit, failing-first tests)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from polyrec.data.sources import canonical_spec
from polyrec.runtime import TrainConfig, Trainer
from polyrec.runtime.checkpoint import METRICS_NAME


def config(tmp: Path, steps: int, **kw) -> TrainConfig:
    return TrainConfig(preset="dcnv2-small", data="synthetic", steps=steps, batch_size=32, row_cap=1000, log_every=1,
                       checkpoint_dir=tmp, device="cpu", cpu_threads=1, embedding_backend="torch",
                       dense_backend="torch", **kw)


def test_a_resume_after_a_torn_metrics_line_starts_its_records_on_a_line_of_their_own(tmp_path):
    """A crash mid-write leaves a last line without its newline: the resumed run's `start` record was glued to
    it, so neither parsed and a reader lost the resumed segment's start."""
    Trainer(config(tmp_path, 2), progress=False).train()
    log = tmp_path / METRICS_NAME
    torn = '{"event": "train", "st'
    with log.open("a", encoding="utf-8") as f:
        f.write(torn)
    Trainer(config(tmp_path, 3, resume=True), progress=False).train()
    lines = log.read_text(encoding="utf-8").splitlines()
    assert torn in lines  # kept as written, on its own line
    records = [json.loads(line) for line in lines if line != torn]
    starts = [r for r in records if r["event"] == "start"]
    assert [r["step"] for r in starts] == [0, 2]
    assert records[-1]["event"] == "end" and records[-1]["step"] == 3


HOLDER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from polyrec.runtime import TrainConfig, Trainer
    cfg = TrainConfig(preset="dcnv2-small", data="synthetic", steps=10**6, batch_size=32, row_cap=1000, log_every=1,
                      device="cpu", cpu_threads=1, embedding_backend="torch", dense_backend="torch",
                      checkpoint_dir=Path(sys.argv[1]), metrics_path=Path(sys.argv[2]))
    Trainer(cfg, progress=False).train()
""")


@pytest.fixture
def training_elsewhere(tmp_path):
    """A run training in another process into ``tmp_path / "run"`` (no checkpoint there yet: it saves at its end)."""
    directory, log = tmp_path / "run", tmp_path / "elsewhere.jsonl"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(directory), str(log)])
    try:
        deadline = time.monotonic() + 120
        while '"train"' not in (log.read_text() if log.exists() else ""):
            assert holder.poll() is None and time.monotonic() < deadline, "the other run did not start training"
            time.sleep(0.2)
        yield directory, holder.pid
    finally:
        holder.kill()
        holder.wait()


def test_a_second_run_on_a_directory_in_use_is_refused_naming_the_first(training_elsewhere):
    """Two runs on one directory: each overwrote the other's checkpoint, their records interleaved in one log, and
    one's save removed the other's temp file mid-write, so that run died with `No such file or directory:
    .../.checkpoint-XXXX.tmp`, its steps since the last save lost."""
    directory, pid = training_elsewhere
    with pytest.raises(ValueError, match=rf"--checkpoint-dir {directory} is in use by another run \(process {pid}\)"):
        Trainer(config(directory, 2), progress=False)  # refused before it writes anything (its log's records)
    assert not (directory / "checkpoint.pt").exists() and not (directory / METRICS_NAME).exists()


def test_a_finished_run_leaves_the_directory_to_the_next(tmp_path):
    """The directory is held while a run trains, not after: a resume from another process goes ahead."""
    Trainer(config(tmp_path, 2), progress=False).train()
    resumed = subprocess.run([sys.executable, "-m", "polyrec", "train", "--preset", "dcnv2-small", "--steps", "3",
                              "--batch-size", "32", "--row-cap", "1000", "--device", "cpu", "--cpu-threads", "1",
                              "--embedding-backend", "torch", "--dense-backend", "torch", "--json",
                              "--checkpoint-dir", str(tmp_path), "--resume"], capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr


def test_a_checkpoint_of_another_model_is_refused_naming_what_differs(tmp_path):
    """`was written for model 'dcnv2-small' with other sizes` named neither this run's preset nor the sizes that
    differ (a --row-cap other than the first run's looked like the same model)."""
    Trainer(config(tmp_path, 1), progress=False).train()
    rows_differ = r"checkpoint\.pt holds another model, table_rows \(table 0: 1000 rows; this run has 500\)"
    with pytest.raises(ValueError, match=rows_differ):
        Trainer(dataclasses.replace(config(tmp_path, 2, resume=True), row_cap=500), progress=False)
    preset_differs = r"checkpoint\.pt holds another model, name 'dcnv2-small'; this run has 'dlrm-criteo-kaggle'"
    with pytest.raises(ValueError, match=preset_differs):
        Trainer(dataclasses.replace(config(tmp_path, 2, resume=True), preset="dlrm-criteo-kaggle"), progress=False)


def test_a_resume_names_the_same_data_as_it_likes(tmp_path, monkeypatch):
    """`synthetic` and `synthetic:zipf` (the same data), and a relative and an absolute path to one file, were
    refused as other data; other data still is."""
    Trainer(config(tmp_path, 2), progress=False).train()
    Trainer(dataclasses.replace(config(tmp_path, 3, resume=True), data="synthetic:zipf"), progress=False).train()
    with pytest.raises(ValueError, match="data 'synthetic:zipf'; this run has 'synthetic:uniform'"):
        Trainer(dataclasses.replace(config(tmp_path, 4, resume=True), data="synthetic:uniform"), progress=False)
    data = Path(__file__).parent / "data" / "criteo_sample.tsv"
    files = tmp_path / "criteo"
    Trainer(dataclasses.replace(config(files, 2), data=f"criteo:{data}"), progress=False).train()
    monkeypatch.chdir(data.parent)
    Trainer(dataclasses.replace(config(files, 3, resume=True), data="criteo:criteo_sample.tsv"), progress=False).train()


def test_a_resume_compares_a_path_holding_a_comma_as_one_path(tmp_path, monkeypatch):
    """An MLPerf binary file is read whole, commas and all, but its spec was cut at every comma when compared:
    a relative mlperf:data,v1/train.bin became mlperf:CWD/data,CWD/v1/train.bin, not the file named absolutely."""
    (tmp_path / "data,v1").mkdir()
    (tmp_path / "data,v1" / "train.bin").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    absolute = f"mlperf:{tmp_path.resolve() / 'data,v1' / 'train.bin'}"
    assert canonical_spec("mlperf:data,v1/train.bin") == absolute
    assert canonical_spec(absolute) == absolute


def test_the_compared_data_of_files_not_there_is_made_absolute_at_its_commas(tmp_path, monkeypatch):
    """The saved spec is compared before any file is read: files missing now are named absolutely, not refused
    (the reader says what is missing)."""
    monkeypatch.chdir(tmp_path)
    cwd = tmp_path.resolve()
    assert canonical_spec("criteo:a.tsv,b/c.tsv") == f"criteo:{cwd / 'a.tsv'},{cwd / 'b' / 'c.tsv'}"


def test_a_checkpoint_of_a_relative_path_resumes_from_another_working_directory(tmp_path, monkeypatch):
    """The checkpoint kept the data spec as typed: a run started with a relative path, resumed from another
    directory with the same file's absolute path, was refused as other data (the saved relative path was made
    absolute from the resume's working directory), and the same relative path there, another file, passed."""
    data = Path(__file__).parent / "data" / "criteo_sample.tsv"
    monkeypatch.chdir(data.parent)
    Trainer(dataclasses.replace(config(tmp_path, 2), data="criteo:criteo_sample.tsv"), progress=False).train()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "criteo_sample.tsv").write_bytes(data.read_bytes())
    monkeypatch.chdir(elsewhere)
    with pytest.raises(ValueError, match=f"holds data 'criteo:{data.resolve()}'; this run has 'criteo:criteo_sample"):
        Trainer(dataclasses.replace(config(tmp_path, 3, resume=True), data="criteo:criteo_sample.tsv"), progress=False)
    Trainer(dataclasses.replace(config(tmp_path, 3, resume=True), data=f"criteo:{data}"), progress=False).train()
