"""A first-time user's audit of polyrec.models and polyrec.data through their Python API: each test failed
before its fix (a silent wrong result, or an error that did not say what was wrong)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from polyrec.data import BadRows, DataError, open_source
from polyrec.data.movielens import MovieLensSource
from polyrec.models import DLRM, preset

sys.path.insert(0, str(Path(__file__).parent))
from test_models import jagged, tiny  # noqa: E402

DATA = Path(__file__).parent / "data"
CPU = torch.device("cpu")


def spec_of(kind: str, tmp_path: Path) -> str:
    """A data spec of ``kind`` over a small file of that format."""
    if kind == "synthetic":
        return "synthetic"
    if kind == "mlperf":
        records = np.zeros((16, 40), "<i4")
        records[:, 0] = np.arange(16) % 2
        path = tmp_path / "records.bin"
        path.write_bytes(records.tobytes())
        return f"mlperf:{path}"
    return {"criteo": f"criteo:{DATA / 'criteo_sample.tsv'}", "movielens": f"movielens:{DATA / 'ml_sample.data'}"}[kind]


@pytest.mark.parametrize("batch_size", [0, -1, 2.5])
@pytest.mark.parametrize("kind", ["synthetic", "criteo", "mlperf", "movielens"])
def test_open_source_refuses_a_batch_size_below_one(tmp_path, kind, batch_size):
    """Was: criteo's next_batch returned None for 0, mlperf divided by zero, synthetic failed in a torch reshape,
    MovieLens gave empty batches (and its evaluation failed in range()); -1 made numpy or torch complain."""
    with pytest.raises(ValueError, match=rf"batch_size must be a whole number of at least 1, got {batch_size}"):
        open_source(spec_of(kind, tmp_path), preset("dcnv2-small"), batch_size=batch_size, seed=0, device=CPU)


@pytest.mark.parametrize("row_cap", [0, -3])
def test_open_source_refuses_a_row_cap_below_one(row_cap):
    """Was: MovieLens took its indices mod 0 (numpy's warning, every index 0, tables of 0 rows) or mod -3 (indices
    -2..0)."""
    with pytest.raises(ValueError, match=rf"row_cap must be a whole number of at least 1 \(or None\), got {row_cap}"):
        open_source(f"movielens:{DATA / 'ml_sample.data'}", preset("dcnv2-small"), batch_size=8, seed=0, device=CPU,
                    row_cap=row_cap)


def movielens_with(tmp_path: Path, line: bytes, at: int = 4) -> Path:
    """ml_sample.data with ``line`` inserted as line ``at`` (1-based)."""
    lines = (DATA / "ml_sample.data").read_bytes().splitlines(keepends=True)
    path = tmp_path / "edited.data"
    path.write_bytes(b"".join(lines[:at - 1]) + line + b"".join(lines[at - 1:]))
    return path


@pytest.mark.parametrize("rating", [b"7", b"0", b"-1", b"5.5", b"40"])
def test_a_movielens_rating_out_of_range_is_a_bad_row(tmp_path, rating):
    """Was read as a rating: 7 and 40 as "liked", 0 and -1 as not, with no word said."""
    path = movielens_with(tmp_path, b"1\t2\t" + rating + b"\t883498085\n")
    with pytest.raises(DataError, match=rf"edited\.data:4: rating must be from 0.5 to 5 stars, got {rating.decode()}"):
        MovieLensSource(path, batch_size=8, seed=0, bad_rows=BadRows(skip=False))
    skipped = MovieLensSource(path, batch_size=8, seed=0, bad_rows=BadRows(skip=True))
    assert skipped.bad_rows.count == 1 and len(skipped.label) == 400


def test_movielens_half_stars_and_the_ends_of_the_scale_are_read(tmp_path):
    path = movielens_with(tmp_path, b"1\t2\t0.5\t1\n7\t8\t4.5\t2\n9\t3\t5.0\t3\n")
    source = MovieLensSource(path, batch_size=8, seed=0, bad_rows=BadRows(skip=False))
    assert source.bad_rows.count == 0 and len(source.label) == 403


def test_an_inter_header_naming_a_column_twice_is_refused(tmp_path):
    """Was: the first 'rating' column read and the second ignored, silently."""
    lines = (DATA / "ml_sample.inter").read_text().splitlines()
    path = tmp_path / "twice.inter"
    path.write_text("\n".join([lines[0] + "\trating:float"] + [line + "\t1" for line in lines[1:]]) + "\n")
    with pytest.raises(DataError, match=r"twice\.inter:1: \.inter header names column\(s\) rating more than once"):
        MovieLensSource(path, batch_size=8, seed=0, bad_rows=BadRows(skip=False))


def test_inter_columns_in_another_order_and_extra_ones_read_the_same(tmp_path):
    lines = [line.split("\t") for line in (DATA / "ml_sample.inter").read_text().splitlines()]
    path = tmp_path / "reordered.inter"
    path.write_text("".join("\t".join([f[3], "x:token" if n == 0 else "x", f[2], f[1], f[0]]) + "\n"
                            for n, f in enumerate(lines)))
    given = MovieLensSource(DATA / "ml_sample.inter", batch_size=8, seed=0, bad_rows=BadRows(skip=False))
    got = MovieLensSource(path, batch_size=8, seed=0, bad_rows=BadRows(skip=False))
    assert np.array_equal(got.user, given.user) and np.array_equal(got.item, given.item)
    assert np.array_equal(got.label, given.label) and np.array_equal(got.time, given.time)


def model_and_batch(batch: int = 3) -> tuple[DLRM, torch.Tensor, torch.Tensor, torch.Tensor]:
    config = tiny("dcnv2")
    gen = torch.Generator().manual_seed(0)
    values, offsets = jagged(config, batch, gen)
    return DLRM(config), torch.randn(batch, config.num_dense, generator=gen), values, offsets


def test_torch_tables_refuse_values_beyond_the_last_offset():
    """Was: the values after offsets[-1] dropped without a word (the logits of the values the offsets cover)."""
    model, dense, values, offsets = model_and_batch()
    longer = torch.cat([values, values[:2]])
    with pytest.raises(ValueError, match=rf"offsets\[-1\] must equal nnz = {longer.numel()}, got {values.numel()}"):
        model(dense, longer, offsets)


def test_torch_tables_refuse_offsets_that_do_not_start_at_zero():
    """Was: the values before offsets[0] dropped without a word."""
    model, dense, values, offsets = model_and_batch()
    shifted = offsets.clone()
    shifted[0] = 1
    with pytest.raises(ValueError, match=r"offsets\[0\] must be 0, got 1"):
        model(dense, values, shifted)


@pytest.mark.parametrize("bad_id", [7, -1])
def test_torch_tables_name_the_feature_of_an_id_out_of_range(bad_id):
    """Was torch's "Expected i < index_size to be true, but got false" (naming no feature, id or table size)."""
    model, dense, _, _ = model_and_batch(batch=2)
    values = torch.tensor([0, bad_id, 0, 0, 12, 3])  # one id per bag; feature 0's table has 7 rows
    with pytest.raises(ValueError, match=rf"feature 0: id {bad_id} at values\[1\] is out of range \[0, 7\)"):
        model(dense, values, torch.arange(7))


@pytest.mark.parametrize("shape", [(3, 4), (3, 6), (5,), (3, 5, 1)])
def test_dlrm_names_dense_features_of_another_shape(shape):
    """Was torch's "mat1 and mat2 shapes cannot be multiplied", or for a 1-D dense an offsets error that blamed
    the ids (its length was taken as the batch size)."""
    model, _, values, offsets = model_and_batch()
    with pytest.raises(ValueError, match=re.escape(f"dense must be [B, num_dense] = [B, 5], got {shape}")):
        model(torch.randn(shape), values, offsets)


def test_dense_forward_names_embeddings_of_another_batch():
    model, dense, values, offsets = model_and_batch()
    emb = model.embed(values, offsets, 3)
    with pytest.raises(ValueError, match=re.escape("emb must be [B, F, D] = [3, 3, 4], got (2, 3, 4)")):
        model.dense_forward(dense, emb[:2])


def test_good_input_still_gives_the_same_logits():
    model, dense, values, offsets = model_and_batch()
    assert model(dense, values, offsets).shape == (3,)


def test_a_criteo_file_with_a_header_line_says_so(tmp_path):
    """A header row was reported as "label must be 0 or 1, got b'label'" with no word of headers."""
    data = Path(__file__).parent / "data" / "criteo_sample.tsv"
    path = tmp_path / "with_header.tsv"
    header = "\t".join(["label"] + [f"I{k}" for k in range(1, 14)] + [f"C{k}" for k in range(1, 27)])
    path.write_text(header + "\n" + data.read_text())
    source = open_source(f"criteo:{path}", preset("dcnv2-small"), batch_size=4, seed=0, device=torch.device("cpu"))
    with pytest.raises(DataError, match=r":1: label must be 0 or 1, got b'label' \(a header line\? Criteo TSV "
                                        r"files have none\)"):
        source.next_batch()


def test_a_criteo_tsv_given_as_mlperf_data_is_named_text(tmp_path):
    """A TSV given as mlperf: was read as binary records: "record N is truncated" and every label bad."""
    data = Path(__file__).parent / "data" / "criteo_sample.tsv"
    with pytest.raises(DataError, match=r"starts with text .*not MLPerf's binary records.*criteo:PATH"):
        open_source(f"mlperf:{data}", preset("dcnv2-small"), batch_size=4, seed=0, device=torch.device("cpu"))


def test_table_rows_past_int64_are_refused_naming_the_field():
    """2**63 rows passed the config's checks and failed later, inside torch."""
    with pytest.raises(ValueError, match=r"table_rows must be at most 9223372036854775807 \(row ids are int64\)"):
        preset("dcnv2-small").replace(table_rows=(2**63,) * 26)


@pytest.mark.parametrize("cap", [None, 2.5, "1000"])
def test_a_row_cap_that_is_no_whole_number_is_refused(cap):
    """with_capped_rows(None) raised a bare TypeError from min()."""
    with pytest.raises(ValueError, match="a row cap must be a whole number"):
        preset("dcnv2-small").with_capped_rows(cap)
