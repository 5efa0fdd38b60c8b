"""MLPerf Criteo data read by record position: the streaming shared by its layouts (``RecordSource``), and the
DLRM reference's one-hot binary records (``MLPerfBinarySource``); the multi-hot days are ``polyrec.data.multihot``.

Binary (the DLRM reference's ``*_processed.bin`` for Criteo Terabyte, read by
facebookresearch/dlrm data_loader_terabyte.py): records of 40 little-endian int32, label, 13 raw
integer features, 26 categorical indices already hashed; dense values get the same log transform as TSV's, and
indices are taken mod the table rows (so capped tables work). The file is memory-mapped and read one batch at
a time.

Every layout streams the same way (``RecordSource``): its files one after another, epoch after epoch, the
records going to the ranks in blocks of ``batch_size`` by their place in that stream, as Criteo TSV lines do;
a position is the count of records this rank has read, so a resume reads on exactly; a bad record is counted
once, by the rank it is dealt to. Messages call a record a row, as the other readers' do.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from polyrec.data.criteo import CRITEO_COLUMNS, ONE_HOT, adapt_criteo, dealt_to, one_pass, to_batch
from polyrec.data.types import (BadRows, Batch, Closing, DataError, Records, changed_since_checkpoint, keeping_position,
                                require_file)
from polyrec.models.config import CRITEO_NUM_DENSE, ModelConfig

RECORD_BYTES = 4 * CRITEO_COLUMNS  # one binary record: 40 int32
#: Bytes read at a time when looking through whole MLPerf files for a good record a rank is dealt: 2^16
#: binary records (RECORD_BYTES, 160, each), so the look costs bounded memory whatever the files' size.
SCAN_BYTES = 10 << 20


def rank_records(total: int, block: int, rank: int, world_size: int) -> int:
    """How many of ``total`` records are rank ``rank``'s when blocks of ``block`` go to the ranks in turn."""
    cycles, rest = divmod(total, block * world_size)
    return cycles * block + min(max(rest - rank * block, 0), block)


def dealt_ever(positions: np.ndarray, total: int, block: int, rank: int, world_size: int) -> np.ndarray:
    """Mask [n] of the file ``positions`` [n] (0-based, in a file of ``total`` records) that rank ``rank`` is dealt
    in some epoch. Position p is stream index p + e * total in epoch e, in block (p + e * total) // block, which
    is rank (that block) % world_size's. As e runs, (p + e * total) mod (block * world_size) takes every value
    congruent to p modulo g = gcd(total, block * world_size), and the rank's blocks cover the values
    [rank * block, rank * block + block): one of them is congruent to p iff (p - rank * block) mod g < block.
    So with one rank, or g <= block, every record; with a whole number of rounds of blocks in the file
    (g = block * world_size), the same share every epoch."""
    g = math.gcd(total, block * world_size)
    return (positions - rank * block) % g < block


def record_problems(chunk: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """MLPerf records [n, 40] -> (label not 0 or 1 [n], a categorical index negative [n])."""
    bad_label = (chunk[:, 0] != 0) & (chunk[:, 0] != 1)
    return bad_label, (chunk[:, 1 + CRITEO_NUM_DENSE:] < 0).any(axis=1)


#: Bytes of text: a binary record's first value, its little-endian label 0 or 1, starts with a byte outside them.
TEXT_BYTES = frozenset(range(0x20, 0x7F)) | {0x09, 0x0A, 0x0D}


def refuse_text(path: Path) -> None:
    """DataError where the file at ``path`` starts with a text label (a Criteo TSV given as ``mlperf:``, which
    read as records whose every label was bad)."""
    with open(path, "rb") as f:
        first = f.read(4)
    if first and all(b in TEXT_BYTES for b in first):
        raise DataError(str(path), 0, f"starts with text ({first!r}), not MLPerf's binary records (40 int32 "
                                      "each): a Criteo TSV file is read as criteo:PATH")


#: Features named in a message about eval data whose multi-hot sizes are not the training data's (of 26).
FEATURES_SHOWN = 3


def width_differences(train: tuple[int, ...], held_out: tuple[int, ...]) -> str:
    """The first FEATURES_SHOWN features whose lookups per sample differ between the training and eval data, with
    both values, and how many more do (both tuples of 26 said nothing the reader could use at a glance)."""
    differ = [f for f, (a, b) in enumerate(zip(train, held_out)) if a != b]
    named = "; ".join(f"feature {f}: training {train[f]} lookups per sample, eval {held_out[f]}"
                      for f in differ[:FEATURES_SHOWN])
    more = len(differ) - FEATURES_SHOWN
    return named + (f"; and {more} more feature{'s' if more > 1 else ''}" if more > 0 else "")


class RecordSource(Closing):
    """Streams batches from ``records`` (memory-mapped; one batch read at a time): deals them to the ranks, counts
    and skips their bad rows, evaluates in one pass and resumes. The mappings (and the descriptors they keep) go
    with the source; no file object stays open: ``close`` does nothing."""

    eval_rows_per_rank = False  # every rank reads the whole eval file

    def __init__(self, records: Records, config: ModelConfig, *, batch_size: int, bad_rows: BadRows,
                 eval_source: RecordSource | None = None, num_eval_batches: int = 8, rank: int = 0,
                 world_size: int = 1) -> None:
        self.records, self.total = records, records.total
        self.name = ",".join(map(str, records.paths))  # the files, in messages about all of them
        self.batch_size, self.bad_rows, self.rank, self.world_size = batch_size, bad_rows, rank, world_size
        self.table_rows = np.asarray(config.table_rows, dtype=np.int64)
        if eval_source is not None and eval_source.records.multi_hot != records.multi_hot:
            differ = width_differences(records.multi_hot, eval_source.records.multi_hot)
            raise DataError(eval_source.name, 0, f"lookups per sample differ from the training data's: {differ}; give "
                                                 "eval data written like the training data")
        self.eval_source, self.num_eval_batches = eval_source, num_eval_batches
        self.eval_bad_rows = eval_source.bad_rows if eval_source is not None else None
        self.read = 0  # this rank's records read in the run, over epochs (``_stream_index``)
        self._counted_to = -1  # stream index of the last bad record counted in epoch 0
        self._dealt_good: bool | None = None  # whether a record this rank is dealt is good; None: not looked yet

    def adapt(self, config: ModelConfig) -> ModelConfig:
        return self.records.adapt(config)

    def build_pinned(self) -> None:
        """Build each batch's ids in page-locked memory where the records can (multi-hot days: ``pinned_ids``), for a
        reader whose batches go to a CUDA device (``prefetch.Prefetching``): ``Batch.pinned`` then copies the
        small rest alone. Training batches only: the evaluation's are read on the caller's thread, unpinned."""
        if hasattr(self.records, "pinned_ids"):
            self.records.pinned_ids = True

    def _stream_index(self, read: int) -> int:
        """This rank's record ``read`` (0-based, over the run) -> its index in the run's stream, the files
        repeated epoch after epoch: blocks of ``batch_size`` go to the ranks in turn."""
        block, offset = divmod(read, self.batch_size)
        return (block * self.world_size + self.rank) * self.batch_size + offset

    @property
    def epoch(self) -> int:
        """The epoch of the next record this rank reads."""
        return self._stream_index(self.read) // self.total

    def _counted_before(self, index: int) -> bool:
        """Whether the bad record at stream index ``index`` was counted when it was read before (see
        CriteoTSVSource): in an earlier epoch, or before a put-back position."""
        if index >= self.total or index <= self._counted_to:
            return True
        self._counted_to = index
        return False

    def _check(self, chunk: object, index: int) -> np.ndarray:
        """Mask [n] of good records in ``chunk``, the stream's from ``index`` (within one epoch and one file)."""
        first = index % self.total  # in the files, 0-based
        good = self.records.good(chunk)
        for i in np.flatnonzero(~good):
            self.bad_rows.handle(self.records.error(chunk, int(i), first),
                                 counted=self._counted_before(index + int(i)))
        return good

    def _pieces(self) -> list[tuple[int, int]]:
        """The files cut into pieces [first, stop) of SCAN_BYTES of rows, each within one file."""
        rows = max(SCAN_BYTES // self.records.row_bytes, 1)
        pieces, first = [], 0
        while first < self.total:
            pieces.append((first, first + min(rows, self.records.span(first))))
            first = pieces[-1][1]
        return pieces

    def _good_dealt_in(self, first: int, stop: int) -> bool:
        """Whether a record of [first, stop) that this rank is dealt in some epoch is good (bad ones are not
        counted: ``_check`` counts them as they are read)."""
        good = self.records.good(self.records.read(first, stop))
        dealt = dealt_ever(np.arange(first, stop), self.total, self.batch_size, self.rank, self.world_size)
        return bool((dealt & good).any())

    def _require_a_good_record(self) -> None:
        """DataError unless a record this rank is dealt, in any epoch, is good: asked once a whole epoch of its
        records held none. On several ranks what a rank is dealt may shift from epoch to epoch (``dealt_ever``),
        so its good records may come epochs later; the files are looked through once, for the run."""
        if self._dealt_good is None:
            self._dealt_good = any(self._good_dealt_in(first, stop) for first, stop in self._pieces())
        if not self._dealt_good:
            files = "the whole file" if len(self.records.paths) == 1 else f"any of the {len(self.records.paths)} files"
            raise DataError(self.name, 0, f"no good row in {files}{dealt_to(self.rank, self.world_size)}")

    def next_batch(self) -> Batch:
        return self._next(wrap=True)

    def _next(self, *, wrap: bool) -> Batch | None:
        """The next batch; ``wrap`` False: only records before the end of this epoch. A DataError puts the
        position back to the batch's start (see CriteoTSVSource)."""
        return keeping_position(self, lambda: self._read_records(wrap))

    def _read_records(self, wrap: bool) -> Batch | None:
        """``_next``'s batch: up to ``batch_size`` good records of this rank; bad ones counted and skipped."""
        parts, n, epoch, start = [], 0, self.epoch, self._stream_index(self.read)
        while n < self.batch_size:
            index = self._stream_index(self.read)
            if not wrap and index // self.total > epoch:
                break
            if n == 0 and index - start >= self.total:  # a whole epoch of this rank's records, none good
                self._require_a_good_record()
            # within one block, one epoch and one file: contiguous
            first = index % self.total
            take = min(self.batch_size - n, self.batch_size - self.read % self.batch_size, self.records.span(first))
            chunk = self.records.read(first, first + take)
            parts.append((chunk, self._check(chunk, index)))
            n += int(parts[-1][1].sum())
            self.read += take
        if n == 0:
            return None
        return self.records.batch(parts, self.table_rows)

    def eval_batches(self) -> list[Batch] | None:
        if self.eval_source is None:
            return None
        self.eval_source.load_state_dict({"read": 0})
        return one_pass(self.eval_source, self.num_eval_batches, self.eval_source.name)

    def state_dict(self) -> dict:
        return {"read": self.read, "records": self.total, "file_records": list(self.records.file_rows),
                "bad_rows": self.bad_rows.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Continue from ``state``; without "bad_rows" (an eval rewind, an older checkpoint) the count stays."""
        self.read = self._saved_read(state)
        if "bad_rows" in state:  # counted: the bad records before the position, none after (a dry run's put back)
            self.bad_rows.load_state_dict(state["bad_rows"])
            self._counted_to = self._stream_index(self.read) - 1

    def _saved_read(self, state: dict) -> int:
        """The records read that ``state`` saved. A checkpoint from before the fifty-first session saved this
        rank's epoch and position in it (each epoch's blocks dealt from the file's first record: on one rank
        the same records). A file of another size than the one saved is refused: it changed since: each file's
        count where the checkpoint has them (``file_records``), else the total (which days of 10 and 6 rows rewritten
        as 6 and 10 passed)."""
        if "read" not in state:
            epoch, position = int(state["epoch"]), int(state["position"])
            records = rank_records(self.total, self.batch_size, self.rank, self.world_size)
            if position and position >= records:  # a saved position was always before the end
                share = f" for rank {self.rank} of {self.world_size}" if self.world_size > 1 else ""
                raise changed_since_checkpoint(self.name, f"the saved position, {position} rows into an epoch, is "
                                                          f"at or beyond the end of its {records} rows{share}")
            return epoch * records + position
        self._refuse_changed_file(state.get("file_records"))
        if "records" in state and int(state["records"]) != self.total:
            raise changed_since_checkpoint(self.name, f"it held {state['records']} rows, now {self.total}")
        return int(state["read"])

    def _refuse_changed_file(self, saved: list[int] | None) -> None:
        """ValueError naming the first file whose record count is not the saved one (None: none saved)."""
        rows = self.records.file_rows
        if saved is None or list(saved) == rows:
            return
        if len(saved) != len(rows):
            raise ValueError(f"{self.name}: the checkpoint was written reading {len(saved)} files, not these "
                             f"{len(rows)}; give the files the run was trained on, or start a new --checkpoint-dir")
        k = next(k for k, (was, now) in enumerate(zip(saved, rows)) if was != now)
        raise changed_since_checkpoint(self.records.paths[k], f"it held {saved[k]} rows, now {rows[k]}")


class OneHotRecords:
    """The records [total, 40] int32 of one binary file (``Records``): label, 13 raw counts, 26 hashed ids."""

    row_bytes = RECORD_BYTES
    multi_hot = ONE_HOT

    def __init__(self, path: Path, total: int) -> None:
        if total == 0:  # before np.memmap, which cannot map an empty file
            raise DataError(str(path), 0, "file holds no complete row")
        self.paths, self.total, self.file_rows = [path], total, [total]
        self.records = np.memmap(path, dtype="<i4", mode="r", shape=(total, CRITEO_COLUMNS))  # [N, 40]

    def span(self, first: int) -> int:
        return self.total - first

    def read(self, first: int, stop: int) -> np.ndarray:
        return np.asarray(self.records[first:stop])  # [n, 40]

    def good(self, chunk: np.ndarray) -> np.ndarray:
        bad_label, bad_index = record_problems(chunk)
        return ~(bad_label | bad_index)

    def error(self, chunk: np.ndarray, i: int, first: int) -> DataError:
        bad_label, _ = record_problems(chunk[i:i + 1])
        problem = "label must be 0 or 1" if bad_label[0] else "categorical index is negative"
        number = first + i + 1  # 1-based in messages
        return DataError(str(self.paths[0]), number, f"row {number}: {problem}")

    def batch(self, parts: list[tuple[np.ndarray, np.ndarray]], table_rows: np.ndarray) -> Batch:
        rec = np.concatenate([chunk[good] for chunk, good in parts])  # [B, 40]
        return to_batch(rec[:, 0], rec[:, 1:1 + CRITEO_NUM_DENSE], rec[:, 1 + CRITEO_NUM_DENSE:], table_rows)

    def adapt(self, config: ModelConfig) -> ModelConfig:
        return adapt_criteo(config, self.paths[0])


class MLPerfBinarySource(RecordSource):
    """Streams batches from a binary file of 40-int32 records, the DLRM reference's ``*_processed.bin``."""

    def __init__(self, path: Path, config: ModelConfig, *, batch_size: int, bad_rows: BadRows,
                 eval_source: MLPerfBinarySource | None = None, num_eval_batches: int = 8, rank: int = 0,
                 world_size: int = 1) -> None:
        path = require_file(Path(path), "MLPerf binary")
        refuse_text(path)
        size = path.stat().st_size
        total = size // RECORD_BYTES
        if size % RECORD_BYTES and total // batch_size % world_size == rank:  # counted by its block's rank
            bad_rows.handle(DataError(str(path), total + 1,
                                      f"row {total + 1} is truncated: file size {size} is not a multiple "
                                      f"of {RECORD_BYTES} bytes (40 int32 per row)"))
        super().__init__(OneHotRecords(path, total), config, batch_size=batch_size, bad_rows=bad_rows,
                         eval_source=eval_source, num_eval_batches=num_eval_batches, rank=rank, world_size=world_size)
