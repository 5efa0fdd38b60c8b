"""MLPerf Training v3+ DLRM-DCNv2 multi-hot Criteo days: ``mlperf:DIR/day_N_sparse_multi_hot.npz[,...]``.

The layout (mlcommons/training recommendation_v2/torchrec_dlrm: materialize_synthetic_multihot_dataset.py writes
the .npz, data/multi_hot_criteo.py reads the days; pytorch/torchrec datasets/criteo.py, BinaryCriteoUtils, writes
the dense and label arrays), for day N three files side by side:
- ``day_N_dense.npy``: float32 [rows, 13], already log(x + 3) by TorchRec's preprocessing (torchrec
  datasets/scripts/nvt/README.md): used as is, without the log(max(x, 0) + 1) that Criteo TSV and binary
  records get;
- ``day_N_labels.npy``: int32 [rows, 1], 0 or 1;
- ``day_N_sparse_multi_hot.npz``: ``np.savez``'s uncompressed zip of ``0.npy`` .. ``25.npy``, feature f int32
  [rows, hot_f]; hot_f is fixed per feature (MLPerf's ``--multi_hot_sizes`` 3,2,1,2,6,1,1,1,1,7,3,8,1,6,9,5,1,1,
  1,12,100,27,10,3,1,1).
Other tools' days are read too: either byte order, C or Fortran order, ids of any integer type, dense values of any
float type (a value float32 cannot hold is a bad row), labels [rows] or of any integer, bool or float type, and
members named ``arr_0.npy`` .. ``arr_25.npy`` (``np.savez(path, *ids)``).
Ids are taken mod the table rows (the reference's ``hashes``), so capped tables work: on the device the batch moves
to (``Batch.mod_rows``); the host only copies them. Every array is memory-mapped (``polyrec.data.npz``): a day
costs memory only for the rows of a batch. A row is bad where its label is not 0 or 1, an id is negative or a dense
value is not finite (or, stored wider, beyond float32).
Several days stream one after another (``mlperf.RecordSource``), as the files of ``criteo:`` do; a day of no rows
adds none. A day's .npz may be a symbolic link: its dense and label files are looked for beside the link, then beside
the file it links to.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from polyrec.data.criteo import CRITEO_NUM_CATEGORICAL, adapt_criteo
from polyrec.data.npz import NpyArray, npy_file, npz_members
from polyrec.data.types import Batch, DataError, no_rows, offsets_from_lengths, require_regular_file
from polyrec.models.config import CRITEO_NUM_DENSE, ModelConfig

MULTI_HOT_SUFFIX = "_sparse_multi_hot.npz"  # day_N's ids (materialize_synthetic_multihot_dataset.py)
VALUE_BYTES = 4  # int32 labels and ids, float32 dense values, as MLPerf's days hold them
FLOAT32_MAX = float(np.finfo(np.float32).max)  # a larger dense value would be inf in the batch
#: How feature f's member is named: TorchRec's, and np.savez's for positional arrays (``np.savez(p, *ids)``).
MEMBER_FORMATS = ("{}.npy", "arr_{}.npy")
#: The names of features 0 .. 25's members, in each naming; a 27th name (26.npy) is refused
#: (``refuse_more_features``).
MEMBER_NAMINGS = tuple([fmt.format(f) for f in range(CRITEO_NUM_CATEGORICAL + 1)] for fmt in MEMBER_FORMATS)
#: Members named in a message about an .npz whose feature members are missing (the first and last of them).
MEMBERS_SHOWN = 4


class DayRows(NamedTuple):
    """Rows of one day, in memory: a chunk of ``MultiHotRecords``."""

    labels: np.ndarray  # [n] as stored: int32 in MLPerf's days, any integer, bool or float type
    dense: np.ndarray  # [n, 13] as stored: float32 in MLPerf's days, any float type
    ids: list[np.ndarray]  # 26 x [n, hot_f] as stored: int32 in MLPerf's days, any integer type


@dataclass(frozen=True, slots=True)
class Day:
    """One day's three files and their arrays, memory-mapped."""

    npz: Path
    dense_path: Path
    labels_path: Path
    labels: np.ndarray  # [N]
    dense: np.ndarray  # [N, 13]
    ids: tuple[np.ndarray, ...]  # 26 x [N, hot_f]
    members: tuple[str, ...]  # the .npz member of each feature's ids ("0.npy", or "arr_0.npy")

    @property
    def multi_hot(self) -> tuple[int, ...]:
        return tuple(x.shape[1] for x in self.ids)

    def rows(self, first: int, stop: int) -> DayRows:
        """Rows [first, stop) (0-based in the day) read into memory."""
        return DayRows(labels=np.asarray(self.labels[first:stop]), dense=np.asarray(self.dense[first:stop]),
                       ids=[np.asarray(x[first:stop]) for x in self.ids])


def beside(npz: Path, kind: str) -> Path:
    """Where MLPerf's layout keeps the ``kind`` ("dense" or "labels") file of the day ``npz``: beside it."""
    return npz.with_name(npz.name.removesuffix(MULTI_HOT_SUFFIX) + f"_{kind}.npy")


def sibling(npz: Path, kind: str) -> Path:
    """The day's ``kind`` ("dense" or "labels") file: beside ``npz`` first (a directory of links to days may link
    their files too), else, where ``npz`` is a symbolic link, beside the file it links to (a directory of links to
    the .npz files alone); FileNotFoundError naming where it looked."""
    places = [beside(npz, kind)] + ([beside(npz.resolve(), kind)] if npz.is_symlink() else [])
    path = next((p for p in places if p.exists()), None)
    if path is None:
        where = (f"{places[0]} is missing" if len(places) == 1 else
                 f"is missing: looked beside it ({places[0]}) and beside the file it links to ({places[1]})")
        raise FileNotFoundError(f"{npz}: its {kind} file {where} (MLPerf's multi-hot layout keeps day_N_dense.npy "
                                f"and day_N_labels.npy beside day_N{MULTI_HOT_SUFFIX})")
    return require_regular_file(path, f"MLPerf multi-hot {kind}")


def dtype_name(dtype: np.dtype) -> str:
    """``dtype`` as messages name it: "int32", "float64 big-endian"."""
    return dtype.name if dtype.isnative else f"{dtype.newbyteorder('=').name} big-endian"


def checked(array: NpyArray, kinds: str, shape_ok: bool, expected: str) -> NpyArray:
    """``array`` where its dtype is of numpy ``kinds`` (any width, either byte order) and ``shape_ok``; else DataError
    naming it and ``expected``."""
    if array.dtype.kind not in kinds or not shape_ok:
        raise array.problem(f"expected {expected}, found {dtype_name(array.dtype)} {list(array.shape)}")
    return array


def id_array(array: NpyArray) -> NpyArray:
    return checked(array, "iu", len(array.shape) == 2 and array.shape[1] >= 1,
                   "integer ids [rows, ids >= 1] (MLPerf's int32)")


def labels_array(array: NpyArray) -> NpyArray:
    """Labels [rows] (other tools') or [rows, 1] (TorchRec's): one per row either way."""
    return checked(array, "biuf", len(array.shape) == 1 or (len(array.shape) == 2 and array.shape[1] == 1),
                   "labels [rows] or [rows, 1] (MLPerf's int32 [rows, 1])")


def dense_array(array: NpyArray) -> NpyArray:
    return checked(array, "f", len(array.shape) == 2 and array.shape[1] == CRITEO_NUM_DENSE,
                   f"floating-point dense values [rows, {CRITEO_NUM_DENSE}] (MLPerf's float32)")


def feature_members(npz: Path, members: dict[str, NpyArray]) -> list[str]:
    """The names of features 0 .. 25's members (``MEMBER_NAMINGS``); DataError naming those missing from the naming
    the file holds most of, and the members it holds."""
    *names, extra = max(MEMBER_NAMINGS, key=lambda naming: sum(name in members for name in naming))
    missing = [name for name in names if name not in members]
    if not missing:
        refuse_more_features(npz, extra, members)
        return names
    held = sorted(members, key=lambda name: (len(name), name))
    shown = held if len(held) <= 2 * MEMBERS_SHOWN else held[:MEMBERS_SHOWN] + ["..."] + held[-MEMBERS_SHOWN:]
    raise DataError(str(npz), 0, f"no member {', '.join(missing)}: a multi-hot day holds 0.npy .. "
                                 f"{CRITEO_NUM_CATEGORICAL - 1}.npy, one per categorical feature (or arr_0.npy .. "
                                 f"arr_{CRITEO_NUM_CATEGORICAL - 1}.npy, np.savez's names for positional arrays); "
                                 f"the file holds {len(held)} members: {', '.join(shown)}")


def refuse_more_features(npz: Path, extra: str, members: dict[str, NpyArray]) -> None:
    """DataError where ``extra``, the member after the last feature's in the same naming (26.npy after 25.npy), is
    there too: a day of more categorical features than the models' 26 (another dataset), whose extra ones would go
    unread."""
    if extra in members:
        raise DataError(str(npz), 0, f"member {extra} continues the features past {CRITEO_NUM_CATEGORICAL - 1}: a "
                                     f"multi-hot day holds {CRITEO_NUM_CATEGORICAL} categorical features (MLPerf's "
                                     "Criteo 1TB), as polyrec's models read them; this one holds more")


def id_arrays(npz: Path) -> list[NpyArray]:
    """The 26 id arrays of the .npz, each [rows, hot_f] of integers; DataError naming a missing or malformed member."""
    members = npz_members(npz)
    return [id_array(members[name]) for name in feature_members(npz, members)]


def same_rows(npz: Path, arrays: dict[str, NpyArray]) -> int:
    """The row count of every array (named as messages name it); DataError naming the files and counts where they
    differ."""
    counts = {name: array.shape[0] for name, array in arrays.items()}
    rows = next(iter(counts.values()))
    if len(set(counts.values())) > 1:
        differ = ", ".join(f"{name} {n}" for name, n in counts.items() if n != rows)
        raise DataError(str(npz), 0, f"row counts differ: {next(iter(counts))} {rows}, {differ}")
    return rows


def open_day(npz: Path) -> Day:
    """The day of ``npz`` and its two sibling files, checked and memory-mapped."""
    require_regular_file(npz, "MLPerf multi-hot")
    if not npz.name.endswith(MULTI_HOT_SUFFIX):
        raise DataError(str(npz), 0, f"not a day_N{MULTI_HOT_SUFFIX} file: a multi-hot mlperf: list names only "
                                     "those (their dense and label files are found beside them)")
    labels_path, dense_path = sibling(npz, "labels"), sibling(npz, "dense")
    labels, dense = labels_array(npy_file(labels_path)), dense_array(npy_file(dense_path))
    ids = id_arrays(npz)
    same_rows(npz, {str(labels_path): labels, str(dense_path): dense,
                    **{f"{npz} member {x.member}": x for x in ids}})
    return Day(npz=npz, dense_path=dense_path, labels_path=labels_path, labels=labels.map().reshape(-1),
               dense=dense.map(), ids=tuple(x.map() for x in ids), members=tuple(x.member for x in ids))


def same_multi_hot(days: list[Day]) -> tuple[int, ...]:
    """The days' multi-hot sizes; DataError naming the first file and member whose width is another."""
    first = days[0]
    for day in days[1:]:
        f = next((f for f, (a, b) in enumerate(zip(day.multi_hot, first.multi_hot)) if a != b), None)
        if f is not None:
            raise DataError(str(day.npz), 0, f"member {day.members[f]} holds {day.multi_hot[f]} ids per row but "
                                             f"{first.npz}'s {first.multi_hot[f]}: the days' multi-hot sizes must "
                                             "agree")
    return first.multi_hot


#: Threads that write a batch's ids (numpy releases the GIL in its loops), and ids per task at most: a feature's
#: rows are split into tasks of about that many (the 100-hot feature alone holds 47% of MLPerf's ids), a feature of
#: fewer is one task. Smaller tasks cost more than they balance: on a 2-core host a 65536-row MLPerf batch's ids
#: took 23.9 ms in tasks of 4096 rows (416 tasks) and 10.2 ms in one task per feature.
ID_THREADS = min(8, os.cpu_count() or 1)
TASK_IDS = 1 << 20
TORCH_IDS = {np.dtype(np.int32): torch.int32, np.dtype(np.int64): torch.int64}  # ``id_dtype``'s, as torch names them
_pool: ThreadPoolExecutor | None = None  # ``id_pool``'s


def id_pool() -> ThreadPoolExecutor:
    """The ID_THREADS threads that write and check batches' ids, started at their first use and kept (starting them
    took 2.7 ms a batch on a 2-core host); a forked child starts its own."""
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(ID_THREADS, thread_name_prefix="polyrec-ids")
    return _pool


def _forget_pool() -> None:
    global _pool
    _pool = None


os.register_at_fork(after_in_child=_forget_pool)  # the parent's threads do not exist in a forked child


def id_tasks(ids: list[np.ndarray]) -> list[tuple[int, int, int]]:
    """A batch's ids 26 x [B, hot_f] as tasks (f, lo, hi): rows [lo, hi) of feature f, about TASK_IDS ids each."""
    b = ids[0].shape[0]
    return [(f, lo, min(lo + step, b)) for f, step in enumerate(max(1, TASK_IDS // x.shape[1]) for x in ids)
            for lo in range(0, b, step)]


def ids_mod_rows(ids: np.ndarray, rows: int, out: np.ndarray) -> None:
    """``out`` [B, hot] int64 := integer ids [B, hot] (non-negative) mod ``rows``, computed in the ids' own type (exact:
    both fit it; no int64 copy of the ids is made first) and widened as it is written. A table of more rows than
    the type's largest id holds every id as it is."""
    if rows > np.iinfo(ids.dtype).max:
        out[...] = ids
    else:  # below rows: fits int64 whatever the ids' type
        np.remainder(ids, ids.dtype.type(rows), out=out, casting="unsafe")


def id_dtype(ids: list[np.ndarray]) -> np.dtype:
    """The type a batch's ids are handed on in, as read (``Batch.mod_rows``: the device takes them mod their rows):
    int32 where every feature's type fits it whole (MLPerf's int32, either byte order; half the bytes of int64 to
    copy and move), else int64."""
    return np.dtype(np.int32) if all(np.can_cast(x.dtype, np.int32) for x in ids) else np.dtype(np.int64)


def copy_ids(ids: np.ndarray, rows: int, out: np.ndarray) -> None:
    """``out`` [B, hot] (``id_dtype``) := integer ids [B, hot] (non-negative) as read: a copy, no division (dividing
    took 5x a copy's time on the host). Ids of a type ``out`` cannot hold whole (uint64 above int64's range) are
    taken mod ``rows`` here, exactly in their own type; the device's mod leaves them as they are."""
    if np.can_cast(ids.dtype, out.dtype):
        np.copyto(out, ids)
    else:
        ids_mod_rows(ids, rows, out)


def joined_ids(ids: list[np.ndarray], table_rows: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """ids 26 x [B, hot_f] -> values [B * sum(hot)] of ``id_dtype(ids)`` (into ``out`` where given), feature-major,
    as read (``copy_ids``: still to be taken mod ``table_rows``); the work split over ID_THREADS threads in tasks of a
    feature's rows, about TASK_IDS ids each."""
    b, dtype = ids[0].shape[0], id_dtype(ids)
    starts = np.cumsum([0] + [b * x.shape[1] for x in ids])  # [F+1]
    values = np.empty(int(starts[-1]), dtype=dtype) if out is None else out
    if values.shape != (int(starts[-1]),) or values.dtype != dtype:
        raise ValueError(f"joined_ids: out must be {dtype} [{int(starts[-1])}], got {values.dtype} "
                         f"{list(values.shape)}")

    def write(task: tuple[int, int, int]) -> None:
        f, lo, hi = task
        hot = ids[f].shape[1]
        copy_ids(ids[f][lo:hi], int(table_rows[f]),
                 values[starts[f] + lo * hot:starts[f] + hi * hot].reshape(hi - lo, hot))

    list(id_pool().map(write, id_tasks(ids)))
    return values


def multi_hot_offsets(b: int, multi_hot: tuple[int, ...], pinned: bool) -> torch.Tensor:
    """The offsets [F*B+1] int64 of a batch of ``b`` rows of these multi-hot sizes (page-locked where ``pinned``)."""
    offsets = offsets_from_lengths(torch.tensor(multi_hot, dtype=torch.int64).repeat_interleave(b))
    return offsets.pin_memory() if pinned else offsets


def float32_copy(array: np.ndarray, pinned: bool) -> torch.Tensor:
    """``array`` (of values float32 holds: checked by the reader) as a new float32 tensor, page-locked where
    ``pinned`` (written there: no second copy by ``Batch.pinned``)."""
    out = torch.empty(array.shape, dtype=torch.float32, pin_memory=pinned)
    np.copyto(out.numpy(), array, casting="unsafe")
    return out


def multi_hot_batch(labels: np.ndarray, dense: np.ndarray, ids: list[np.ndarray], table_rows: np.ndarray,
                    pinned: bool = False, offsets: torch.Tensor | None = None) -> Batch:
    """labels [B] (0 or 1), dense [B, 13] (already transformed, within float32), ids 26 x [B, hot_f] (non-negative)
    -> a Batch, feature-major, bag (f, b) the hot_f ids of row b (repeats kept), to be taken mod ``table_rows[f]``
    where the batch lands (``Batch.mod_rows``). ``pinned``: every array is written into page-locked memory (CUDA),
    where ``Batch.pinned`` then finds them: 56 MB of ids of a 65536-row MLPerf batch not copied again.
    ``offsets``: ``multi_hot_offsets`` of these sizes, made once for many batches (None: made here)."""
    b, multi_hot = labels.shape[0], tuple(x.shape[1] for x in ids)
    values = torch.empty(b * sum(multi_hot), dtype=TORCH_IDS[id_dtype(ids)], pin_memory=pinned)
    joined_ids(ids, table_rows, out=values.numpy())
    return Batch(dense=float32_copy(dense, pinned),  # a copy: ``dense`` may be the file's map
                 values=values,  # [B * sum(hot)] as read
                 offsets=multi_hot_offsets(b, multi_hot, pinned) if offsets is None else offsets,  # [F*B+1]
                 labels=float32_copy(labels, pinned),
                 feature_bounds=tuple(b * int(h) for h in np.cumsum([0, *multi_hot])),
                 mod_rows=torch.tensor(table_rows, dtype=torch.int64))


def negative_rows(ids: list[np.ndarray]) -> np.ndarray:
    """Mask [n] of the rows holding a negative id: the minimum of each task's rows of a signed feature first (one
    pass, no temporary, over ``id_pool``'s threads), those rows only where that is negative."""
    negative = np.zeros(ids[0].shape[0], dtype=bool)
    tasks = [(f, lo, hi) for f, lo, hi in id_tasks(ids) if ids[f].dtype.kind == "i"]
    minima = id_pool().map(lambda task: ids[task[0]][task[1]:task[2]].min(), tasks)
    for (f, lo, hi), least in zip(tasks, minima):
        if least < 0:
            negative[lo:hi] |= (ids[f][lo:hi] < 0).any(axis=1)
    return negative


def joined(parts: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """The good rows of each (array [n, ...], good [n]) part, one after another; no copy where a single part's rows
    are all good (the common batch: a fifth of the reader's time went to copying them)."""
    if len(parts) == 1 and parts[0][1].all():
        return parts[0][0]
    return np.concatenate([array[good] for array, good in parts])


class MultiHotRecords:
    """The rows of multi-hot days, one day after another (``Records``; ``mlperf.RecordSource`` streams them). A day
    of no rows adds none (as an empty ``criteo:`` file does) but stays in ``file_rows``: a resume refuses it
    once it holds some; DataError where no day holds any."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = [Path(p) for p in paths]
        self.days = [open_day(p) for p in self.paths]
        self.multi_hot = same_multi_hot(self.days)
        self.file_rows = [day.labels.shape[0] for day in self.days]
        self.starts = np.cumsum([0] + self.file_rows)  # [D+1], each day's first row (an empty day's is the next's)
        self.total = int(self.starts[-1])
        if self.total == 0:
            raise no_rows(self.paths, "day")
        self.row_bytes = VALUE_BYTES * (1 + CRITEO_NUM_DENSE + sum(self.multi_hot))
        self.pinned_ids = False  # each batch built in page-locked memory (``RecordSource.build_pinned``)
        self._offsets: dict[tuple[int, bool], torch.Tensor] = {}  # (rows, pinned) -> multi_hot_offsets, not written

    def _day(self, first: int) -> int:
        """The day that row ``first`` (0-based in all of them) is in: the last to start at or before it, so not an
        empty day, whose start is the next day's."""
        return int(np.searchsorted(self.starts, first, side="right")) - 1

    def span(self, first: int) -> int:
        return int(self.starts[self._day(first) + 1]) - first

    def read(self, first: int, stop: int) -> DayRows:
        k = self._day(first)
        return self.days[k].rows(first - int(self.starts[k]), stop - int(self.starts[k]))

    def good(self, chunk: DayRows) -> np.ndarray:
        negative = negative_rows(chunk.ids)  # [n]
        in_float32 = (np.abs(chunk.dense) <= FLOAT32_MAX).all(axis=1)  # finite, and within float32 where wider
        return ((chunk.labels == 0) | (chunk.labels == 1)) & ~negative & in_float32

    def error(self, chunk: DayRows, i: int, first: int) -> DataError:
        day = self.days[self._day(first)]
        number = first - int(self.starts[self._day(first)]) + i + 1  # 1-based in the day's files
        label = chunk.labels[i].item()  # as stored: 2, 0.5, nan
        if label not in (0, 1):
            return DataError(str(day.labels_path), number, f"row {number}: label must be 0 or 1, got {label}")
        f = next((f for f, x in enumerate(chunk.ids) if (x[i] < 0).any()), None)
        if f is not None:
            return DataError(str(day.npz), number, f"row {number}: member {day.members[f]} holds a negative id "
                                                   f"({int(chunk.ids[f][i].min())})")
        j = int(np.flatnonzero(~(np.abs(chunk.dense[i]) <= FLOAT32_MAX))[0])
        value = chunk.dense[i, j]
        why = "not finite" if not np.isfinite(value) else "beyond float32's range"
        return DataError(str(day.dense_path), number, f"row {number}: dense feature {j + 1} is {value}, {why}")

    def batch(self, parts: list[tuple[DayRows, np.ndarray]], table_rows: np.ndarray) -> Batch:
        ids = [joined([(chunk.ids[f], good) for chunk, good in parts]) for f in range(len(self.multi_hot))]
        labels = joined([(chunk.labels, good) for chunk, good in parts])
        key = (labels.shape[0], self.pinned_ids)  # every full batch's offsets are the same: made once
        if key not in self._offsets:
            self._offsets[key] = multi_hot_offsets(key[0], self.multi_hot, self.pinned_ids)
        return multi_hot_batch(labels, joined([(chunk.dense, good) for chunk, good in parts]), ids, table_rows,
                               pinned=self.pinned_ids, offsets=self._offsets[key])

    def adapt(self, config: ModelConfig) -> ModelConfig:
        return adapt_criteo(config, self.paths[0], self.multi_hot)
