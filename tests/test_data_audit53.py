"""Data readers given a file of another format by mistake: a tar archive (Criteo Kaggle's dac.tar.gz once
gunzipped) and a NumPy .npy array (TorchRec's MLPerf DLRMv2 day_N_*.npy) are named, not read as rows."""

from __future__ import annotations

import io
import re
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

from polyrec.data import DataError, open_source
from test_data import small, write_records

DATA = Path(__file__).parent / "data"
CPU = torch.device("cpu")


def tar_of(path: Path, members: dict[str, bytes], fmt: int) -> Path:
    with tarfile.open(path, "w", format=fmt) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
@pytest.mark.parametrize("skip", [False, True])
def test_a_tar_archive_is_refused_as_an_archive(tmp_path, fmt, skip):
    """Was 'dac.tar:1: label must be 0 or 1' (the tar header glued to the first row); under --skip-bad-rows the
    rows inside the archive were trained on, the header block and padding counted as bad rows."""
    path = tar_of(tmp_path / "dac.tar", {"train.txt": (DATA / "criteo_sample.tsv").read_bytes()}, fmt)
    with pytest.raises(DataError, match=rf"{re.escape(str(path))}:0: a tar archive, not Criteo TSV data: extract "
                                        "its files first"):
        open_source(f"criteo:{path}", small(), batch_size=4, seed=0, device=CPU, skip_bad_rows=skip).next_batch()


@pytest.mark.parametrize("skip", [False, True])
def test_a_numpy_array_is_refused_as_mlperf_data(tmp_path, skip):
    """Was 'day_0_labels.npy:101: record 101 is truncated', and under --skip-bad-rows the labels (0/1 int32s,
    forty to a "record") trained as records, two bad rows reported."""
    path = tmp_path / "day_0_labels.npy"
    np.save(path, np.random.default_rng(0).integers(0, 2, 4000).astype(np.int32))
    with pytest.raises(DataError, match=rf"{re.escape(str(path))}:0: a NumPy \.npy array, not MLPerf binary data: "
                                        r"mlperf:PATH reads the DLRM reference's \*_processed\.bin"):
        open_source(f"mlperf:{path}", small(), batch_size=16, seed=0, device=CPU, skip_bad_rows=skip).next_batch()


def test_files_of_the_three_formats_are_still_read(tmp_path):
    """The format checks look past byte 257: files of each format long enough to reach it still open."""
    write_records(tmp_path / "r.bin", 8)
    for spec in (f"criteo:{DATA / 'criteo_sample.tsv'}", f"mlperf:{tmp_path / 'r.bin'}",
                 f"movielens:{DATA / 'ml_sample.data'}"):
        assert open_source(spec, small(), batch_size=4, seed=0, device=CPU).next_batch().batch_size == 4


@pytest.mark.parametrize("kind, name", [("criteo", "criteo_sample.tsv"), ("movielens", "ml_sample.data")])
def test_a_home_relative_path_is_expanded(tmp_path, monkeypatch, kind, name):
    """The shell expands ``~`` only at a word's start, not in ``criteo:~/x``: was 'file not found: ~/x'."""
    if not (DATA / name).is_file():
        pytest.skip(f"{name} not in tests/data")
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / name).write_bytes((DATA / name).read_bytes())
    batch = open_source(f"{kind}:~/{name}", small(), batch_size=4, seed=0, device=CPU).next_batch()
    assert batch.labels.numel() == 4


def test_an_unlabelled_criteo_row_says_so(tmp_path):
    """Kaggle's test.txt said only 'expected 40 tab-separated columns, found 39'."""
    row = (DATA / "criteo_sample.tsv").read_bytes().split(b"\n")[0]
    path = tmp_path / "test.txt"
    path.write_bytes(row.split(b"\t", 1)[1] + b"\n")
    with pytest.raises(DataError, match="found 39 \\(no label column: Criteo Kaggle's test.txt is unlabelled\\)"):
        open_source(f"criteo:{path}", small(), batch_size=1, seed=0, device=CPU).next_batch()


def test_a_movielens_1m_ratings_file_is_named(tmp_path):
    """Was '.inter header lacks column(s) user_id, ...' for the '::'-separated ratings.dat."""
    path = tmp_path / "ratings.dat"
    path.write_text("1::1193::5::978300760\n1::661::3::978302109\n")
    with pytest.raises(DataError, match="MovieLens 1M/10M ratings.dat"):
        open_source(f"movielens:{path}", small(), batch_size=1, seed=0, device=CPU).next_batch()
