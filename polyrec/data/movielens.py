"""MovieLens-100k as click data: (user, item) -> "liked" (rating >= 4), for quality checks on real data.

Two formats of the same ratings:
- GroupLens ``u.data``: ``user id \\t item id \\t rating \\t timestamp`` per line, no header
  (GroupLens ml-100k README);
- RecBole's atomic ``.inter`` file: a typed header (``user_id:token\\titem_id:token\\trating:float\\t
  timestamp:float``) then tab-separated rows; ``recbole==1.2.1`` ships ml-100k as
  ``recbole/dataset_example/ml-100k/ml-100k.inter`` (RecBole docs, "Atomic Files").

The 100k rows are read once (a few MB). Users and items become two embedding tables (ids indexed in
sorted order; under ``--row-cap N`` the indices are taken mod N, as the Criteo readers take hashed ids
mod the capped table rows); the one dense feature is the rating time scaled to [0, 1]. A permutation
seeded by the split seed (the same on every rank) puts TEST_FRACTION of the rows in the test set; each
training epoch is a fresh shuffle seeded by the (per-rank) data seed.
"""

from __future__ import annotations

import codecs
import itertools
import math
from pathlib import Path

import numpy as np
import torch

from polyrec.data.types import (BadRows, Batch, Closing, DataError, changed_since_checkpoint, refuse_cr_only,
                                require_file)
from polyrec.models.config import ModelConfig

#: Share of the ratings held out for the test AUC (a common 80/20 split, e.g. GroupLens' u1.base/u1.test).
TEST_FRACTION = 0.2
#: A rating at or above this counts as a positive ("liked"); 4 of 5 stars is the usual implicit cut.
POSITIVE_RATING = 4.0
#: MovieLens ratings are stars from 0.5 to 5: whole stars 1-5 in ml-100k (GroupLens ml-100k README), half
#: stars "0.5 stars - 5.0 stars" in later releases (GroupLens ml-latest README). Others are bad rows.
RATING_MIN, RATING_MAX = 0.5, 5.0
UDATA_COLUMNS = ("user_id", "item_id", "rating", "timestamp")
#: numpy's generators take seeds >= 0: a seed is taken modulo this (-1 -> 2^64 - 1; others >= 0 unchanged).
SEED_MODULUS = 2**64


def _header(first: str, path: str) -> list[str] | None:
    """Column names of an .inter header (``name:type`` fields), or None for a headerless u.data file."""
    fields = first.rstrip("\r\n").split("\t")
    if len(fields) == 1 and "::" in first:
        raise DataError(path, 1, "'::'-separated rows (MovieLens 1M/10M ratings.dat): polyrec reads ml-100k's "
                        "tab-separated u.data or RecBole's .inter")
    if all(":" in f for f in fields):
        names = [f.split(":", 1)[0] for f in fields]
        missing = [c for c in UDATA_COLUMNS if c not in names]
        if missing:
            raise DataError(path, 1, f".inter header lacks column(s) {', '.join(missing)}")
        twice = [c for c in UDATA_COLUMNS if names.count(c) > 1]
        if twice:  # else the first was read and the other ignored
            raise DataError(path, 1, f".inter header names column(s) {', '.join(twice)} more than once")
        return names
    return None


def parse_row(raw: bytes, cols: list[int], width: int, path: str, line_no: int) -> tuple[str, str, float, float]:
    """One line of ``width`` columns (u.data's 4, an .inter header's count) -> (user, item, rating, timestamp),
    read from columns ``cols``; DataError names what is wrong. Another count is another format (a Criteo TSV's
    40 columns read as ratings)."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataError(path, line_no,
                        f"not UTF-8 text: byte {raw[err.start]:#04x} at byte {err.start + 1} of the line") from None
    fields = line.rstrip("\r\n").split("\t")
    if len(fields) != width:
        raise DataError(path, line_no, f"expected {width} tab-separated columns, found {len(fields)}")
    try:
        rating, stamp = float(fields[cols[2]]), float(fields[cols[3]])
    except ValueError:
        raise DataError(path, line_no, "rating and timestamp must be numbers") from None
    if not (math.isfinite(rating) and math.isfinite(stamp)):
        raise DataError(path, line_no, f"rating and timestamp must be finite, got {rating} and {stamp}")
    if not RATING_MIN <= rating <= RATING_MAX:
        raise DataError(path, line_no, f"rating must be from {RATING_MIN:g} to {RATING_MAX:g} stars, got "
                                       f"{fields[cols[2]][:20]}")
    if not fields[cols[0]] or not fields[cols[1]]:
        raise DataError(path, line_no, "user and item ids must not be empty")
    return fields[cols[0]], fields[cols[1]], rating, stamp


def read_ratings(path: Path, bad_rows: BadRows) -> tuple[list[str], list[str], np.ndarray, np.ndarray]:
    """(user tokens, item tokens, ratings float64, timestamps float64), one entry per good row; blank lines are
    skipped (not counted as bad rows)."""
    users, items, ratings, times = [], [], [], []
    with open(path, "rb") as f:
        first = f.readline()
        if not first:
            raise DataError(str(path), 0, "file is empty")
        refuse_cr_only(first, str(path), 1)
        first = first.removeprefix(codecs.BOM_UTF8)  # an editor's byte-order mark is not part of the first field
        names = _header(first.decode("utf-8", errors="replace"), str(path))  # bad bytes: parse_row names the line
        cols = [names.index(c) for c in UDATA_COLUMNS] if names else [0, 1, 2, 3]
        width = len(names) if names else len(UDATA_COLUMNS)
        rows = enumerate(f, start=2) if names else enumerate(itertools.chain([first], f), start=1)
        for line_no, raw in rows:
            refuse_cr_only(raw, str(path), line_no)
            if not raw.rstrip(b"\r\n"):  # a blank line (a file's trailing one): no row, not a bad one
                continue
            try:
                user, item, rating, stamp = parse_row(raw, cols, width, str(path), line_no)
            except DataError as err:
                bad_rows.handle(err)
                continue
            users.append(user)
            items.append(item)
            ratings.append(rating)
            times.append(stamp)
    if not users:
        raise DataError(str(path), 0, "no good rows")
    return users, items, np.asarray(ratings), np.asarray(times)


def _index(tokens: list[str]) -> tuple[np.ndarray, int]:
    """Tokens -> dense indices in sorted-token order, and how many distinct tokens. Python strings (an object
    array): a fixed-width array would hold every token at the longest one's width (4 bytes a character: 20,000
    ids and one of 10,000 characters make 800 MB)."""
    vocab, idx = np.unique(np.asarray(tokens, dtype=object), return_inverse=True)
    return idx.astype(np.int64), len(vocab)


class MovieLensSource(Closing):
    """Shuffled training batches and a fixed test split of MovieLens ratings (read whole: no file kept open)."""

    eval_rows_per_rank = False  # every rank holds the whole test split (one split seed)

    def __init__(self, path: Path, *, batch_size: int, seed: int, bad_rows: BadRows,
                 split_seed: int | None = None, row_cap: int | None = None) -> None:
        """``seed``: this rank's training shuffles; ``split_seed``: the train/test split, the same on every
        rank (None: ``seed``, as in one process); ``row_cap``: at most this many rows per table, the user
        and item indices taken mod the cap (None: a row per user and per item)."""
        self.path, self.batch_size, self.bad_rows = require_file(Path(path), "MovieLens"), batch_size, bad_rows
        self.seed = seed % SEED_MODULUS
        self.eval_bad_rows = None  # the test split's bad rows are the file's: counted in bad_rows
        users, items, ratings, times = read_ratings(self.path, bad_rows)
        self.user, self.num_users = _index(users)
        self.item, self.num_items = _index(items)
        if row_cap is not None:
            self.user, self.num_users = self.user % row_cap, min(self.num_users, row_cap)
            self.item, self.num_items = self.item % row_cap, min(self.num_items, row_cap)
        span = max(times.max() - times.min(), 1.0)
        self.time = ((times - times.min()) / span).astype(np.float32)  # [N] in [0, 1]
        self.label = (ratings >= POSITIVE_RATING).astype(np.float32)  # [N]
        split = self.seed if split_seed is None else split_seed % SEED_MODULUS
        order = np.random.default_rng(split).permutation(len(ratings))
        n_test = int(round(len(ratings) * TEST_FRACTION))
        if n_test == 0:  # else every evaluation scored nothing, and said nothing
            raise ValueError(f"{self.path}: {len(ratings)} good rows leave no test rows ({TEST_FRACTION:.0%} are "
                             f"held out); give a file of at least {math.ceil(0.5 / TEST_FRACTION)} ratings")
        self.test_rows, self.train_rows = order[:n_test], order[n_test:]
        if len(self.train_rows) < batch_size:
            raise ValueError(f"{self.path}: {len(self.train_rows)} training rows, fewer than one batch of {batch_size}")
        self.epoch, self.cursor = 0, 0
        self._order = self._epoch_order()

    def adapt(self, config: ModelConfig) -> ModelConfig:
        """Two tables (users, items) and one dense feature (time); the preset's layer sizes stay."""
        return config.replace(num_dense=1, table_rows=(self.num_users, self.num_items), multi_hot=(1, 1))

    def _epoch_order(self) -> np.ndarray:
        return self.train_rows[np.random.default_rng([self.seed, self.epoch]).permutation(len(self.train_rows))]

    def _batch(self, rows: np.ndarray) -> Batch:
        values = np.concatenate([self.user[rows], self.item[rows]])  # [2*B] feature-major
        return Batch(dense=torch.from_numpy(self.time[rows][:, None].copy()),
                     values=torch.from_numpy(values),
                     offsets=torch.arange(2 * len(rows) + 1, dtype=torch.int64),
                     labels=torch.from_numpy(self.label[rows].copy()))

    def next_batch(self) -> Batch:
        if self.cursor + self.batch_size > len(self._order):
            self.epoch, self.cursor = self.epoch + 1, 0
            self._order = self._epoch_order()
        rows = self._order[self.cursor:self.cursor + self.batch_size]
        self.cursor += self.batch_size
        return self._batch(rows)

    def eval_batches(self) -> list[Batch]:
        return [self._batch(self.test_rows[i:i + self.batch_size])
                for i in range(0, len(self.test_rows), self.batch_size)]

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "cursor": self.cursor, "rows": len(self.label)}

    def load_state_dict(self, state: dict) -> None:
        """Continue from ``state``; a file with another number of good rows than the one saved (a checkpoint
        since the fifty-first session says) is refused: its split and shuffles would be other rows."""
        if "rows" in state and int(state["rows"]) != len(self.label):
            raise changed_since_checkpoint(self.path, f"it had {state['rows']} good rows, now {len(self.label)}")
        self.epoch, self.cursor = int(state["epoch"]), int(state["cursor"])
        self._order = self._epoch_order()
