"""What every data source yields (:class:`Batch`), how it reports bad input, and its resumable interface."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

import numpy as np
import torch

from polyrec.models.config import ModelConfig


@dataclass(kw_only=True, slots=True)
class Batch:
    """One training batch in the feature-major jagged layout of TorchRec's KeyedJaggedTensor."""

    dense: torch.Tensor  # [B, num_dense] float32, already transformed (log1p for Criteo counts)
    values: torch.Tensor  # [nnz] int64, row indices, feature-major
    offsets: torch.Tensor  # [F*B+1] int64; bag (f, b) is values[offsets[f*B+b]:offsets[f*B+b+1]]
    labels: torch.Tensor  # [B] float32 in {0, 1}
    # offsets[0], offsets[B], ..., offsets[F*B] (where each feature's ids start and end), known on the host
    # without reading the device: tables of several row dtypes split the ids there without a host sync
    # (polyrec.models.mixed_embeddings). None where unknown; ``to`` takes them from host offsets.
    feature_bounds: tuple[int, ...] | None = None
    # [F] int64 on the host, or None: where set, ``values`` are the ids as read (non-negative; int32 from MLPerf's
    # days), each still to be taken mod its feature's table rows, which ``to`` does where the batch lands: a GPU
    # takes a 65536-row MLPerf batch's 14.0M ids mod in microseconds, where the reader's host took ~22 ms of its
    # ~33 ms batch on 8 threads (``benchmarks/results/pinned_ids_ab_2026-12-06/reader_parts_h100.txt``)
    mod_rows: torch.Tensor | None = None

    @property
    def batch_size(self) -> int:
        return self.dense.shape[0]

    def host_bounds(self) -> tuple[int, ...] | None:
        """``feature_bounds``, or read from the offsets where they are in host memory (None on a device)."""
        if self.feature_bounds is not None or self.offsets.device.type != "cpu" or self.batch_size == 0:
            return self.feature_bounds
        return tuple(self.offsets[::self.batch_size].tolist())

    @property
    def num_features(self) -> int:
        return (self.offsets.numel() - 1) // self.batch_size

    def padded(self, size: int) -> Batch:
        """This batch with samples appended up to ``size`` (itself where it has as many): zero dense features,
        label 0 and an empty bag in every feature, so a model's output for the first ``batch_size`` samples is
        theirs. A short last held-out batch padded so runs the kernels the full batches compiled."""
        pad = size - self.batch_size
        if pad <= 0:
            return self
        features = self.num_features
        starts = self.offsets[:-1].view(features, self.batch_size)
        ends = self.offsets[1:].view(features, self.batch_size)[:, -1:]  # each feature's last bag end
        offsets = torch.cat([torch.cat([starts, ends.expand(features, pad)], dim=1).reshape(-1), self.offsets[-1:]])
        return Batch(dense=torch.cat([self.dense, self.dense.new_zeros(pad, self.dense.shape[1])]),
                     values=self.values, offsets=offsets, labels=torch.cat([self.labels, self.labels.new_zeros(pad)]),
                     feature_bounds=self.feature_bounds,  # the padding's bags are empty: the same bounds
                     mod_rows=self.mod_rows)

    def pinned(self) -> Batch:
        """This batch in page-locked host memory, so that ``to(cuda, non_blocking=True)`` is an asynchronous copy (from
        pageable memory the copy waits on the host: about 10 ms of a 65536-row MLPerf multi-hot batch when its ids were
        112 MB of int64; 56 MB of int32 as read since ``mod_rows``)."""
        return Batch(dense=self.dense.pin_memory(), values=self.values.pin_memory(),
                     offsets=self.offsets.pin_memory(), labels=self.labels.pin_memory(),
                     feature_bounds=self.host_bounds(), mod_rows=self.mod_rows)

    def to(self, device: torch.device, non_blocking: bool = False) -> Batch:
        """This batch on ``device``, its ids taken mod their tables' rows there where ``mod_rows`` is set (int64
        row indices either way)."""
        bounds = self.host_bounds()
        values = self.values.to(device, non_blocking=non_blocking)
        if self.mod_rows is not None:  # no ids (no samples): nothing to take mod, nor bounds
            values = feature_remainders(values, self.mod_rows, bounds) if values.numel() else values.long()
        return Batch(dense=self.dense.to(device, non_blocking=non_blocking), values=values,
                     offsets=self.offsets.to(device, non_blocking=non_blocking),
                     labels=self.labels.to(device, non_blocking=non_blocking), feature_bounds=bounds)


def feature_remainders(values: torch.Tensor, rows: torch.Tensor, bounds: tuple[int, ...]) -> torch.Tensor:
    """values [nnz] (non-negative integers, feature-major, feature f's at [bounds[f], bounds[f+1])) -> int64 [nnz],
    each mod its feature's ``rows[f]`` (host [F]), on the values' device: one launch per feature, each taking its
    slice mod a scalar in the values' own type and writing int64, with no temporary and no host sync (a per-id
    divisor, ``repeat_interleave``'d, cost 8 bytes an id: 112 MB at an MLPerf batch)."""
    if rows.numel() != len(bounds) - 1 or bounds[-1] != values.numel():
        raise ValueError(f"feature_remainders: bounds {list(bounds)} ({len(bounds) - 1} features) and "
                         f"{rows.numel()} table sizes do not describe {values.numel()} ids")
    out = torch.empty(values.shape, dtype=torch.int64, device=values.device)
    widest = torch.iinfo(values.dtype).max
    for start, end, r in zip(bounds[:-1], bounds[1:], rows.tolist()):
        if start == end:
            continue
        if r > widest:  # every id the type holds is below r already (and r does not fit the type)
            out[start:end].copy_(values[start:end])
        else:
            torch.remainder(values[start:end], r, out=out[start:end])
    return out


T = TypeVar("T")


class DataError(ValueError):
    """A malformed input row, named by file and line."""

    def __init__(self, path: str, line: int, problem: str) -> None:
        super().__init__(f"{path}:{line}: {problem}")
        self.path, self.line, self.problem = path, line, problem


def changed_since_checkpoint(path: object, how: str) -> ValueError:
    """The error refusing to resume on ``path`` (a file, or a source's files joined), which changed since the
    checkpoint was written, as ``how`` says: reading on would go over other rows than the run's."""
    return ValueError(f"{path} changed since the checkpoint was written: {how}; restore the file the run was trained "
                      "on, or start a new --checkpoint-dir")


def no_rows(paths: list[Path], noun: str = "file") -> DataError:
    """The DataError for input of no rows at all, naming all its ``paths`` (``noun`` says what each is): a file of no
    rows among others adds none, but where every one is empty there is nothing to train on."""
    where = f"the {noun}" if len(paths) == 1 else f"any of the {len(paths)} {noun}s"
    return DataError(",".join(map(str, paths)), 0, f"no rows in {where}")


@dataclass(kw_only=True, slots=True)
class BadRows:
    """Malformed rows skipped under ``--skip-bad-rows``: how many, and the first few for the report."""

    skip: bool  # False: the first bad row raises DataError
    count: int = 0
    examples: list[str] = field(default_factory=list)  # "file:line: problem", at most MAX_EXAMPLES

    MAX_EXAMPLES = 5

    def handle(self, error: DataError, *, counted: bool = False) -> None:
        """Raise ``error``, or count it when skipping; ``counted``: this row was counted when it was read
        before (an earlier epoch, an earlier evaluation), so it is skipped without counting it again."""
        if not self.skip:
            raise error
        if counted:
            return
        self.count += 1
        if len(self.examples) < self.MAX_EXAMPLES:
            self.examples.append(str(error))

    def state_dict(self) -> dict:
        """The count and examples as plain ints and strings (checkpoints load with ``weights_only``)."""
        return {"count": self.count, "examples": list(self.examples)}

    def load_state_dict(self, state: dict) -> None:
        self.count, self.examples = int(state["count"]), [str(e) for e in state["examples"]]


def keeping_position(source: Source, read: Callable[[], T]) -> T:
    """``read()`` (a batch), with ``source``'s position and bad-row count put back to where they were when it
    raises DataError: the batch a bad row stopped is read again whole by a run resumed from a checkpoint saved
    then, as by a run that never stopped (not from the row after the last one read)."""
    start = source.state_dict()
    try:
        return read()
    except DataError:
        source.load_state_dict(start)
        raise


class Closing:
    """``close`` and ``with source: ...`` (which closes it at the block's end) for a source; ``close`` here
    releases nothing: a source that holds a file open overrides it."""

    def close(self) -> None:
        """Release what the source holds open; reading on opens it again where it stopped."""

    def __enter__(self: T) -> T:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Source(Protocol):
    """A deterministic, resumable stream of batches; ``with`` closes it (``Closing``)."""

    bad_rows: BadRows
    eval_bad_rows: BadRows | None  # the ``--eval-data`` file's, counted apart; None without such a file
    #: Whether each rank's held-out rows are its own (synthetic: drawn from the rank's seed), so that
    #: several ranks' evaluations gather them; else every rank holds all of them (an eval file, a test split).
    eval_rows_per_rank: bool

    def adapt(self, config: ModelConfig) -> ModelConfig:
        """The model config with the table sizes and dense width this data needs."""

    def next_batch(self) -> Batch:
        """The next training batch (full size; streams wrap around into the next epoch). A file source that
        raises DataError leaves its position at the batch's start (``keeping_position``)."""

    def eval_batches(self) -> list[Batch] | None:
        """The held-out batches to measure AUC on, or None when the source has none; each held-out row at most
        once (the last batch may be short)."""

    def state_dict(self) -> dict:
        """The stream position (plain ints), enough to continue exactly where it stopped; file sources add
        their bad-row count (``BadRows.state_dict``), so that it is saved at the position it belongs to."""

    def load_state_dict(self, state: dict) -> None:
        ...

    def close(self) -> None:
        """Release the files it holds open (``Closing``): the caller that is done with the source calls it."""


C = TypeVar("C")


class Records(Protocol[C]):
    """Rows of memory-mapped MLPerf files by their place in the files one after another, read a chunk ``C`` at a
    time (``mlperf.RecordSource`` deals them to ranks, counts their bad rows and resumes): one-hot binary records
    (``mlperf.OneHotRecords``) or multi-hot day arrays (``multihot.MultiHotRecords``)."""

    paths: list[Path]  # the files, in the stream's order (named by messages about all of them)
    total: int  # rows in all the files, at least 1
    file_rows: list[int]  # rows in each file (0: it adds none), in the stream's order (a resume refuses changed counts)
    row_bytes: int  # bytes one row takes in memory
    multi_hot: tuple[int, ...]  # ids per row of each feature

    def span(self, first: int) -> int:
        """Rows from ``first`` (0-based, below ``total``) to the end of its file: at least 1."""

    def read(self, first: int, stop: int) -> C:
        """Rows [first, stop) of one file (``stop - first`` at most ``span(first)``), in memory."""

    def good(self, chunk: C) -> np.ndarray:
        """Mask [n] of the chunk's good rows."""

    def error(self, chunk: C, i: int, first: int) -> DataError:
        """What is wrong with bad row ``i`` of the chunk read from ``first``, naming its file and row."""

    def batch(self, parts: list[tuple[C, np.ndarray]], table_rows: np.ndarray) -> Batch:
        """The batch of the good rows (mask [n]) of the chunks, in order; ids mod ``table_rows`` [F] (or, where the
        batch's ``mod_rows`` says, as read: ``to`` takes them mod there)."""

    def adapt(self, config: ModelConfig) -> ModelConfig:
        """The model config with the dense width and multi-hot sizes of these files."""


#: Leading bytes of compressed files (each format's magic number; bzip2's with its block size digit), which
#: the readers do not decompress: Criteo 1TB ships as ``day_N.gz``. None can begin a Criteo row (a 0/1
#: label), an MLPerf record (an int32 0/1 label) or a MovieLens file (an .inter header or a numeric user id).
COMPRESSED_MAGIC = {"gzip": (b"\x1f\x8b",), "bzip2": tuple(b"BZh%d" % size for size in range(1, 10)),
                    "xz": (b"\xfd7zXZ\x00",), "zstd": (b"\x28\xb5\x2f\xfd",), "zip": (b"PK\x03\x04",)}
#: Uncompressed files of other formats, by their magic numbers ((offset, bytes), ...), and what to give instead.
#: A tar archive has "ustar" and a NUL (POSIX.1 ustar) or a space (GNU tar) at byte 257: Criteo Kaggle's
#: ``dac.tar.gz`` once gunzipped. A NumPy array file begins with "\x93NUMPY" (NumPy's .npy format): TorchRec's
#: MLPerf DLRMv2 preprocessing writes ``day_N_{dense,sparse,labels}.npy``, whose int32s read as MLPerf records
#: pass for good ones under --skip-bad-rows. Neither shows in a file of the three formats: Criteo and MovieLens
#: files are text, and in an MLPerf file "ust" at bytes 257-259 would be the top of record 2's C11, an id above 1.9e9.
OTHER_FORMATS = {
    "a tar archive": (((257, b"ustar\x00"), (257, b"ustar ")), "extract its files first"),
    "a NumPy .npy array": (((0, b"\x93NUMPY"),), "mlperf:PATH reads the DLRM reference's *_processed.bin (40 int32 "
                           "per record), or TorchRec's multi-hot days as mlperf:DIR/day_N_sparse_multi_hot.npz (its "
                           "day_N_dense.npy and day_N_labels.npy beside it), not an .npy array alone"),
}
#: Leading bytes read to recognise a file's format: enough for every magic number above.
SNIFF_BYTES = max(at + len(magic) for marks, _ in OTHER_FORMATS.values() for at, magic in marks)


def other_format(head: bytes) -> str | None:
    """The name of the OTHER_FORMATS entry whose magic number ``head`` (a file's first bytes) holds, or None."""
    return next((name for name, (marks, _) in OTHER_FORMATS.items()
                 if any(head[at:at + len(magic)] == magic for at, magic in marks)), None)


def require_regular_file(path: Path, what: str) -> Path:
    """``path``, checked to be a regular file; ``what`` names the format in the error (e.g. "Criteo TSV")."""
    if path.is_dir():
        raise FileNotFoundError(f"{what} path {path} is a directory, not a file")
    if not path.exists():
        raise FileNotFoundError(f"{what} file not found: {path}")
    if not path.is_file():  # a pipe or a device cannot be read again from the start (epochs, resume)
        raise ValueError(f"{what} path {path} is not a regular file (a pipe or a device): give a file on disk")
    return path


def require_file(path: Path, what: str) -> Path:
    """``path``, checked to be a regular file, not compressed and not of another format (OTHER_FORMATS); ``what``
    names the format in the error (e.g. "Criteo TSV")."""
    require_regular_file(path, what)
    with open(path, "rb") as f:
        head = f.read(SNIFF_BYTES)
    compression = next((name for name, magics in COMPRESSED_MAGIC.items() if head.startswith(magics)), None)
    if compression is not None:
        raise DataError(str(path), 0, f"{compression}-compressed: decompress it first (polyrec reads {what} files "
                        "uncompressed)")
    fmt = other_format(head)
    if fmt is not None:
        raise DataError(str(path), 0, f"{fmt}, not {what} data: {OTHER_FORMATS[fmt][1]}")
    return path


#: Bytes that are no text of a data file's line (ASCII control bytes but the tab, and DEL): in the line before a
#: b"\r" they tell a binary file from rows with old-Mac line endings.
CONTROL_BYTES = bytes([*range(0x09), *range(0x0A, 0x20), 0x7F])


def refuse_cr_only(raw: bytes, path: str, line_no: int) -> None:
    """DataError where ``raw``, line ``line_no`` of ``path`` read up to b"\n", is rows with old-Mac line endings
    (b"\r" alone), which read as one long line: it does not end in b"\n" (no newline from there to the file's end,
    or none within a length limit) and holds a b"\r" before its end, after text. A Windows line (b"\r\n"), a line
    ending in b"\n" with a stray b"\r" inside (a bad row) and a binary file (control bytes before its b"\r") are
    not refused."""
    if raw.endswith(b"\n"):  # every line but a file's last: read for every row, so first
        return
    first, cr, _ = raw.rstrip(b"\r").partition(b"\r")
    if not (cr and first) or len(first.translate(None, CONTROL_BYTES)) < len(first):
        return
    raise DataError(path, line_no, "the file uses CR-only line endings (old Mac OS: b'\\r' alone ends each row), so "
                    "its rows read as one line; convert them to newlines, e.g. tr '\\r' '\\n' < FILE > FILE.unix")


def offsets_from_lengths(lengths: torch.Tensor) -> torch.Tensor:
    """lengths [F*B] (feature-major) -> offsets [F*B+1] int64."""
    offsets = torch.zeros(lengths.numel() + 1, dtype=torch.int64, device=lengths.device)
    torch.cumsum(lengths, 0, out=offsets[1:])
    return offsets
