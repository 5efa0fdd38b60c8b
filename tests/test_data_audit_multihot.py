"""MLPerf multi-hot days as other tools write them: big-endian or Fortran-order arrays, ids, labels and dense
values of other widths, labels [N], positional ``arr_N`` members; paths holding a comma; a resume after a day's
row count changed; and a CLI run resumed from its checkpoint."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from polyrec.cli import app
from polyrec.data import BadRows, DataError, open_source
from polyrec.runtime import TrainConfig, Trainer
from test_data import small
from test_data_mlperf_multihot import CPU, HOT, assert_same, npz, reference, source, write_day

#: How a tool might store each array: (ids, labels, dense) -> the arrays written in their place.
LAYOUTS = {
    "fortran order": lambda a: ([np.asfortranarray(x) for x in a["ids"]], np.asfortranarray(a["labels"]),
                                np.asfortranarray(a["dense"])),
    "big-endian": lambda a: ([x.astype(">i4") for x in a["ids"]], a["labels"].astype(">i4"), a["dense"].astype(">f4")),
    "int64 ids, labels and float64 dense": lambda a: ([x.astype(np.int64) for x in a["ids"]],
                                                      a["labels"].astype(np.int64), a["dense"].astype(np.float64)),
    "uint32 ids, bool labels [N]": lambda a: ([x.astype(np.uint32) for x in a["ids"]], a["labels"][:, 0].astype(bool),
                                              a["dense"]),
    "labels [N], float32": lambda a: (a["ids"], a["labels"][:, 0].astype(np.float32), a["dense"]),
    "big-endian int64 ids, labels [N] uint8": lambda a: ([x.astype(">i8") for x in a["ids"]],
                                                        a["labels"][:, 0].astype(np.uint8), a["dense"]),
}


def resave(directory: Path, arrays: dict, ids: list[np.ndarray], labels: np.ndarray, dense: np.ndarray,
           positional: bool = False) -> None:
    np.save(directory / "day_0_dense.npy", dense)
    np.save(directory / "day_0_labels.npy", labels)
    if positional:  # np.savez(path, *arrays): members arr_0.npy .. arr_25.npy
        np.savez(npz(directory), *ids)
    else:
        np.savez(npz(directory), **{str(f): x for f, x in enumerate(ids)})


@pytest.mark.parametrize("layout", LAYOUTS)
def test_other_byte_orders_orders_and_widths_read_as_the_int32_day(tmp_path, layout):
    """The same day stored another way gives the same batches: int32 ids and labels, float32 dense values, as
    MLPerf's own files would (before: big-endian "expected int32 [rows, 1], found >i4", int64 ids and float64 dense
    values refused, labels [N] "expected int32 [rows, 1], found int32 [9]")."""
    arrays = write_day(tmp_path, 0, 9, seed=4)
    arrays["ids"][2][0, 0] = 2**31 - 1  # the largest int32 id
    resave(tmp_path, arrays, *LAYOUTS[layout](arrays))
    src = source([npz(tmp_path)], 4)
    for step in range(3):
        assert_same(src.next_batch(), reference([arrays], [(step * 4 + i) % 9 for i in range(4)], small().table_rows))


def test_positional_members_arr_n_are_the_features_in_order(tmp_path):
    """``np.savez(path, *ids)`` names its members arr_0.npy .. arr_25.npy: read as features 0 .. 25 (before: "no
    member 0.npy, 1.npy, ... 25.npy")."""
    arrays = write_day(tmp_path, 0, 6, seed=2)
    resave(tmp_path, arrays, arrays["ids"], arrays["labels"], arrays["dense"], positional=True)
    assert_same(source([npz(tmp_path)], 6).next_batch(), reference([arrays], list(range(6)), small().table_rows))


def test_members_of_both_namings_are_refused_listing_what_the_file_holds(tmp_path):
    arrays = write_day(tmp_path, 0, 6)
    members = {str(f): x for f, x in enumerate(arrays["ids"][:25])} | {"arr_25": arrays["ids"][25]}
    np.savez(npz(tmp_path), **members)
    message = (f"{npz(tmp_path)}:0: no member 25.npy: a multi-hot day holds 0.npy .. 25.npy, one per categorical "
               "feature (or arr_0.npy .. arr_25.npy, np.savez's names for positional arrays); the file holds 26 "
               "members: 0.npy, 1.npy, 2.npy, 3.npy, ..., 22.npy, 23.npy, 24.npy, arr_25.npy")
    with pytest.raises(DataError, match=re.escape(message)):
        source([npz(tmp_path)], 4)


@pytest.mark.parametrize("positional", [False, True])
def test_a_day_of_more_features_than_the_models_is_refused(tmp_path, positional):
    """A 27th member (26.npy, arr_26.npy) was passed over without a word: a day of another dataset's 27 features
    trained on 26 of them."""
    arrays = write_day(tmp_path, 0, 6)
    resave(tmp_path, arrays, arrays["ids"] + [arrays["ids"][0]], arrays["labels"], arrays["dense"], positional)
    extra = "arr_26.npy" if positional else "26.npy"
    with pytest.raises(DataError, match=re.escape(f"member {extra} continues the features past 25")):
        source([npz(tmp_path)], 4)


@pytest.mark.parametrize("name,array,found", [
    ("ids", np.zeros((6, 2), np.float32),
     "member 4.npy: expected integer ids [rows, ids >= 1] (MLPerf's int32), found float32 [6, 2]"),
    ("dense", np.zeros((6, 13), np.int32), "expected floating-point dense values [rows, 13] (MLPerf's float32), "
                                           "found int32 [6, 13]"),
    ("labels", np.zeros((6, 2), np.int32), "expected labels [rows] or [rows, 1] (MLPerf's int32 [rows, 1]), "
                                           "found int32 [6, 2]"),
    ("labels", np.zeros((6, 1), np.complex64), "expected labels [rows] or [rows, 1] (MLPerf's int32 [rows, 1]), "
                                               "found complex64 [6, 1]"),
])
def test_arrays_of_another_kind_are_refused_naming_file_and_member(tmp_path, name, array, found):
    arrays = write_day(tmp_path, 0, 6)
    if name == "ids":
        arrays["ids"][4] = array
    else:
        arrays[name] = array
    resave(tmp_path, arrays, arrays["ids"], arrays["labels"], arrays["dense"])
    where = npz(tmp_path) if name == "ids" else tmp_path / f"day_0_{name}.npy"
    with pytest.raises(DataError, match=re.escape(f"{where}:0: {found}")):
        source([npz(tmp_path)], 4)


@pytest.mark.parametrize("value,message", [
    (1e300, "row 3: dense feature 5 is 1e+300, beyond float32's range"),
    (np.nan, "row 3: dense feature 5 is nan, not finite"),
])
def test_a_float64_dense_value_beyond_float32_is_a_bad_row(tmp_path, value, message):
    """A float64 value float32 cannot hold would be inf in the batch: a bad row, named with the stored value."""
    arrays = write_day(tmp_path, 0, 6)
    dense = arrays["dense"].astype(np.float64)
    dense[2, 4] = value
    resave(tmp_path, arrays, arrays["ids"], arrays["labels"], dense)
    with pytest.raises(DataError, match=re.escape(f"{tmp_path / 'day_0_dense.npy'}:3: {message}")):
        source([npz(tmp_path)], 6).next_batch()
    bad = BadRows(skip=True)
    assert source([npz(tmp_path)], 5, bad).next_batch().dense.isfinite().all() and bad.count == 1


@pytest.mark.parametrize("value,shown", [(0.5, "0.5"), (np.nan, "nan"), (-1.0, "-1.0")])
def test_a_float_label_other_than_0_or_1_is_named_as_stored(tmp_path, value, shown):
    arrays = write_day(tmp_path, 0, 6)
    labels = arrays["labels"].astype(np.float32)
    labels[3, 0] = value
    resave(tmp_path, arrays, arrays["ids"], labels, arrays["dense"])
    with pytest.raises(DataError, match=re.escape(f"day_0_labels.npy:4: row 4: label must be 0 or 1, got {shown}")):
        source([npz(tmp_path)], 6).next_batch()


def test_a_path_holding_a_comma_is_refused_saying_why(tmp_path):
    """The list is comma-separated: a directory "a,b" was split and "MLPerf multi-hot file not found: .../a" said."""
    (tmp_path / "a,b").mkdir()
    write_day(tmp_path / "a,b", 0, 6)
    path = npz(tmp_path / "a,b")
    with pytest.raises(ValueError, match=re.escape(f"{path} holds a comma, which separates the paths of mlperf:PATH"
                                                   "[,PATH...]: link or move it to a path without one")):
        open_source(f"mlperf:{path}", small(), batch_size=4, seed=0, device=CPU)


def test_resume_refuses_a_day_whose_row_count_changed(tmp_path):
    """Days of 10 and 6 rows rewritten as 6 and 10: the same total, so the saved position was taken as it was
    and the run went on over other rows; now the changed day is named."""
    write_day(tmp_path, 0, 10)
    write_day(tmp_path, 1, 6, seed=3)
    paths = [npz(tmp_path, 0), npz(tmp_path, 1)]
    run = source(paths, 4)
    run.next_batch()
    state = run.state_dict()
    write_day(tmp_path, 0, 6)
    write_day(tmp_path, 1, 10, seed=3)
    with pytest.raises(ValueError, match=re.escape(f"{paths[0]} changed since the checkpoint was written: it held "
                                                   "10 rows, now 6")):
        source(paths, 4).load_state_dict(state)
    with pytest.raises(ValueError, match=re.escape(f"{paths[1]}: the checkpoint was written reading 2 files, not "
                                                   "these 1")):
        source(paths[1:], 4).load_state_dict(state)
    older = {k: v for k, v in state.items() if k != "file_records"}  # a checkpoint from before: the total alone
    source(paths, 4).load_state_dict(older)


def test_cli_train_then_resume_continues_the_same_losses(tmp_path):
    """Two days (13 and 7 rows, batch 8: the stream wraps), --row-cap 64 below the ids: 3 steps, then --resume to 8
    gives the losses of 8 straight steps, bit for bit."""
    write_day(tmp_path, 0, 13, seed=1)
    write_day(tmp_path, 1, 7, seed=2)
    data = f"mlperf:{npz(tmp_path, 0)},{npz(tmp_path, 1)}"

    def config(directory: Path, steps: int, **kw) -> TrainConfig:
        return TrainConfig(preset="dcnv2-small", data=data, steps=steps, batch_size=8, row_cap=64, log_every=1,
                           checkpoint_dir=directory, device="cpu", cpu_threads=1, **kw)

    straight = Trainer(config(tmp_path / "a", 8), progress=False).train()
    args = ["train", "--data", data, "--batch-size", "8", "--row-cap", "64", "--device", "cpu", "--cpu-threads", "1",
            "--checkpoint-dir", str(tmp_path / "b")]
    assert CliRunner().invoke(app, args + ["--steps", "3"]).exit_code == 0
    resumed = Trainer(config(tmp_path / "b", 8, resume=True), progress=False).train()
    assert resumed.losses == straight.losses[3:]


def test_a_resume_on_other_data_or_rewritten_days_names_the_data_not_the_preset(tmp_path):
    """The model's lookups per sample come from the days: a resume that left out --data (synthetic, the preset's
    sizes), or whose days were rewritten with other widths, was refused as `holds another model, multi_hot (...)`
    with the advice `resume with its --preset, --row-cap and --plan`, options the run had right."""
    write_day(tmp_path, 0, 13, seed=1)
    data = f"mlperf:{npz(tmp_path)}"

    def config(steps: int, **kw) -> TrainConfig:
        return TrainConfig(preset="dcnv2-small", data=data, steps=steps, batch_size=8, row_cap=64,
                           checkpoint_dir=tmp_path / "ckpt", device="cpu", cpu_threads=1, **kw)

    Trainer(config(1), progress=False).train()
    with pytest.raises(ValueError, match=re.escape(f"holds data '{data}'; this run has 'synthetic'")):
        Trainer(dataclasses.replace(config(2, resume=True), data="synthetic"), progress=False)
    hot = list(HOT)
    hot[9] += 2
    write_day(tmp_path, 0, 13, seed=1, hot=tuple(hot))
    with pytest.raises(ValueError, match=re.escape(f"holds another model, multi_hot (feature 9: {HOT[9]} lookups per "
                                                   f"sample; this run has {hot[9]}): the data's files changed since "
                                                   "the checkpoint was written")):
        Trainer(config(2, resume=True), progress=False)
