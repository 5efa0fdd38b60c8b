"""Criteo click logs in the raw TSV format, and what the MLPerf binary reader (``polyrec.data.mlperf``) shares
with it: the model's shape for Criteo data, the one-hot batch, one pass over eval data.

TSV (Criteo Kaggle ``train.txt``, Criteo 1TB ``day_N``): one sample per line, 40 tab-separated
columns: the label (0/1), 13 integer features I1..I13 (counts, may be empty or negative), 26
categorical features C1..C26 (32-bit hex hashes, may be empty). Source: Criteo's dataset readme;
the DLRM reference (facebookresearch/dlrm data_utils.py) reads the same way.
- dense: x -> log(max(x, 0) + 1), empty -> 0 (the DLRM reference's transform);
- categorical: int(hex, 16) mod table rows, empty -> 0.
A field is read strictly: an integer is digits after an optional '-', a categorical hex digits only, both
within int64; anything else (spaces, '+', '0x', '_', a negative hex) makes the row bad.

TSV files stream from disk one batch at a time (bounded memory), wrap around into the next epoch, and can
resume from a saved (epoch, position); a saved position the file no longer fits (beyond its end, or not at
the start of a TSV line) is refused: the file changed since the checkpoint. An evaluation reads the eval
file from its start at most once (every row at most once, the last batch short where the file ends in
it). On several ranks, the rows go in blocks of ``batch_size`` to the ranks in turn by their place in the
run's stream (the files one after another, epoch after epoch: block k to rank k % world size), so the ranks'
batches of one step together are the rows one process reads for a batch ``world size`` times as large, over
files' and epochs' ends too (until the fifty-first session each file's blocks were dealt from its first line,
and each rank wrapped after its own share). A bad row is counted once, by the rank it belongs to, when it
is first read: not again in later epochs nor in later evaluations.
"""

from __future__ import annotations

import codecs
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import numpy as np
import torch

from polyrec.data.types import (BadRows, Batch, Closing, DataError, changed_since_checkpoint, keeping_position, no_rows,
                                refuse_cr_only, require_file)
from polyrec.models.config import CRITEO_NUM_DENSE, ModelConfig

if TYPE_CHECKING:
    from polyrec.data.mlperf import RecordSource

CRITEO_NUM_CATEGORICAL = 26  # C1..C26 (Criteo's dataset readme)
CRITEO_COLUMNS = 1 + CRITEO_NUM_DENSE + CRITEO_NUM_CATEGORICAL  # 40
ONE_HOT = (1,) * CRITEO_NUM_CATEGORICAL  # ids per sample of each feature in a TSV line or a binary record
#: Consecutive malformed rows after which even ``--skip-bad-rows`` stops: a wrong file, not bad rows.
MAX_BAD_ROWS_IN_A_ROW = 1000
#: Bytes a TSV line may take before the reader stops: a Criteo line of 40 valid fields is under 1 KB (13
#: integers of at most 20 characters, 26 hex fields of at most 16); a file without newlines (an archive, a
#: binary file) would otherwise be read whole as its first "line".
MAX_LINE_BYTES = 1 << 20
#: What C1..C26 are made of (Criteo's readme: 32-bit hashes in hex, e.g. 68fd1e64).
HEX_DIGITS = b"0123456789abcdefABCDEF"
#: Bytes read at a time when looking for a file's first row (``holds_a_row``): any size works; 64 KiB keeps the
#: look at a file that starts with a row to one read.
ROW_SCAN_BYTES = 1 << 16
#: Bytes the label and I1..I13 may hold, with their tabs: digits and '-' (Criteo's counts include -1, -2).
HEAD_BYTES = b"\t-0123456789"
#: Bytes C1..C26 may hold, with their tabs.
TAIL_BYTES = b"\t" + HEX_DIGITS
#: Range of the int64 arrays a batch is built in.
INT64_MIN, INT64_MAX = -2**63, 2**63 - 1
#: Most digits of an int64 (19); checked before int(), which refuses over 4300 (Python's int_max_str_digits).
INT64_DIGITS = len(str(INT64_MAX))


def adapt_criteo(config: ModelConfig, path: Path, multi_hot: tuple[int, ...] = ONE_HOT) -> ModelConfig:
    """Criteo data needs 13 dense features and 26 tables of ``multi_hot`` ids per sample; table sizes stay the
    preset's (rows are hashed)."""
    if config.num_tables != CRITEO_NUM_CATEGORICAL:
        raise ValueError(f"{path}: Criteo data has {CRITEO_NUM_CATEGORICAL} categorical features but preset "
                         f"{config.name!r} has {config.num_tables} tables")
    return config.replace(num_dense=CRITEO_NUM_DENSE, multi_hot=multi_hot)


def to_batch(label: np.ndarray, dense: np.ndarray, cat: np.ndarray, table_rows: np.ndarray) -> Batch:
    """label [B], raw dense [B, 13], categorical [B, 26] (non-negative int32 or int64) -> a one-hot Batch, its ids as
    read, feature-major, taken mod ``table_rows`` where the batch lands (``Batch.mod_rows``: 65536 binary records'
    ids took 17.8 ms on one host core taken mod there, 6.0 ms copied as read)."""
    b, features = cat.shape
    return Batch(dense=torch.from_numpy(np.log(np.maximum(dense, 0).astype(np.float32) + 1.0)),
                 values=torch.from_numpy(np.ascontiguousarray(cat.T).reshape(-1)),  # [26*B] feature-major
                 offsets=torch.arange(b * features + 1, dtype=torch.int64),
                 labels=torch.from_numpy(label.astype(np.float32)),
                 feature_bounds=tuple(range(0, b * features + 1, b)) if b else None,
                 mod_rows=torch.tensor(table_rows, dtype=torch.int64))


def decimal(field: bytes) -> int:
    """A decimal integer field (empty: 0) read without its leading zeros: Python converts at most 4300 digits
    (``sys.get_int_max_str_digits``), and zeros in front of a value within int64 may make a field longer."""
    sign, digits = (b"-", field[1:]) if field[:1] == b"-" else (b"", field)
    return int(sign + (digits.lstrip(b"0") or b"0"))


def dense_ok(field: bytes) -> bool:
    """An integer feature: empty, or decimal digits after an optional '-', within int64."""
    digits = field[1:] if field[:1] == b"-" else field
    return not field or (digits.isdigit() and len(digits.lstrip(b"0")) <= INT64_DIGITS
                         and INT64_MIN <= decimal(field) <= INT64_MAX)


def categorical_ok(field: bytes) -> bool:
    """A categorical feature: empty, or hex digits below 2^63."""
    return not field or (not field.translate(None, HEX_DIGITS) and int(field, 16) <= INT64_MAX)


def field_error(line: bytes, path: str, line_no: int) -> DataError:
    """The DataError naming the first malformed feature of ``line`` (which has one); slow, for bad rows only."""
    cols = line.split(b"\t")
    for k, field in enumerate(cols[1:1 + CRITEO_NUM_DENSE], start=1):
        if not dense_ok(field):
            return DataError(path, line_no, f"I{k} is {field[:24]!r}: integer features must be empty or digits "
                                            "after an optional '-', within int64")
    k, field = next((k, f) for k, f in enumerate(cols[1 + CRITEO_NUM_DENSE:], start=1) if not categorical_ok(f))
    return DataError(path, line_no, f"C{k} is {field[:24]!r}: categorical features must be hex or empty, below 2^63")


def parse_tsv_line(raw: bytes, path: str, line_no: int, out: np.ndarray) -> None:
    """One TSV line into ``out`` [40] int64: label, 13 raw ints, 26 categorical ints; DataError names what is
    wrong. Runs for every row, so the checks are whole-line byte checks, not one per field: ``dense_ok`` and
    ``categorical_ok`` state the same rules field by field."""
    line = raw.rstrip(b"\r\n")
    head = line.split(b"\t", 1 + CRITEO_NUM_DENSE)  # label, I1..I13, then C1..C26 in one piece
    tail = head.pop() if len(head) == 2 + CRITEO_NUM_DENSE else b""
    cats = tail.split(b"\t")
    if len(head) + len(cats) != CRITEO_COLUMNS:
        columns = line.count(b"\t") + 1
        unlabelled = (" (no label column: Criteo Kaggle's test.txt is unlabelled)" if columns == CRITEO_COLUMNS - 1
                      else "")
        raise DataError(path, line_no, f"expected {CRITEO_COLUMNS} tab-separated columns, found {columns}{unlabelled}")
    if head[0] not in (b"0", b"1"):
        header = " (a header line? Criteo TSV files have none)" if line_no == 1 and head[0].isalpha() else ""
        raise DataError(path, line_no, f"label must be 0 or 1, got {head[0][:20]!r}{header}")
    if line[:len(line) - len(tail)].translate(None, HEAD_BYTES) or tail.translate(None, TAIL_BYTES):
        raise field_error(line, path, line_no)  # ' ', '+', '_', 'x', a '-' in C1..C26, ...
    try:
        ints = [int(c) if c else 0 for c in head]
    except ValueError:  # a '-' alone or not in front, or more digits than Python converts
        if not all(map(dense_ok, head[1:])):
            raise field_error(line, path, line_no) from None
        ints = [decimal(c) for c in head]  # good values behind leading zeros
    ints += [int(c, 16) if c else 0 for c in cats]
    try:
        out[:] = ints
    except OverflowError:  # a value beyond int64: numpy's check as it stores, free for good rows
        raise field_error(line, path, line_no) from None


def byte_at(path: Path, offset: int) -> bytes:
    """The byte of ``path`` at ``offset`` (b"" past the end)."""
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(1)


def holds_a_row(path: Path) -> bool:
    """Whether ``path`` holds a line that is not blank, as ``CriteoTSVSource._readline`` reads rows (a leading UTF-8
    byte-order mark taken off, line-ending bytes alone are no row); read up to the first such line, not the whole
    file."""
    with open(path, "rb") as f:
        chunk = f.read(ROW_SCAN_BYTES).removeprefix(codecs.BOM_UTF8)
        while chunk:
            if chunk.translate(None, b"\r\n"):
                return True
            chunk = f.read(ROW_SCAN_BYTES)
    return False


class CriteoTSVSource(Closing):
    """Streams batches from Criteo TSV files (one after another, then again from the first); on several
    ranks, block k of ``batch_size`` lines of each file is rank k % world_size's. The file being read stays
    open across batches until ``close`` (or ``with``, or the source's collection) closes it. Files of no rows at
    all are refused when it is opened."""

    eval_rows_per_rank = False  # every rank reads the whole eval file

    def __init__(self, paths: list[Path], config: ModelConfig, *, batch_size: int, bad_rows: BadRows,
                 eval_source: CriteoTSVSource | None = None, num_eval_batches: int = 8, rank: int = 0,
                 world_size: int = 1) -> None:
        self.paths = [require_file(Path(p), "Criteo TSV") for p in paths]
        if not any(map(holds_a_row, self.paths)):  # stops at the first file with a row
            raise no_rows(self.paths)
        self.batch_size, self.bad_rows, self.rank, self.world_size = batch_size, bad_rows, rank, world_size
        self.table_rows = np.asarray(config.table_rows, dtype=np.int64)
        self.eval_source, self.num_eval_batches = eval_source, num_eval_batches
        self.eval_bad_rows = eval_source.bad_rows if eval_source is not None else None
        self.epoch, self.file_index, self.byte_offset, self.line_no = 0, 0, 0, 0
        self.stream_line = 0  # lines read in the run, over files and epochs: which rank's block a line is in
        self._file: BinaryIO | None = None
        self._closing: weakref.finalize | None = None  # closes ``_file``, at the latest when the source is collected
        self._empty_files = 0  # files ended in a row without a line: all of them (emptied since the open) means no data
        self._counted_to = (0, 0)  # (file_index, line_no) of the last bad row counted in epoch 0

    def adapt(self, config: ModelConfig) -> ModelConfig:
        return adapt_criteo(config, self.paths[0])

    def _readline(self, wrap: bool = True) -> bytes:
        """The next line across files and epochs, blank lines skipped and a leading UTF-8 byte-order mark
        taken off; tracks the position for resume. ``wrap`` False: b"" at the end of the last file (the
        position then at the start of the next epoch)."""
        while True:
            if self._file is None:
                self._file = self._open_file()
            raw = self._file.readline(MAX_LINE_BYTES + 1)
            refuse_cr_only(raw, str(self.paths[self.file_index]), self.line_no + 1)
            if len(raw) > MAX_LINE_BYTES:
                raise DataError(str(self.paths[self.file_index]), self.line_no + 1,
                                f"a line longer than {MAX_LINE_BYTES:,} bytes; is this Criteo TSV?")
            if raw:
                self.byte_offset += len(raw)
                self.line_no += 1
                if self.line_no == 1:  # an editor's byte-order mark is not part of the first label
                    raw = raw.removeprefix(codecs.BOM_UTF8)
                if not raw.rstrip(b"\r\n"):  # a blank line: no row, neither bad nor dealt to a rank
                    continue
                self._empty_files = 0
                self.stream_line += 1
                return raw
            self._close_file()
            self._empty_files += 1  # a file of blank lines only counts as empty
            if self._empty_files > len(self.paths):
                raise no_rows(self.paths)
            self.file_index, self.byte_offset, self.line_no = self.file_index + 1, 0, 0
            if self.file_index == len(self.paths):
                self.file_index, self.epoch = 0, self.epoch + 1
                if not wrap:
                    return b""

    def _open_file(self) -> BinaryIO:
        """The current file, at the position; closed by ``_close_file``, or when the source is collected (a source
        dropped mid-file left it open: a ResourceWarning)."""
        file = open(self.paths[self.file_index], "rb")  # noqa: SIM115 - kept open across batches
        file.seek(self.byte_offset)
        self._closing = weakref.finalize(self, file.close)
        return file

    def _close_file(self) -> None:
        if self._file is not None:
            self._closing()  # closes it, once: the finalizer is spent
            self._file = None

    def close(self) -> None:
        """Close the file being read and the eval source's; reading on opens it again at the position."""
        self._close_file()
        if self.eval_source is not None:
            self.eval_source.close()

    def _counted_before(self) -> bool:
        """Whether the bad row just read was counted when it was read before: in an earlier epoch, or
        before a rewind (the eval source is read from its start again for each evaluation)."""
        here = (self.file_index, self.line_no)
        if self.epoch or here <= self._counted_to:
            return True
        self._counted_to = here
        return False

    def next_batch(self) -> Batch:
        return self._next(wrap=True)

    def _next(self, *, wrap: bool) -> Batch | None:
        """The next batch; ``wrap`` False: only rows before the end of this epoch, so the batch may be short,
        or None when no good row was left. A DataError puts the position (and the bad-row count) back to the
        batch's start: a checkpoint saved then, and a resume from it, read the whole batch again."""
        rows = keeping_position(self, lambda: self._read_rows(wrap))
        if rows.shape[0] == 0:
            return None
        return to_batch(rows[:, 0], rows[:, 1:1 + CRITEO_NUM_DENSE], rows[:, 1 + CRITEO_NUM_DENSE:], self.table_rows)

    def _read_rows(self, wrap: bool) -> np.ndarray:
        """Up to ``batch_size`` good rows [n, 40] of this rank (``_next``); bad ones counted and skipped."""
        rows = np.empty((self.batch_size, CRITEO_COLUMNS), np.int64)  # [B, 40]
        block, world, rank = self.batch_size, self.world_size, self.rank
        n, skipped_in_a_row, run_start = 0, 0, None
        while n < self.batch_size:
            raw = self._readline(wrap)
            if not raw:  # the end of the epoch, without wrapping
                break
            if (self.stream_line - 1) // block % world != rank:  # another rank's line
                continue
            try:
                parse_tsv_line(raw, str(self.paths[self.file_index]), self.line_no, rows[n])
            except DataError as err:
                self.bad_rows.handle(err, counted=self._counted_before())
                run_start = run_start or (self.epoch, self.file_index, self.line_no)
                self._stop_bad_run(err, skipped_in_a_row, run_start)
                skipped_in_a_row += 1
                continue
            n, skipped_in_a_row, run_start = n + 1, 0, None
        return rows[:n]

    def _stop_bad_run(self, err: DataError, skipped: int, run_start: tuple[int, int, int]) -> None:
        """DataError where a run of bad rows, ``skipped`` before this one (``err``), since the one at ``run_start``
        (epoch, file index, line) says the input is wrong: on one rank, the run came round to its first row again
        (not one good row in the files: they would be read over and over); anywhere, more than
        MAX_BAD_ROWS_IN_A_ROW of them (a wrong file). On several ranks a rank's lines may change from epoch to
        epoch, so only the second applies."""
        epoch, file_index, line_no = run_start
        if self.world_size == 1 and self.epoch > epoch and (self.file_index, self.line_no) >= (file_index, line_no):
            files = "the file" if len(self.paths) == 1 else f"any of the {len(self.paths)} files"
            raise DataError(err.path, err.line, f"no good row in {files}: all {skipped} rows read are bad; "
                                                "is this Criteo TSV?") from None
        if skipped + 1 > MAX_BAD_ROWS_IN_A_ROW:
            whose = dealt_to(self.rank, self.world_size, "of those ")
            raise DataError(err.path, err.line,
                            f"{skipped + 1} bad rows in a row{whose}; is this Criteo TSV?") from None

    def eval_batches(self) -> list[Batch] | None:
        if self.eval_source is None:
            return None
        self.eval_source.load_state_dict({"epoch": 0, "file_index": 0, "byte_offset": 0, "line_no": 0})
        with self.eval_source:  # read from its start again next time: nothing to keep open until then
            return one_pass(self.eval_source, self.num_eval_batches, ",".join(map(str, self.eval_source.paths)))

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "file_index": self.file_index, "byte_offset": self.byte_offset,
                "line_no": self.line_no, "stream_line": self.stream_line, "bad_rows": self.bad_rows.state_dict()}

    def _check_position(self) -> None:
        """A loaded position must still be the start of a line of its file: within the file, after a newline
        (or at the very end: a last line without one). Anything else means the file changed since the
        position was saved, and reading on would parse half a line or skip to another epoch."""
        path = self.paths[self.file_index]
        size = path.stat().st_size
        if self.byte_offset > size:
            where = f"beyond its end ({size} bytes)"
        elif 0 < self.byte_offset < size and byte_at(path, self.byte_offset - 1) != b"\n":
            where = "in the middle of a line"
        else:
            return
        raise changed_since_checkpoint(path, f"the saved position, byte {self.byte_offset} (after line "
                                             f"{self.line_no}), is {where}")

    def load_state_dict(self, state: dict) -> None:
        """Continue from ``state``; without "bad_rows" (an eval rewind, an older checkpoint) the count stays."""
        self._close_file()
        self.epoch, self.file_index = int(state["epoch"]), int(state["file_index"])
        self.byte_offset, self.line_no = int(state["byte_offset"]), int(state["line_no"])
        # a checkpoint from before the fifty-first session dealt each file's lines from its first: on one rank
        # the same lines
        self.stream_line = int(state.get("stream_line", self.line_no))
        self._empty_files = 0
        self._check_position()
        if "bad_rows" in state:  # counted: the bad lines before the position, none after (a dry run's put back)
            self.bad_rows.load_state_dict(state["bad_rows"])
            self._counted_to = (self.file_index, self.line_no)


def one_pass(source: CriteoTSVSource | RecordSource, max_batches: int, path: str) -> list[Batch]:
    """At most ``max_batches`` batches from ``source``'s position (an epoch's start) to the end of that epoch:
    every row at most once, the last batch short where the data ends in it."""
    batches, epoch = [], source.epoch
    while len(batches) < max_batches and source.epoch == epoch:
        batch = source._next(wrap=False)
        if batch is None:
            break
        batches.append(batch)
    if not batches:
        raise DataError(path, 0, "no good row to evaluate on")
    return batches


def dealt_to(rank: int, world_size: int, lead: str = "") -> str:
    """Whose rows a message counts: on several ranks " {lead}dealt to rank R of W" (each rank reads and checks
    only its own), on one nothing."""
    return f" {lead}dealt to rank {rank} of {world_size}" if world_size > 1 else ""
