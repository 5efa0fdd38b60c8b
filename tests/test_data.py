"""Data sources: synthetic generator, Criteo TSV, MLPerf binary, MovieLens (u.data and .inter)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from polyrec.data import BadRows, DataError, open_source
from polyrec.data.criteo import CriteoTSVSource
from polyrec.data.mlperf import MLPerfBinarySource
from polyrec.data.movielens import MovieLensSource
from polyrec.data.synthetic import SyntheticSource
from polyrec.models import preset
from polyrec.runtime.metrics import auc

DATA = Path(__file__).parent / "data"
CPU = torch.device("cpu")


def small():
    return preset("dcnv2-small")


# --- synthetic ---------------------------------------------------------------------------------------

def test_synthetic_layout_and_ranges():
    config = small()
    src = SyntheticSource(config, batch_size=64, seed=1)
    b = src.next_batch()
    assert b.dense.shape == (64, 13) and b.labels.shape == (64,)
    assert b.offsets.shape == (26 * 64 + 1,) and int(b.offsets[-1]) == b.values.numel() == 64 * sum(config.multi_hot)
    lengths = (b.offsets[1:] - b.offsets[:-1]).view(26, 64)
    assert torch.equal(lengths, torch.tensor(config.multi_hot)[:, None].expand(26, 64))
    for f, rows in enumerate(config.table_rows):
        ids = b.values[b.offsets[f * 64]:b.offsets[(f + 1) * 64]]
        assert int(ids.min()) >= 0 and int(ids.max()) < rows
    assert set(b.labels.unique().tolist()) <= {0.0, 1.0}
    assert bool((b.dense >= 0).all())


def test_feature_bounds_are_the_offsets_every_feature_starts_and_ends_at():
    """Batch.feature_bounds: the synthetic source and the file readers set them (one-hot: every B-th offset); a host
    batch without them gives them when moved (``to``, ``pinned``) and keeps them padded (the padding's bags are
    empty)."""
    src = SyntheticSource(small(), batch_size=64, seed=1)
    b = src.next_batch()
    assert b.feature_bounds == tuple(b.offsets[::64].tolist()) and len(b.feature_bounds) == 27
    tsv = CriteoTSVSource([DATA / "criteo_sample.tsv"], small(), batch_size=8, bad_rows=BadRows(skip=False))
    read = tsv.next_batch()
    assert read.feature_bounds == tuple(read.offsets[::8].tolist())
    host = dataclasses.replace(read, feature_bounds=None)
    moved = host.to(CPU)
    assert moved.feature_bounds == tuple(host.offsets[::8].tolist())
    padded = moved.padded(11)
    assert padded.feature_bounds == moved.feature_bounds == tuple(padded.offsets[::11].tolist())


def test_synthetic_is_deterministic_and_resumable():
    config = small()
    a = SyntheticSource(config, batch_size=32, seed=4)
    batches = [a.next_batch() for _ in range(3)]
    b = SyntheticSource(config, batch_size=32, seed=4)
    b.load_state_dict({"position": 2})
    again = b.next_batch()
    assert torch.equal(again.values, batches[2].values) and torch.equal(again.labels, batches[2].labels)
    other = SyntheticSource(config, batch_size=32, seed=5).next_batch()
    assert not torch.equal(other.values, batches[0].values)


def test_synthetic_pool_repeats_the_first_batches():
    src = SyntheticSource(small(), batch_size=16, seed=2, pool=2)
    a, b, c = src.next_batch(), src.next_batch(), src.next_batch()
    assert c is a and not torch.equal(a.values, b.values)
    assert torch.equal(a.values, SyntheticSource(small(), batch_size=16, seed=2).next_batch().values)


def test_synthetic_zipf_is_skewed_and_uniform_is_not():
    config = small().replace(table_rows=(1000,) * 26, multi_hot=(1,) * 26)
    zipf = SyntheticSource(config, batch_size=2048, seed=0).next_batch().values
    uni = SyntheticSource(config, batch_size=2048, seed=0, distribution="uniform").next_batch().values
    zipf_top = float((zipf < 10).float().mean())
    uni_top = float((uni < 10).float().mean())
    assert zipf_top > 0.3 and abs(uni_top - 0.01) < 0.01


def test_synthetic_labels_follow_the_hidden_model():
    src = SyntheticSource(small(), batch_size=8192, seed=0)
    b = src.next_batch()
    score = auc(src._hidden_logits(b.dense, b.values), b.labels)
    assert 0.72 < score < 0.9  # learnable: the hidden model itself ranks clearly above chance
    assert 0.2 < float(b.labels.mean()) < 0.5


# --- Criteo TSV ----------------------------------------------------------------------------------------

def first_line_fields() -> list[str]:
    return (DATA / "criteo_sample.tsv").read_text().splitlines()[0].split("\t")


def test_criteo_tsv_parses_hashes_and_log_transforms():
    config = small()
    src = CriteoTSVSource([DATA / "criteo_sample.tsv"], config, batch_size=8, bad_rows=BadRows(skip=False))
    b = src.next_batch().to(CPU)  # the ids taken mod their rows where the batch lands (``Batch.mod_rows``)
    fields = first_line_fields()
    assert b.labels[0] == float(fields[0])
    want_dense = [math.log(max(int(x), 0) + 1) if x else 0.0 for x in fields[1:14]]
    torch.testing.assert_close(b.dense[0], torch.tensor(want_dense, dtype=torch.float32))
    for f in range(26):  # sample 0 of feature f is values[f * B]
        raw = fields[14 + f]
        assert int(b.values[f * 8]) == (int(raw, 16) if raw else 0) % config.table_rows[f]
    assert torch.equal(b.offsets, torch.arange(26 * 8 + 1))


def test_criteo_tsv_resume_and_epochs():
    config = small()
    a = CriteoTSVSource([DATA / "criteo_sample.tsv"], config, batch_size=20, bad_rows=BadRows(skip=False))
    seq = [a.next_batch() for _ in range(4)]  # 80 rows of a 48-row file: wraps into epoch 1
    assert a.epoch == 1
    b = CriteoTSVSource([DATA / "criteo_sample.tsv"], config, batch_size=20, bad_rows=BadRows(skip=False))
    b.next_batch()
    state = b.state_dict()
    c = CriteoTSVSource([DATA / "criteo_sample.tsv"], config, batch_size=20, bad_rows=BadRows(skip=False))
    c.load_state_dict(state)
    for want in seq[1:]:
        got = c.next_batch()
        assert torch.equal(got.values, want.values) and torch.equal(got.dense, want.dense)


def test_criteo_tsv_bad_row_names_file_and_line():
    src = CriteoTSVSource([DATA / "criteo_bad.tsv"], small(), batch_size=8, bad_rows=BadRows(skip=False))
    with pytest.raises(DataError, match=r"criteo_bad\.tsv:5: expected 40 tab-separated columns, found 30"):
        src.next_batch()


def test_criteo_tsv_skip_bad_rows_counts_them():
    bad = BadRows(skip=True)
    src = CriteoTSVSource([DATA / "criteo_bad.tsv"], small(), batch_size=16, bad_rows=bad)
    b = src.next_batch()
    assert b.labels.shape == (16,) and bad.count == 4
    assert [e.split(": ", 1)[0].rsplit(":", 1)[1] for e in bad.examples] == ["5", "10", "15", "18"]
    assert "label must be 0 or 1" in bad.examples[1] and "must be hex" in bad.examples[3]


# --- MLPerf binary -------------------------------------------------------------------------------------

def write_records(path: Path, n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rec = np.empty((n, 40), dtype="<i4")
    rec[:, 0] = rng.integers(0, 2, n)
    rec[:, 1:14] = rng.integers(-1, 1000, (n, 13))
    rec[:, 14:] = rng.integers(0, 2**31 - 1, (n, 26))
    rec.tofile(path)
    return rec


def test_mlperf_binary_reads_records(tmp_path):
    config = small()
    rec = write_records(tmp_path / "train.bin", 30)
    src = MLPerfBinarySource(tmp_path / "train.bin", config, batch_size=12, bad_rows=BadRows(skip=False))
    b = src.next_batch().to(CPU)  # the ids taken mod their rows where the batch lands (``Batch.mod_rows``)
    torch.testing.assert_close(b.labels, torch.from_numpy(rec[:12, 0].astype(np.float32)))
    torch.testing.assert_close(b.dense, torch.from_numpy(np.log(np.maximum(rec[:12, 1:14], 0) + 1.0).astype(np.float32)))
    want = (rec[:12, 14:].astype(np.int64) % np.asarray(config.table_rows)).T.reshape(-1)
    assert torch.equal(b.values, torch.from_numpy(want))
    src.next_batch()
    third = src.next_batch()  # records 24..29 then 0..5: wraps into epoch 1
    assert src.epoch == 1 and torch.equal(third.labels[6:], b.labels[:6])


def test_mlperf_binary_errors(tmp_path):
    write_records(tmp_path / "t.bin", 5)
    with open(tmp_path / "t.bin", "ab") as f:
        f.write(b"\0" * 12)
    with pytest.raises(DataError, match=r"t\.bin:6: row 6 is truncated"):
        MLPerfBinarySource(tmp_path / "t.bin", small(), batch_size=4, bad_rows=BadRows(skip=False))
    rec = write_records(tmp_path / "l.bin", 8)
    rec[2, 0] = 7
    rec.tofile(tmp_path / "l.bin")
    with pytest.raises(DataError, match=r"l\.bin:3: row 3: label must be 0 or 1"):
        MLPerfBinarySource(tmp_path / "l.bin", small(), batch_size=4, bad_rows=BadRows(skip=False)).next_batch()
    bad = BadRows(skip=True)
    b = MLPerfBinarySource(tmp_path / "l.bin", small(), batch_size=4, bad_rows=bad).next_batch()
    assert bad.count == 1 and torch.equal(b.labels, torch.from_numpy(rec[[0, 1, 3, 4], 0].astype(np.float32)))


# --- MovieLens -----------------------------------------------------------------------------------------

def test_movielens_udata_and_inter_agree():
    a = MovieLensSource(DATA / "ml_sample.data", batch_size=32, seed=0, bad_rows=BadRows(skip=False))
    b = MovieLensSource(DATA / "ml_sample.inter", batch_size=32, seed=0, bad_rows=BadRows(skip=False))
    assert (a.num_users, a.num_items) == (b.num_users, b.num_items)
    x, y = a.next_batch(), b.next_batch()
    assert torch.equal(x.values, y.values) and torch.equal(x.labels, y.labels) and torch.equal(x.dense, y.dense)
    config = a.adapt(small())
    assert config.table_rows == (a.num_users, a.num_items) and config.num_dense == 1
    assert len(a.test_rows) == 80 and len(set(a.test_rows) & set(a.train_rows)) == 0
    ratings = np.loadtxt(DATA / "ml_sample.data", dtype=np.int64)
    assert float(x.labels.sum()) == float((ratings[a._order[:32], 2] >= 4).sum())
    test_labels = torch.cat([t.labels for t in a.eval_batches()])
    assert test_labels.numel() == 80


def test_movielens_resume_continues_the_shuffle():
    a = MovieLensSource(DATA / "ml_sample.data", batch_size=100, seed=3, bad_rows=BadRows(skip=False))
    seq = [a.next_batch() for _ in range(5)]  # 320 training rows: wraps after 3 batches
    b = MovieLensSource(DATA / "ml_sample.data", batch_size=100, seed=3, bad_rows=BadRows(skip=False))
    b.next_batch()
    b.next_batch()
    state = b.state_dict()
    c = MovieLensSource(DATA / "ml_sample.data", batch_size=100, seed=3, bad_rows=BadRows(skip=False))
    c.load_state_dict(state)
    for want in seq[2:]:
        assert torch.equal(c.next_batch().values, want.values)


def test_movielens_row_cap_caps_both_tables():
    """--row-cap N: user and item indices taken mod N, as Criteo's hashed ids are taken mod the capped rows."""
    full = MovieLensSource(DATA / "ml_sample.data", batch_size=32, seed=0, bad_rows=BadRows(skip=False))
    capped = open_source(f"movielens:{DATA / 'ml_sample.data'}", small().with_capped_rows(10), batch_size=32,
                         seed=0, device=CPU, row_cap=10)
    assert (full.num_users, full.num_items) == (30, 40) and (capped.num_users, capped.num_items) == (10, 10)
    assert capped.adapt(small()).table_rows == (10, 10)
    x, y = full.next_batch(), capped.next_batch()
    assert torch.equal(y.values, x.values % 10) and torch.equal(y.labels, x.labels)
    assert torch.equal(torch.cat([b.values for b in capped.eval_batches()]),
                       torch.cat([b.values for b in full.eval_batches()]) % 10)
    roomy = MovieLensSource(DATA / "ml_sample.data", batch_size=32, seed=0, bad_rows=BadRows(skip=False), row_cap=35)
    assert (roomy.num_users, roomy.num_items) == (30, 35)


def test_movielens_bad_rows():
    with pytest.raises(DataError, match=r"ml_bad\.inter:8: rating and timestamp must be numbers"):
        MovieLensSource(DATA / "ml_bad.inter", batch_size=8, seed=0, bad_rows=BadRows(skip=False))
    bad = BadRows(skip=True)
    src = MovieLensSource(DATA / "ml_bad.inter", batch_size=8, seed=0, bad_rows=bad)
    assert bad.count == 2 and "ml_bad.inter:13: expected 4 tab-separated columns, found 2" in bad.examples[1]
    assert len(src.train_rows) + len(src.test_rows) == 38


# --- specs ---------------------------------------------------------------------------------------------

def test_open_source_specs():
    with pytest.raises(ValueError, match="unknown data 'parquet:x'"):
        open_source("parquet:x", small(), batch_size=4, seed=0, device=CPU)
    with pytest.raises(ValueError, match="data 'criteo' needs a path"):
        open_source("criteo", small(), batch_size=4, seed=0, device=CPU)
    with pytest.raises(FileNotFoundError, match="nope.tsv"):
        open_source("criteo:/nope.tsv", small(), batch_size=4, seed=0, device=CPU)
    src = open_source(f"criteo:{DATA / 'criteo_sample.tsv'}", small(), batch_size=4, seed=0, device=CPU,
                      eval_spec=f"criteo:{DATA / 'criteo_sample.tsv'}", num_eval_batches=2)
    assert len(src.eval_batches()) == 2
    with pytest.raises(ValueError, match="Criteo data has 26 categorical features"):
        src.adapt(small().replace(table_rows=(5, 5), multi_hot=(1, 1)))
