"""Criteo TSV files of no rows at all are refused when the source is opened, naming every file, as multi-hot days
are (``types.no_rows``); the check reads each file only up to its first row, not a whole multi-GB day."""

from __future__ import annotations

import builtins
import codecs
import re
from pathlib import Path

import pytest
import torch

from polyrec.data import BadRows, DataError, open_source
from polyrec.data.criteo import CriteoTSVSource
from test_data import small

DATA = Path(__file__).parent / "data"
CPU = torch.device("cpu")
SAMPLE = DATA / "criteo_sample.tsv"
#: Contents of files that hold no row: empty, blank lines (LF, CRLF, CR), a byte-order mark and blank lines.
NO_ROWS = [b"", b"\n\n", b"\r\n\r\n", b"\r\r", codecs.BOM_UTF8 + b"\n"]


def criteo(paths: list[Path], bad: BadRows | None = None) -> CriteoTSVSource:
    return CriteoTSVSource(paths, small(), batch_size=4, bad_rows=bad or BadRows(skip=False))


@pytest.mark.parametrize("content", NO_ROWS)
def test_criteo_files_of_no_rows_are_refused_when_opened(tmp_path, content):
    """Was: opened, and refused only at the first batch."""
    paths = [tmp_path / "a.tsv", tmp_path / "b.tsv"]
    paths[0].write_bytes(content)
    paths[1].write_bytes(b"")
    with pytest.raises(DataError, match=re.escape(f"{paths[0]},{paths[1]}:0: no rows in any of the 2 files")):
        criteo(paths, BadRows(skip=True))
    with pytest.raises(DataError, match=re.escape(f"{paths[0]}:0: no rows in the file")):
        criteo(paths[:1])
    with pytest.raises(DataError, match=re.escape(f"{paths[0]},{paths[1]}:0: no rows in any of the 2 files")):
        open_source(f"criteo:{paths[0]},{paths[1]}", small(), batch_size=4, seed=0, device=CPU)


def test_criteo_eval_data_of_no_rows_is_refused_when_opened(tmp_path):
    """Was: the run started and stopped at its first evaluation ("no good row to evaluate on")."""
    empty = tmp_path / "eval.tsv"
    empty.write_bytes(b"\n")
    with pytest.raises(DataError, match=re.escape(f"{empty}:0: no rows in the file")):
        open_source(f"criteo:{SAMPLE}", small(), batch_size=4, seed=0, device=CPU, eval_spec=f"criteo:{empty}")


def test_criteo_files_of_bad_rows_only_still_open(tmp_path):
    """A line of spaces, or of one bad field, is a row (a bad one): refused as before, at the read."""
    path = tmp_path / "bad.tsv"
    path.write_bytes(b"\n \n")
    source = criteo([path])
    with pytest.raises(DataError, match=re.escape(f"{path}:2: expected 40 tab-separated columns, found 1")):
        source.next_batch()


def test_rows_after_blank_lines_and_empty_files_are_found(tmp_path):
    empty, rows = tmp_path / "empty.tsv", tmp_path / "rows.tsv"
    empty.write_bytes(b"")
    rows.write_bytes(codecs.BOM_UTF8 + b"\r\n" * 40_000 + SAMPLE.read_bytes())  # the first row past 64 KiB
    got, want = criteo([empty, rows, empty]).next_batch(), criteo([SAMPLE]).next_batch()
    assert torch.equal(got.values, want.values) and torch.equal(got.labels, want.labels)


class CountingReads:
    """A file opened for reading, counting the bytes ``read`` and ``readline`` return into ``counts``."""

    def __init__(self, file, counts: list[int]) -> None:
        self.file, self.counts = file, counts

    def read(self, size: int = -1) -> bytes:
        data = self.file.read(size)
        self.counts.append(len(data))
        return data

    def readline(self, size: int = -1) -> bytes:
        data = self.file.readline(size)
        self.counts.append(len(data))
        return data

    def __getattr__(self, name: str):
        return getattr(self.file, name)

    def __enter__(self) -> CountingReads:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.file.close()


def test_opening_reads_a_large_file_only_up_to_its_first_row(tmp_path, monkeypatch):
    """Opening a Criteo day of many GB must not read it whole to see that it holds a row."""
    path = tmp_path / "day_0"
    path.write_bytes(SAMPLE.read_bytes() * 400)  # about 4.8 MB
    counts: list[int] = []
    real_open = builtins.open

    def counting_open(file, *args, **kwargs):
        opened = real_open(file, *args, **kwargs)
        return CountingReads(opened, counts) if Path(file) == path else opened

    monkeypatch.setattr(builtins, "open", counting_open)
    criteo([path])
    monkeypatch.undo()
    assert 0 < sum(counts) <= path.stat().st_size // 50, counts


def test_criteo_files_emptied_after_the_open_stop_the_read(tmp_path):
    """The read still names every file when they hold no row any more (rewritten since the source opened)."""
    paths = [tmp_path / "a.tsv", tmp_path / "b.tsv"]
    for p in paths:
        p.write_bytes(SAMPLE.read_bytes())
    source = criteo(paths)
    for p in paths:
        p.write_bytes(b"\n")
    with pytest.raises(DataError, match=re.escape(f"{paths[0]},{paths[1]}:0: no rows in any of the 2 files")):
        source.next_batch()
