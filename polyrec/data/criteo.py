"""Criteo click logs: the raw TSV format and the MLPerf/DLRM preprocessed binary format.

TSV (Criteo Kaggle ``train.txt``, Criteo 1TB ``day_N``): one sample per line, 40 tab-separated
columns: the label (0/1), 13 integer features I1..I13 (counts, may be empty or negative), 26
categorical features C1..C26 (32-bit hex hashes, may be empty). Source: Criteo's dataset readme;
the DLRM reference (facebookresearch/dlrm data_utils.py) reads the same way.
- dense: x -> log(max(x, 0) + 1), empty -> 0 (the DLRM reference's transform);
- categorical: int(hex, 16) mod table rows, empty -> 0.

Binary (the DLRM reference's ``*_processed.bin`` for Criteo Terabyte, read by
facebookresearch/dlrm data_loader_terabyte.py): records of 40 little-endian int32, label, 13 raw
integer features, 26 categorical indices already hashed; dense values get the same log transform, and
indices are taken mod the table rows (so capped tables work).

Both stream from disk one batch at a time (bounded memory), wrap around into the next epoch, and can
resume from a saved (epoch, position).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from polyrec.data.types import BadRows, Batch, DataError
from polyrec.models.config import CRITEO_NUM_DENSE, ModelConfig

CRITEO_NUM_CATEGORICAL = 26  # C1..C26 (Criteo's dataset readme)
CRITEO_COLUMNS = 1 + CRITEO_NUM_DENSE + CRITEO_NUM_CATEGORICAL  # 40
RECORD_BYTES = 4 * CRITEO_COLUMNS  # one binary record: 40 int32
#: Consecutive malformed rows after which even ``--skip-bad-rows`` stops: a wrong file, not bad rows.
MAX_BAD_ROWS_IN_A_ROW = 1000


def adapt_criteo(config: ModelConfig, path: Path) -> ModelConfig:
    """Criteo data needs 13 dense features and 26 tables; table sizes stay the preset's (rows are hashed)."""
    if config.num_tables != CRITEO_NUM_CATEGORICAL:
        raise ValueError(f"{path}: Criteo data has {CRITEO_NUM_CATEGORICAL} categorical features but preset "
                         f"{config.name!r} has {config.num_tables} tables")
    return config.replace(num_dense=CRITEO_NUM_DENSE, multi_hot=(1,) * CRITEO_NUM_CATEGORICAL)


def to_batch(label: np.ndarray, dense: np.ndarray, cat: np.ndarray, table_rows: np.ndarray) -> Batch:
    """label [B], raw dense [B, 13], categorical [B, 26] (any non-negative ints) -> a one-hot Batch."""
    b = label.shape[0]
    values = (cat.astype(np.int64) % table_rows).T.reshape(-1)  # [26*B] feature-major
    return Batch(dense=torch.from_numpy(np.log(np.maximum(dense, 0).astype(np.float32) + 1.0)),
                 values=torch.from_numpy(np.ascontiguousarray(values)),
                 offsets=torch.arange(b * cat.shape[1] + 1, dtype=torch.int64),
                 labels=torch.from_numpy(label.astype(np.float32)))


def parse_tsv_line(raw: bytes, path: str, line_no: int) -> tuple[int, list[int], list[int]]:
    """One TSV line -> (label, 13 raw ints, 26 categorical ints); DataError names what is wrong."""
    cols = raw.rstrip(b"\r\n").split(b"\t")
    if len(cols) != CRITEO_COLUMNS:
        raise DataError(path, line_no, f"expected {CRITEO_COLUMNS} tab-separated columns, found {len(cols)}")
    if cols[0] not in (b"0", b"1"):
        raise DataError(path, line_no, f"label must be 0 or 1, got {cols[0][:20]!r}")
    try:
        dense = [int(c) if c else 0 for c in cols[1:1 + CRITEO_NUM_DENSE]]
    except ValueError:
        raise DataError(path, line_no, "integer features I1..I13 must be integers or empty") from None
    try:
        cat = [int(c, 16) if c else 0 for c in cols[1 + CRITEO_NUM_DENSE:]]
    except ValueError:
        raise DataError(path, line_no, "categorical features C1..C26 must be hex or empty") from None
    return int(cols[0]), dense, cat


class CriteoTSVSource:
    """Streams batches from Criteo TSV files (one after another, then again from the first)."""

    def __init__(self, paths: list[Path], config: ModelConfig, *, batch_size: int, bad_rows: BadRows,
                 eval_source: CriteoTSVSource | None = None, num_eval_batches: int = 8) -> None:
        missing = [str(p) for p in paths if not Path(p).is_file()]
        if missing:
            raise FileNotFoundError(f"Criteo TSV file(s) not found: {', '.join(missing)}")
        self.paths, self.batch_size, self.bad_rows = [Path(p) for p in paths], batch_size, bad_rows
        self.table_rows = np.asarray(config.table_rows, dtype=np.int64)
        self.eval_source, self.num_eval_batches = eval_source, num_eval_batches
        self.epoch, self.file_index, self.byte_offset, self.line_no = 0, 0, 0, 0
        self._file = None
        self._empty_files = 0  # files ended in a row without a line: all of them means no data at all

    def adapt(self, config: ModelConfig) -> ModelConfig:
        return adapt_criteo(config, self.paths[0])

    def _readline(self) -> bytes:
        """The next line across files and epochs; tracks the position for resume."""
        while True:
            if self._file is None:
                self._file = open(self.paths[self.file_index], "rb")  # noqa: SIM115 - kept open across batches
                self._file.seek(self.byte_offset)
            raw = self._file.readline()
            if raw:
                self._empty_files = 0
                self.byte_offset += len(raw)
                self.line_no += 1
                return raw
            self._file.close()
            self._file = None
            self._empty_files += 1
            if self._empty_files > len(self.paths):
                raise DataError(str(self.paths[self.file_index]), 0, "no rows left in any input file")
            self.file_index, self.byte_offset, self.line_no = self.file_index + 1, 0, 0
            if self.file_index == len(self.paths):
                self.file_index, self.epoch = 0, self.epoch + 1

    def next_batch(self) -> Batch:
        label = np.empty(self.batch_size, np.int64)
        dense = np.empty((self.batch_size, CRITEO_NUM_DENSE), np.int64)
        cat = np.empty((self.batch_size, CRITEO_NUM_CATEGORICAL), np.int64)
        n, skipped_in_a_row = 0, 0
        while n < self.batch_size:
            raw = self._readline()
            try:
                label[n], dense[n], cat[n] = parse_tsv_line(raw, str(self.paths[self.file_index]), self.line_no)
            except DataError as err:
                self.bad_rows.handle(err)
                skipped_in_a_row += 1
                if skipped_in_a_row > MAX_BAD_ROWS_IN_A_ROW:
                    raise DataError(err.path, err.line, f"{skipped_in_a_row} bad rows in a row; is this Criteo TSV?") from None
                continue
            n, skipped_in_a_row = n + 1, 0
        return to_batch(label, dense, cat, self.table_rows)

    def eval_batches(self) -> list[Batch] | None:
        if self.eval_source is None:
            return None
        self.eval_source.load_state_dict({"epoch": 0, "file_index": 0, "byte_offset": 0, "line_no": 0})
        return [self.eval_source.next_batch() for _ in range(self.num_eval_batches)]

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "file_index": self.file_index, "byte_offset": self.byte_offset,
                "line_no": self.line_no}

    def load_state_dict(self, state: dict) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self.epoch, self.file_index = int(state["epoch"]), int(state["file_index"])
        self.byte_offset, self.line_no = int(state["byte_offset"]), int(state["line_no"])


class MLPerfBinarySource:
    """Streams batches from a binary file of 40-int32 records (memory-mapped; one batch read at a time)."""

    def __init__(self, path: Path, config: ModelConfig, *, batch_size: int, bad_rows: BadRows,
                 eval_source: MLPerfBinarySource | None = None, num_eval_batches: int = 8) -> None:
        self.path, self.batch_size, self.bad_rows = Path(path), batch_size, bad_rows
        if not self.path.is_file():
            raise FileNotFoundError(f"MLPerf binary file not found: {self.path}")
        size = self.path.stat().st_size
        if size % RECORD_BYTES:
            err = DataError(str(self.path), size // RECORD_BYTES + 1,
                            f"record {size // RECORD_BYTES + 1} is truncated: file size {size} is not a multiple "
                            f"of {RECORD_BYTES} bytes (40 int32 per record)")
            self.bad_rows.handle(err)
        self.records = np.memmap(self.path, dtype="<i4", mode="r", shape=(size // RECORD_BYTES, CRITEO_COLUMNS))
        if self.records.shape[0] == 0:
            raise DataError(str(self.path), 0, "file holds no complete record")
        self.table_rows = np.asarray(config.table_rows, dtype=np.int64)
        self.eval_source, self.num_eval_batches = eval_source, num_eval_batches
        self.epoch, self.position = 0, 0

    def adapt(self, config: ModelConfig) -> ModelConfig:
        return adapt_criteo(config, self.path)

    def _check(self, chunk: np.ndarray, first: int) -> np.ndarray:
        """Mask of good records in chunk [n, 40] starting at record ``first`` (1-based in messages)."""
        bad_label = (chunk[:, 0] != 0) & (chunk[:, 0] != 1)
        bad_index = (chunk[:, 1 + CRITEO_NUM_DENSE:] < 0).any(axis=1)
        for i in np.flatnonzero(bad_label | bad_index):
            problem = "label must be 0 or 1" if bad_label[i] else "categorical index is negative"
            self.bad_rows.handle(DataError(str(self.path), first + int(i) + 1, f"record {first + int(i) + 1}: {problem}"))
        return ~(bad_label | bad_index)

    def next_batch(self) -> Batch:
        parts, n, scanned = [], 0, 0
        while n < self.batch_size:
            if scanned > self.records.shape[0] and n == 0:
                raise DataError(str(self.path), 0, "no good record in the whole file")
            take = min(self.batch_size - n, self.records.shape[0] - self.position)
            chunk = np.asarray(self.records[self.position:self.position + take])
            good = chunk[self._check(chunk, self.position)]
            parts.append(good)
            n += good.shape[0]
            self.position += take
            scanned += take
            if self.position == self.records.shape[0]:
                self.position, self.epoch = 0, self.epoch + 1
        rec = np.concatenate(parts)
        return to_batch(rec[:, 0], rec[:, 1:1 + CRITEO_NUM_DENSE], rec[:, 1 + CRITEO_NUM_DENSE:], self.table_rows)

    def eval_batches(self) -> list[Batch] | None:
        if self.eval_source is None:
            return None
        self.eval_source.load_state_dict({"epoch": 0, "position": 0})
        return [self.eval_source.next_batch() for _ in range(self.num_eval_batches)]

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
