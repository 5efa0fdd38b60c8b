"""MLPerf v3+ multi-hot days (``mlperf:DIR/day_N_sparse_multi_hot.npz``): batches against a plain numpy reference,
bags with repeated ids, exact resume, ranks dealt blocks in turn, bad rows named and skipped, and the files
refused (a compressed .npz, a missing sibling, row counts that differ, widths that differ)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from polyrec.cli import app
from polyrec.data import BadRows, Batch, DataError, open_source
from polyrec.data.mlperf import RecordSource
from polyrec.data.multihot import MultiHotRecords
from test_data import small, write_records

CPU = torch.device("cpu")
HOT = (3, 2, 1, 2, 4, 1, 1, 1, 1, 5, 3, 2, 1, 4, 2, 3, 1, 1, 1, 2, 6, 3, 2, 3, 1, 1)  # 26 small widths


def write_day(directory: Path, day: int, rows: int, seed: int = 0, hot: tuple[int, ...] = HOT,
              save=np.savez) -> dict:
    """Day ``day`` of random rows in MLPerf's layout under ``directory``: dense float32 [rows, 13] (any values: the
    reader takes them as they are), labels int32 [rows, 1], ids int32 [rows, hot_f] over int32's range. Returns the
    arrays and the .npz path."""
    rng = np.random.default_rng(seed)
    arrays = {"dense": rng.normal(size=(rows, 13)).astype(np.float32),
              "labels": rng.integers(0, 2, (rows, 1)).astype(np.int32),
              "ids": [rng.integers(0, 2**31 - 1, (rows, h)).astype(np.int32) for h in hot]}
    save_day(directory, day, arrays, save)
    return arrays


def save_day(directory: Path, day: int, arrays: dict, save=np.savez) -> Path:
    np.save(directory / f"day_{day}_dense.npy", arrays["dense"])
    np.save(directory / f"day_{day}_labels.npy", arrays["labels"])
    npz = directory / f"day_{day}_sparse_multi_hot.npz"
    save(npz, **{str(f): ids for f, ids in enumerate(arrays["ids"])})
    return npz


def npz(directory: Path, day: int = 0) -> Path:
    return directory / f"day_{day}_sparse_multi_hot.npz"


def source(paths: list[Path], batch: int, bad: BadRows | None = None, **kw) -> RecordSource:
    return RecordSource(MultiHotRecords(paths), small(), batch_size=batch, bad_rows=bad or BadRows(skip=False), **kw)


def reference(days: list[dict], positions: list[int], table_rows: tuple[int, ...]) -> Batch:
    """The batch of rows ``positions`` (0-based in the days one after another), built row by row."""
    rows = [(day, i) for day in days for i in range(day["labels"].shape[0])]
    picked = [rows[p] for p in positions]
    values, offsets = [], [0]
    for f, table in enumerate(table_rows):
        for day, i in picked:
            values += [int(x) % table for x in day["ids"][f][i]]
            offsets.append(len(values))
    return Batch(dense=torch.tensor(np.stack([day["dense"][i] for day, i in picked])),
                 values=torch.tensor(values, dtype=torch.int64), offsets=torch.tensor(offsets, dtype=torch.int64),
                 labels=torch.tensor([float(day["labels"][i, 0]) for day, i in picked]))


def assert_same(got: Batch, want: Batch) -> None:
    """``got`` as it lands on a device (its ids taken mod their rows there: ``Batch.mod_rows``) equals ``want``."""
    got, want = got.to(CPU), want.to(CPU)
    assert got.mod_rows is None
    for name in ("dense", "values", "offsets", "labels"):
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == b.dtype and torch.equal(a, b), name


def bags(batch: Batch) -> list[list[list[int]]]:
    """Per row, per feature, the bag's ids (taken mod their rows, as on a device)."""
    batch = batch.to(CPU)
    b, offsets, values = batch.batch_size, batch.offsets.tolist(), batch.values.tolist()
    return [[values[offsets[f * b + r]:offsets[f * b + r + 1]] for f in range(batch.num_features)] for r in range(b)]


def test_batches_equal_a_numpy_reference_over_days_and_epochs(tmp_path):
    """Two days of 13 and 7 rows, batch 6: batches run across the days' end and the epoch's, dense values as stored
    (no log transform), ids mod the capped table rows, each feature's bags as wide as its member."""
    days = [write_day(tmp_path, 0, 13, seed=1), write_day(tmp_path, 1, 7, seed=2)]
    src = open_source(f"mlperf:{npz(tmp_path, 0)},{npz(tmp_path, 1)}", small(), batch_size=6, seed=0, device=CPU)
    table_rows = small().table_rows
    for step in range(5):
        assert_same(src.next_batch(), reference(days, [(step * 6 + i) % 20 for i in range(6)], table_rows))
    assert src.adapt(small()).multi_hot == HOT and src.adapt(small()).num_dense == 13


def test_duplicate_ids_within_a_bag_are_kept(tmp_path):
    arrays = write_day(tmp_path, 0, 4)
    arrays["ids"][0][1] = [7, 7, 7]
    arrays["ids"][20][0] = [5, 9, 5, 5, 9, 5]
    save_day(tmp_path, 0, arrays)
    got = bags(source([npz(tmp_path)], 4).next_batch())
    assert got[1][0] == [7, 7, 7] and got[0][20] == [5, 9, 5, 5, 9, 5]


def test_resume_reads_the_same_next_batches(tmp_path):
    write_day(tmp_path, 0, 11)
    write_day(tmp_path, 1, 6, seed=3)
    paths = [npz(tmp_path, 0), npz(tmp_path, 1)]
    run = source(paths, 4)
    for _ in range(3):
        run.next_batch()
    state = run.state_dict()
    want = [run.next_batch() for _ in range(5)]
    resumed = source(paths, 4)
    resumed.load_state_dict(state)
    for w in want:
        assert_same(resumed.next_batch(), w)


@pytest.mark.parametrize("batch,world", [(4, 2), (4, 3), (5, 2)])
def test_ranks_together_read_what_one_rank_reads_with_a_batch_world_times_as_large(tmp_path, batch, world):
    write_day(tmp_path, 0, 17)
    write_day(tmp_path, 1, 9, seed=5)
    paths = [npz(tmp_path, 0), npz(tmp_path, 1)]
    one = source(paths, batch * world)
    ranks = [source(paths, batch, rank=r, world_size=world) for r in range(world)]
    for _ in range(4):
        want = one.next_batch()
        got = [r.next_batch() for r in ranks]
        assert torch.equal(torch.cat([g.dense for g in got]), want.dense)
        assert sum((bags(g) for g in got), []) == bags(want)


def bad_day(tmp_path: Path, problems: tuple[str, ...] = ("label", "id", "dense")) -> dict:
    """A day of 12 rows with ``problems``: row 3's label is 2, row 6 holds a negative id in member 9, row 9 a NaN
    dense value."""
    arrays = write_day(tmp_path, 0, 12)
    if "label" in problems:
        arrays["labels"][2, 0] = 2
    if "id" in problems:
        arrays["ids"][9][5, 1] = -4
    if "dense" in problems:
        arrays["dense"][8, 10] = np.nan
    save_day(tmp_path, 0, arrays)
    return arrays


@pytest.mark.parametrize("problem,message", [
    ("label", r"day_0_labels\.npy:3: row 3: label must be 0 or 1, got 2$"),
    ("id", r"day_0_sparse_multi_hot\.npz:6: row 6: member 9\.npy holds a negative id \(-4\)$"),
    ("dense", r"day_0_dense\.npy:9: row 9: dense feature 11 is nan, not finite$"),
])
def test_a_bad_row_is_named_by_file_and_row(tmp_path, problem, message):
    bad_day(tmp_path, (problem,))
    with pytest.raises(DataError, match=message):
        source([npz(tmp_path)], 12).next_batch()


def test_bad_rows_are_counted_and_skipped(tmp_path):
    days = [bad_day(tmp_path)]
    bad = BadRows(skip=True)
    src = source([npz(tmp_path)], 9, bad)
    assert_same(src.next_batch(), reference(days, [0, 1, 3, 4, 6, 7, 9, 10, 11], small().table_rows))
    assert bad.count == 3 and [e.split(":")[1] for e in bad.examples] == ["3", "6", "9"]
    src.next_batch()  # the next epoch: the same bad rows, not counted again
    assert bad.count == 3


def test_eval_reads_each_row_once(tmp_path):
    days = [write_day(tmp_path, 0, 10)]
    write_day(tmp_path, 1, 8, seed=9)
    train = npz(tmp_path, 1)
    src = open_source(f"mlperf:{train}", small(), batch_size=4, seed=0, device=CPU,
                      eval_spec=f"mlperf:{npz(tmp_path)}", num_eval_batches=8)
    got = src.eval_batches()
    assert [b.batch_size for b in got] == [4, 4, 2]
    assert_same(got[2], reference(days, [8, 9], small().table_rows))


def test_one_hot_eval_data_for_multi_hot_training_is_refused(tmp_path):
    write_day(tmp_path, 0, 8)
    write_records(tmp_path / "eval.bin", 8)
    with pytest.raises(DataError, match=re.escape(
            f"{tmp_path / 'eval.bin'}:0: lookups per sample differ from the training data's: feature 0: training 3 "
            "lookups per sample, eval 1; feature 1: training 2 lookups per sample, eval 1; feature 3: training 2 "
            "lookups per sample, eval 1; and 12 more features; give eval data written like the training data")):
        open_source(f"mlperf:{npz(tmp_path)}", small(), batch_size=4, seed=0, device=CPU,
                    eval_spec=f"mlperf:{tmp_path / 'eval.bin'}")


def test_eval_days_of_other_widths_name_the_feature_that_differs(tmp_path):
    """Was: both whole tuples of 26 widths, which left the reader to find the one that differs."""
    write_day(tmp_path, 0, 8)
    (tmp_path / "eval").mkdir()
    write_day(tmp_path / "eval", 0, 8, hot=HOT[:20] + (3,) + HOT[21:])
    with pytest.raises(DataError, match=re.escape(f"{npz(tmp_path / 'eval')}:0: lookups per sample differ from the "
                                                  "training data's: feature 20: training 6 lookups per sample, eval "
                                                  "3; give eval data written like the training data")):
        open_source(f"mlperf:{npz(tmp_path)}", small(), batch_size=4, seed=0, device=CPU,
                    eval_spec=f"mlperf:{npz(tmp_path / 'eval')}")


def test_a_compressed_npz_is_refused(tmp_path):
    write_day(tmp_path, 0, 6, save=np.savez_compressed)
    with pytest.raises(DataError, match=re.escape(f"{npz(tmp_path)}:0: member 0.npy is compressed "
                                                  "(np.savez_compressed)")):
        source([npz(tmp_path)], 4)


@pytest.mark.parametrize("kind", ["dense", "labels"])
def test_a_missing_sibling_file_is_named(tmp_path, kind):
    write_day(tmp_path, 0, 6)
    (tmp_path / f"day_0_{kind}.npy").unlink()
    with pytest.raises(FileNotFoundError, match=re.escape(f"its {kind} file {tmp_path / f'day_0_{kind}.npy'} is "
                                                          "missing")):
        open_source(f"mlperf:{npz(tmp_path)}", small(), batch_size=4, seed=0, device=CPU)


def test_row_counts_that_differ_are_refused(tmp_path):
    arrays = write_day(tmp_path, 0, 6)
    np.save(tmp_path / "day_0_dense.npy", arrays["dense"][:5])
    with pytest.raises(DataError, match=re.escape(f"row counts differ: {tmp_path / 'day_0_labels.npy'} 6, "
                                                  f"{tmp_path / 'day_0_dense.npy'} 5")):
        source([npz(tmp_path)], 4)


def test_widths_that_differ_between_days_are_refused(tmp_path):
    write_day(tmp_path, 0, 6)
    write_day(tmp_path, 1, 6, hot=HOT[:3] + (4,) + HOT[4:])
    with pytest.raises(DataError, match=re.escape(f"{npz(tmp_path, 1)}:0: member 3.npy holds 4 ids per row but "
                                                  f"{npz(tmp_path, 0)}'s 2")):
        source([npz(tmp_path, 0), npz(tmp_path, 1)], 4)


@pytest.mark.parametrize("member,array,found", [
    ("4", np.zeros((6, 2), np.float64), "found float64 [6, 2]"),  # int64 and other integer ids are read
    ("4", np.zeros(6, np.int32), "found int32 [6]"),
    ("25", None, None),
])
def test_a_malformed_or_missing_member_is_named(tmp_path, member, array, found):
    arrays = write_day(tmp_path, 0, 6)
    members = {str(f): ids for f, ids in enumerate(arrays["ids"])}
    if array is None:
        del members[member]
    else:
        members[member] = array
    np.savez(npz(tmp_path), **members)
    expected = "expected integer ids [rows, ids >= 1] (MLPerf's int32)"
    problem = f"member {member}.npy: {expected}, {found}" if found else f"no member {member}.npy"
    with pytest.raises(DataError, match=re.escape(f"{npz(tmp_path)}:0: {problem}")):
        source([npz(tmp_path)], 4)


def test_training_runs_on_a_multi_hot_day(tmp_path):
    write_day(tmp_path, 0, 24)
    result = CliRunner().invoke(app, ["train", "--data", f"mlperf:{npz(tmp_path)}", "--steps", "2", "--batch-size", "8",
                                      "--row-cap", "64", "--device", "cpu", "--cpu-threads", "1"])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("rows", [1, 7, 40_000_000, 2**31 - 1, 2**31, 2**40])
def test_ids_mod_rows_in_int32_equals_the_int64_remainder(rows):
    """The remainder in the ids' own int32 is exact for every table size, 2^31 rows and more
    too (an int32 id is then its own row), widened to int64 as it is written."""
    from polyrec.data.multihot import ids_mod_rows

    ids = np.random.default_rng(rows % 1000).integers(0, 2**31 - 1, size=(64, 3), endpoint=True).astype(np.int32)
    ids[0, 0] = 2**31 - 1
    out = np.full((64, 3), -1, dtype=np.int64)
    ids_mod_rows(ids, rows, out)
    np.testing.assert_array_equal(out, ids.astype(np.int64) % rows)


@pytest.mark.parametrize("dtype,joined", [("<i4", "int32"), (">i4", "int32"), ("<i8", "int64"), ("<u4", "int64"),
                                          (">u8", "int64"), ("<i2", "int32")])
def test_joined_ids_split_over_threads_equal_the_feature_major_remainders(dtype, joined, monkeypatch):
    """A batch's ids are written by tasks of about TASK_IDS ids of one feature's rows on several threads (here 12: 12,
    1 and 6 rows of the three features): every element once, in feature-major order, for features not a whole
    number of tasks, one of more ids a row than a task holds, and ids of any integer type; as read, in int32
    where the type fits it (uint64 ids taken mod on the host: int64 cannot hold them), and taken mod their rows as
    a device does (``Batch.mod_rows``) they are the exact remainders."""
    from polyrec.data import multihot
    from polyrec.data.types import feature_remainders

    monkeypatch.setattr(multihot, "TASK_IDS", 12)
    rng = np.random.default_rng(5)
    b, widths, table_rows = 2 * 12 + 3, (1, 13, 2), np.array([3, 1000, 2**40])
    high = np.iinfo(np.dtype(dtype)).max
    ids = [rng.integers(0, high, size=(b, w), endpoint=True, dtype=np.dtype(dtype).newbyteorder("=")).astype(dtype)
           for w in widths]
    want = np.concatenate([(x.astype(object) % int(rows)).reshape(-1) for x, rows in zip(ids, table_rows)])  # exact
    values = multihot.joined_ids(ids, table_rows)
    assert values.dtype == np.dtype(joined)
    bounds = tuple(int(x) for x in np.cumsum([0] + [b * w for w in widths]))
    landed = feature_remainders(torch.from_numpy(values), torch.tensor(table_rows), bounds)
    np.testing.assert_array_equal(landed.numpy(), want.astype(np.int64))


def test_a_batch_owns_its_arrays_and_leaves_the_files_as_they_are(tmp_path):
    """A batch of one day's good rows is built without copying them row by row (``joined``): its tensors must still
    be its own (writable, not the read-only map of the file), and writing them leaves the file as it was."""
    arrays = write_day(tmp_path, 0, 8, seed=3)
    batch = source([npz(tmp_path)], 8).next_batch()
    for name in ("dense", "values", "labels"):
        tensor = getattr(batch, name)
        assert tensor.numpy().flags.writeable, name
        tensor.fill_(0)
    np.testing.assert_array_equal(np.load(tmp_path / "day_0_dense.npy"), arrays["dense"])
    np.testing.assert_array_equal(np.load(npz(tmp_path))["0"], arrays["ids"][0])


def symlink(link: Path, target: Path) -> None:
    try:
        os.symlink(target, link)
    except (OSError, NotImplementedError) as err:
        pytest.skip(f"no symbolic links here: {err}")


def linked_day(tmp_path: Path) -> tuple[dict, Path]:
    """Day 0 under ``tmp_path/real`` and a link to its .npz alone under ``tmp_path/links``: (its arrays, the link)."""
    (tmp_path / "real").mkdir()
    (tmp_path / "links").mkdir()
    arrays = write_day(tmp_path / "real", 0, 6, seed=1)
    symlink(npz(tmp_path / "links"), npz(tmp_path / "real"))
    return arrays, npz(tmp_path / "links")


def test_a_linked_day_reads_the_files_beside_the_file_it_links_to(tmp_path):
    """Was: "its labels file .../links/day_0_labels.npy is missing": only the link's directory was looked in."""
    arrays, link = linked_day(tmp_path)
    assert_same(source([link], 6).next_batch(), reference([arrays], list(range(6)), small().table_rows))


def test_a_linked_day_reads_the_files_beside_the_link_first(tmp_path):
    """A directory of links holds the dense and label files (or links to them) too: those are the day's."""
    arrays, link = linked_day(tmp_path)
    beside = write_day(tmp_path / "links", 1, 6, seed=2)  # dense and labels of other values, 6 rows too
    np.save(tmp_path / "links" / "day_0_dense.npy", beside["dense"])
    np.save(tmp_path / "links" / "day_0_labels.npy", beside["labels"])
    want = reference([{**arrays, "dense": beside["dense"], "labels": beside["labels"]}], list(range(6)),
                     small().table_rows)
    assert_same(source([link], 6).next_batch(), want)


def test_a_linked_day_missing_a_file_names_both_places_looked(tmp_path):
    _, link = linked_day(tmp_path)
    (tmp_path / "real" / "day_0_dense.npy").unlink()
    with pytest.raises(FileNotFoundError, match=re.escape(
            f"{link}: its dense file is missing: looked beside it ({tmp_path / 'links' / 'day_0_dense.npy'}) and "
            f"beside the file it links to ({tmp_path.resolve() / 'real' / 'day_0_dense.npy'})")):
        source([link], 6)


def test_an_empty_day_among_others_adds_no_rows(tmp_path):
    """Was: "the day holds no rows" refused the whole list, where criteo: reads on past an empty file."""
    days = [write_day(tmp_path, 0, 7, seed=1), write_day(tmp_path, 1, 0), write_day(tmp_path, 2, 5, seed=2)]
    paths = [npz(tmp_path, k) for k in range(3)]
    run = source(paths, 4)
    for step in range(4):
        assert_same(run.next_batch(), reference(days, [(step * 4 + i) % 12 for i in range(4)], small().table_rows))
    assert run.state_dict()["file_records"] == [7, 0, 5]
    state = run.state_dict()
    write_day(tmp_path, 1, 3)
    with pytest.raises(ValueError, match=re.escape(f"{paths[1]} changed since the checkpoint was written: it held 0 "
                                                   "rows, now 3")):
        source(paths, 4).load_state_dict(state)


def test_days_of_no_rows_at_all_are_refused_naming_them(tmp_path):
    write_day(tmp_path, 0, 0)
    with pytest.raises(DataError, match=re.escape(f"{npz(tmp_path, 0)}:0: no rows in the day")):
        source([npz(tmp_path, 0)], 4)
    write_day(tmp_path, 1, 0)
    with pytest.raises(DataError, match=re.escape(f"{npz(tmp_path, 0)},{npz(tmp_path, 1)}:0: no rows in any of the 2 "
                                                  "days")):
        source([npz(tmp_path, 0), npz(tmp_path, 1)], 4)


def test_a_directory_of_days_is_refused_listing_its_days(tmp_path):
    """`mlperf:DIR` said only `MLPerf binary path DIR is a directory, not a file`: a directory of multi-hot days is
    named with the list of its days to give instead, day 2 before day 10."""
    for day in (10, 2, 0):
        write_day(tmp_path, day, 4, seed=day)
    listed = f"mlperf:{npz(tmp_path, 0)},{npz(tmp_path, 2)},..."
    with pytest.raises(FileNotFoundError, match=re.escape(f"{tmp_path} is a directory, not a file: it holds 3 "
                                                          f"multi-hot days; list them comma-separated ({listed})")):
        source_spec(f"mlperf:{tmp_path}")


def test_a_list_of_binary_files_is_refused_saying_that_one_is_read(tmp_path):
    """`mlperf:a.bin,b.bin`, both there, said `MLPerf binary file not found: a.bin,b.bin`."""
    write_records(tmp_path / "a.bin", 4)
    write_records(tmp_path / "b.bin", 4)
    spec = f"mlperf:{tmp_path / 'a.bin'},{tmp_path / 'b.bin'}"
    with pytest.raises(ValueError, match=re.escape(f"{spec}: mlperf:PATH reads one file of binary records (a list "
                                                   f"names multi-hot days, day_N{'_sparse_multi_hot.npz'}): join "
                                                   "the files into one")):
        source_spec(spec)


def source_spec(spec: str):
    return open_source(spec, small(), batch_size=4, seed=0, device=CPU)


@pytest.mark.parametrize("damage, message", [
    ("truncated", "truncated: it starts as a zip, but the zip's directory at its end is missing (a copy or a write cut "
                  "short?): copy or write it again"),
    ("an .npy", "a NumPy .npy array, not an .npz (np.savez's zip of .npy arrays): a multi-hot day's ids are the "
                "day_N_sparse_multi_hot.npz"),
])
def test_a_truncated_npz_or_an_npy_in_its_place_is_named_as_such(tmp_path, damage, message):
    """Both said `not an .npz (np.savez's zip of .npy arrays): File is not a zip file`: a copy cut short keeps the
    zip's first members but not its directory, which zipfile reads from the end."""
    write_day(tmp_path, 0, 8)
    whole = npz(tmp_path).read_bytes()
    npz(tmp_path).write_bytes(whole[:len(whole) // 2] if damage == "truncated" else
                              (tmp_path / "day_0_dense.npy").read_bytes())
    with pytest.raises(DataError, match=re.escape(f"{npz(tmp_path)}:0: {message}")):
        source([npz(tmp_path)], 4)


def test_a_space_after_a_comma_in_the_list_is_named(tmp_path):
    """`mlperf:A, B` (quoted, as a user writes a list) said `MLPerf multi-hot file not found:  B`, the space hard to
    see; the part is named with the space and the path it would be without."""
    write_day(tmp_path, 0, 4)
    write_day(tmp_path, 1, 4, seed=1)
    with pytest.raises(ValueError, match=re.escape(f"mlperf: ' {npz(tmp_path, 1)}' starts or ends with a space: the "
                                                   "comma-separated list takes none")):
        source_spec(f"mlperf:{npz(tmp_path, 0)}, {npz(tmp_path, 1)}")


def test_joined_ids_writes_into_a_given_buffer_of_the_ids_type_and_refuses_another():
    from polyrec.data.multihot import joined_ids

    rng = np.random.default_rng(3)
    ids = [rng.integers(0, 2**31 - 1, (5, h)).astype(np.int32) for h in (3, 1, 2)]
    rows = np.array([7, 11, 2**40])
    want = joined_ids(ids, rows)
    out = np.full(want.shape, -1, dtype=np.int32)
    assert joined_ids(ids, rows, out=out) is out and np.array_equal(out, want)
    with pytest.raises(ValueError, match=r"out must be int32 \[30\], got int64 \[30\]"):
        joined_ids(ids, rows, out=np.empty(30, dtype=np.int64))
    with pytest.raises(ValueError, match=r"got int32 \[29\]"):
        joined_ids(ids, rows, out=np.empty(29, dtype=np.int32))


def test_negative_rows_are_found_in_every_task_of_a_feature(monkeypatch):
    """The negative-id check takes each task's minimum on its own (``id_tasks``: here 6 ids a task): a negative id in
    any task of any signed feature marks its row, and unsigned features are not looked at."""
    from polyrec.data import multihot

    monkeypatch.setattr(multihot, "TASK_IDS", 6)
    rng = np.random.default_rng(8)
    ids = [rng.integers(0, 100, (23, w)).astype(dtype) for w, dtype in ((1, np.int32), (4, np.int64), (2, np.uint16))]
    for f, row, col in ((0, 0, 0), (0, 22, 0), (1, 7, 3), (1, 13, 0)):
        ids[f][row, col] = -5
    want = np.zeros(23, dtype=bool)
    want[[0, 22, 7, 13]] = True
    np.testing.assert_array_equal(multihot.negative_rows(ids), want)
    assert not multihot.negative_rows([np.zeros((0, 3), np.int32)]).size


def test_full_batches_share_their_offsets_and_a_short_one_has_its_own(tmp_path):
    """Every full batch of a day has the same offsets: made once and shared (not to be written); a short batch (the
    end of an epoch without wrapping, as an evaluation reads) gets offsets of its own size."""
    day = write_day(tmp_path, 0, 10)
    src = source([npz(tmp_path)], 4)
    first, second = src.next_batch(), src.next_batch()
    assert first.offsets is second.offsets
    short = src._next(wrap=False)  # rows 8 and 9
    assert short.batch_size == 2 and short.offsets.numel() == 26 * 2 + 1
    assert_same(short, reference([day], [8, 9], small().table_rows))
