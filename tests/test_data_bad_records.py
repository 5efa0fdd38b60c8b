"""MLPerf binary records under --skip-bad-rows on one and several ranks: a rank says "no good row in the whole
file" only when no record it is dealt, in any epoch, is good.

The ranks are dealt blocks of ``batch_size`` records by their place in the run's stream (the file repeated epoch
after epoch). Unless the file holds a whole number of rounds of blocks, what a rank is dealt shifts from epoch to
epoch: a file of 18 records, 16 bad then 2 good, batch 4, two ranks, gives rank 1 records 5-8 and 13-16 in the
first epoch, and the good records 17 and 18 only in the third (its records 25 and 26). Rank 1 used to stop
after 24 of its records, more than the file's 18 plus a batch ("no good row in the whole file dealt to rank
1 of 2")."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from polyrec.data import BadRows, DataError
from polyrec.data.criteo import to_batch
from polyrec.data.mlperf import RECORD_BYTES, MLPerfBinarySource, dealt_ever
from test_data import DATA, small, write_records

BAD_LABEL = 3  # a record whose label is neither 0 nor 1 is bad


@dataclass(kw_only=True, slots=True)
class BoundedBadRows(BadRows):
    """Skipped bad records that fail the test after ``limit`` of them, rather than let a rank read on for ever."""

    limit: int
    seen: int = 0

    def handle(self, error: DataError, *, counted: bool = False) -> None:
        self.seen += 1
        assert self.seen <= self.limit, f"read on past {self.limit} bad records: {error}"
        BadRows.handle(self, error, counted=counted)


def records(path: Path, total: int, good: list[int]) -> np.ndarray:
    """``total`` random records [total, 40] written to ``path``, all bad but those at the file positions ``good``."""
    rec = write_records(path, total)
    rec[[p for p in range(total) if p not in good], 0] = BAD_LABEL
    rec.tofile(path)
    return rec


def period(total: int, batch: int, world: int) -> int:
    """A rank's records in one round of the dealing: it repeats every lcm(total, batch * world) stream records."""
    return math.lcm(total, batch * world) // world


def source(path: Path, batch: int, rank: int, world: int) -> MLPerfBinarySource:
    """Rank ``rank``'s source, failing rather than reading past the rounds a first batch can take."""
    limit = (batch + 1) * period(path.stat().st_size // RECORD_BYTES, batch, world)
    return MLPerfBinarySource(path, small(), batch_size=batch, bad_rows=BoundedBadRows(skip=True, limit=limit),
                              rank=rank, world_size=world)


def dealt(total: int, batch: int, rank: int, world: int, reads: int) -> list[int]:
    """File positions of the rank's first ``reads`` records: block k of the stream is rank k % world's."""
    return [((read // batch * world + rank) * batch + read % batch) % total for read in range(reads)]


def first_good_batch(rec: np.ndarray, batch: int, rank: int, world: int) -> list[int] | None:
    """File positions of the first ``batch`` good records the rank is dealt, or None when it is dealt none in
    ``batch`` rounds of the dealing."""
    total = rec.shape[0]
    good = [p for p in dealt(total, batch, rank, world, batch * period(total, batch, world)) if rec[p, 0] in (0, 1)]
    return good[:batch] if good else None


def assert_batch_of(got, rec: np.ndarray, positions: list[int]) -> None:
    rows = rec[positions].astype(np.int64)
    want = to_batch(rows[:, 0], rows[:, 1:14], rows[:, 14:], np.asarray(small().table_rows, dtype=np.int64))
    assert torch.equal(got.values, want.values) and torch.equal(got.dense, want.dense)


@pytest.mark.parametrize("world", [1, 2])
def test_good_records_after_a_long_bad_run_are_read_by_every_rank(tmp_path, world):
    """The docstring's file: every rank reads records 17 and 18 (was: rank 1 of 2 said there were none)."""
    rec = records(tmp_path / "r.bin", 18, good=[16, 17])
    for rank in range(world):
        got = source(tmp_path / "r.bin", 4, rank, world).next_batch()
        assert_batch_of(got, rec, first_good_batch(rec, 4, rank, world))
        assert set(first_good_batch(rec, 4, rank, world)) == {16, 17}


@pytest.mark.parametrize("world,batch", [(1, 2), (1, 3), (2, 2), (2, 3), (2, 4), (3, 2)])
def test_each_rank_reads_its_first_good_records_or_says_it_has_none(tmp_path, world, batch):
    """Every small file with a run of bad records then good ones, or one good record: each rank's first batch is
    the first good records it is dealt; "no good row" exactly when it is dealt none in any epoch (three
    ranks, batch 2, a file of 9: rank 0 is never dealt records 3, 6, 9)."""
    for total in range(2, 19):
        for good in [list(range(k, total)) for k in range(1, total)] + [[p] for p in range(total)]:
            rec = records(tmp_path / "r.bin", total, good)
            for rank in range(world):
                want = first_good_batch(rec, batch, rank, world)
                src = source(tmp_path / "r.bin", batch, rank, world)
                if want is None:
                    with pytest.raises(DataError, match="no good row in the whole file"):
                        src.next_batch()
                else:
                    assert_batch_of(src.next_batch(), rec, want)


@pytest.mark.parametrize("world,rank,good", [(1, 0, []), (2, 0, []), (2, 1, []), (2, 1, [0, 1, 2, 3, 8, 9, 10, 11]),
                                             (3, 0, [4, 11, 16])])
def test_a_rank_dealt_no_good_record_says_so_after_one_epoch(tmp_path, world, rank, good):
    """No good record at all, or none among those the rank is dealt (two ranks, 16 records: rank 1 is dealt 5-8
    and 13-16 every epoch; three ranks, batch 4, 18 records: rank 0 is never dealt records 5, 6, 11, 12, 17, 18):
    the error comes once the rank has read one epoch of its records (was: after about world_size epochs), and the
    position goes back to the batch's start (a checkpoint saved then reads that batch again)."""
    total = 18 if world == 3 else 16
    records(tmp_path / "r.bin", total, good)
    src = source(tmp_path / "r.bin", 4, rank, world)
    share = f" dealt to rank {rank} of {world}" if world > 1 else ""
    asked_at = []
    require = src._require_a_good_record
    src._require_a_good_record = lambda: asked_at.append(src.epoch) or require()
    with pytest.raises(DataError, match=rf"r\.bin:0: no good row in the whole file{share}$"):
        src.next_batch()
    assert asked_at == [1] and (src.epoch, src.read) == (0, 0)


def test_dealt_ever_is_what_the_stream_deals(tmp_path):
    """The file positions a rank is dealt in some epoch, by formula, against dealing the stream block by block."""
    for world in (1, 2, 3, 4):
        for batch in (1, 2, 3, 4, 6):
            for total in range(1, 30):
                for rank in range(world):
                    reads = 2 * period(total, batch, world)
                    want = np.zeros(total, bool)
                    want[dealt(total, batch, rank, world, reads)] = True
                    got = dealt_ever(np.arange(total), total, batch, rank, world)
                    assert np.array_equal(got, want), (world, batch, total, rank)


def test_an_all_bad_eval_file_still_has_no_good_row_to_evaluate_on(tmp_path):
    """An evaluation reads one epoch without wrapping: it ends there, before any "no good row" check."""
    records(tmp_path / "e.bin", 8, good=[])
    records(tmp_path / "t.bin", 8, good=list(range(8)))
    ev = source(tmp_path / "e.bin", 4, 0, 1)
    train = MLPerfBinarySource(tmp_path / "t.bin", small(), batch_size=4, bad_rows=BadRows(skip=True), eval_source=ev)
    with pytest.raises(DataError, match=r"e\.bin:0: no good row to evaluate on"):
        train.eval_batches()


@pytest.mark.parametrize("world", [1, 2])
def test_tsv_bad_rows_in_a_row_are_counted_on_each_rank_and_said_so(tmp_path, world):
    """--skip-bad-rows stops after MAX_BAD_ROWS_IN_A_ROW malformed rows in a row; on several ranks each counts
    its own lines (the others' are not parsed), and the message says whose."""
    from polyrec.data.criteo import MAX_BAD_ROWS_IN_A_ROW, CriteoTSVSource

    good = (DATA / "criteo_sample.tsv").read_text().splitlines()[0]
    path = tmp_path / "bad.tsv"
    path.write_text("not\ta\tcriteo\trow\n" * (world * (MAX_BAD_ROWS_IN_A_ROW + 4)) + (good + "\n") * 8)
    share = " of those dealt to rank 0 of 2" if world == 2 else ""
    src = CriteoTSVSource([path], small(), batch_size=4, bad_rows=BadRows(skip=True), rank=0, world_size=world)
    with pytest.raises(DataError, match=rf"{MAX_BAD_ROWS_IN_A_ROW + 1} bad rows in a row{share}; is this Criteo"):
        src.next_batch()
