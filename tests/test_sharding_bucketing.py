"""The vectorised input distribution (polyrec.runtime.input_dist) in one process, for 2 to 4 ranks.

Each rank's send buffers are checked against a per-piece Python slicing (the plain reading of the
routing rules), and a simulated all-to-all (chunks handed over by slicing) followed by ``regroup``
must give each owner exactly the batch it would cut from the global batch itself. Batches have
duplicates, empty bags, a feature whose bags are all empty, ids on every row-range boundary, an odd
local batch, and per-sample weights.
"""

from __future__ import annotations

import pytest
import torch

from torch.utils._python_dispatch import TorchDispatchMode

from polyrec.kernels.jagged import JaggedBatch
from polyrec.runtime.input_dist import InputRouter, regroup
from polyrec.runtime.shards import ShardFeature, TableSharding, make_shards, shard_features

ROWS = (50, 37, 64, 2, 9)
DIMS = (12, 6, 12, 6, 6)
FEATURE_TO_TABLE = (0, 1, 2, 3, 4, 0)  # feature 5 shares table 0
EMPTY_FEATURE = 1  # every bag of this feature is empty

# world -> one sharding per table: row-wise with permuted ranks, more row shards than rows (empty
# ranges), column-wise, table-wise, and ranks holding two shards of one table.
PLANS = {
    2: [TableSharding(kind="row", ranks=(1, 0)), TableSharding(kind="table", ranks=(1,)),
        TableSharding(kind="column", ranks=(0, 1)), TableSharding(kind="row", ranks=(0, 1)),
        TableSharding(kind="table", ranks=(0,))],
    3: [TableSharding(kind="row", ranks=(2, 0, 1)), TableSharding(kind="column", ranks=(1, 2, 0)),
        TableSharding(kind="table", ranks=(0,)), TableSharding(kind="row", ranks=(0, 1, 2)),
        TableSharding(kind="row", ranks=(1, 2))],
    4: [TableSharding(kind="column", ranks=(3, 1)), TableSharding(kind="row", ranks=(0, 1, 2, 3)),
        TableSharding(kind="row", ranks=(1, 1, 3)), TableSharding(kind="table", ranks=(2,)),
        TableSharding(kind="column", ranks=(0, 0, 2))],
}


def _pieces(world: int) -> list[list[ShardFeature]]:
    shards = make_shards(ROWS, DIMS, PLANS[world], world)
    pieces = shard_features(shards, FEATURE_TO_TABLE, [DIMS[t] for t in range(len(ROWS))])
    return pieces + [[] for _ in range(world - len(pieces))]


def _global_lists(world: int, b: int, seed: int, plans: list[TableSharding] | None = None) -> list[list[list[int]]]:
    """[feature][global sample] -> ids: duplicates, empty bags, one all-empty feature, and every
    row-range boundary (first and last row of each row shard of ``plans``, default PLANS[world]) somewhere."""
    gen = torch.Generator().manual_seed(seed)
    bags = []
    for f, t in enumerate(FEATURE_TO_TABLE):
        lengths = torch.randint(0, 5, (world * b,), generator=gen)
        lengths[0] = 0
        if f == EMPTY_FEATURE:
            lengths.zero_()
        ids = [torch.randint(0, ROWS[t], (int(n),), generator=gen).tolist() for n in lengths]
        bags.append(ids)
    for f, t in enumerate(FEATURE_TO_TABLE):
        if f == EMPTY_FEATURE:
            continue
        edges = sorted({x for s in make_shards(ROWS, DIMS, plans or PLANS[world], world) if s.table == t
                        for x in (s.rows[0], s.rows[1] - 1) if 0 <= x < ROWS[t]})
        bags[f][1] = bags[f][1] + edges + edges[:1]  # boundaries, and a duplicate
    return bags


def _batch(bags: list[list[list[int]]], samples: range, weighted: bool) -> JaggedBatch:
    lengths = torch.tensor([len(bags[f][s]) for f in range(len(bags)) for s in samples], dtype=torch.int64)
    values = torch.tensor([v for f in range(len(bags)) for s in samples for v in bags[f][s]], dtype=torch.int64)
    weights = (values.to(torch.float64) * 0.5 + 0.25) if weighted else None  # a weight tied to its id
    return JaggedBatch.from_lengths(values=values, lengths=lengths, batch_size=len(samples),
                                    num_features=len(bags), weights=weights)


def _served(piece: ShardFeature, ids: list[int]) -> list[int]:
    """The ids of one bag that a piece serves, as its shard reads them."""
    if piece.shard.kind != "row":
        return ids
    lo, hi = piece.shard.rows
    return [v - lo for v in ids if lo <= v < hi]


def _expected_sends(pieces, bags, samples: range) -> tuple[list[int], list[list[int]]]:
    """Per destination: bag lengths (piece-major) and ids, in send order."""
    lengths, values = [], []
    for ranked in pieces:
        values.append([])
        for p in ranked:
            for s in samples:
                served = _served(p, bags[p.feature][s])
                lengths.append(len(served))
                values[-1] += served
    return lengths, values


def _send(router: InputRouter, batch: JaggedBatch) -> tuple[torch.Tensor, list[int], torch.Tensor, torch.Tensor | None]:
    counted = router.count(batch)
    counts = counted.send_counts.tolist()
    values, weights = router.pack(batch, counted, sum(counts))
    return counted.send_lengths.reshape(-1), counts, values, weights


@pytest.mark.parametrize("world", [2, 3, 4])
@pytest.mark.parametrize("b", [1, 3])
def test_send_buffers_match_per_piece_slicing(world, b):
    pieces = _pieces(world)
    router = InputRouter(pieces, len(FEATURE_TO_TABLE), torch.device("cpu"))
    bags = _global_lists(world, b, seed=10 * world + b)
    for rank in range(world):
        samples = range(rank * b, (rank + 1) * b)
        lengths, counts, values, weights = _send(router, _batch(bags, samples, weighted=True))
        want_lengths, want_values = _expected_sends(pieces, bags, samples)
        assert lengths.tolist() == want_lengths
        assert counts == [len(v) for v in want_values]
        assert values.tolist() == [v for per_dest in want_values for v in per_dest]
        rows = [v + lo for v, lo in zip(values.tolist(), _row_lo_per_value(pieces, bags, samples))]
        assert weights.tolist() == [r * 0.5 + 0.25 for r in rows]  # each weight travels with its id


def _row_lo_per_value(pieces, bags, samples: range) -> list[int]:
    """The rebasing offset of every sent id, in send order."""
    out = []
    for ranked in pieces:
        for p in ranked:
            for s in samples:
                out += [p.shard.rows[0] if p.shard.kind == "row" else 0] * len(_served(p, bags[p.feature][s]))
    return out


@pytest.mark.parametrize("world", [2, 3, 4])
def test_simulated_all_to_all_gives_each_owner_its_batch(world):
    b = 3
    pieces = _pieces(world)
    router = InputRouter(pieces, len(FEATURE_TO_TABLE), torch.device("cpu"))
    bags = _global_lists(world, b, seed=world)
    sent = [_send(router, _batch(bags, range(r * b, (r + 1) * b), weighted=True)) for r in range(world)]
    for dest in range(world):
        mine = len(pieces[dest])
        start = sum(len(pieces[d]) for d in range(dest)) * b
        lengths = torch.cat([s[0][start:start + mine * b] for s in sent])
        first = [sum(s[1][:dest]) for s in sent]
        values = torch.cat([s[2][f:f + s[1][dest]] for s, f in zip(sent, first)])
        weights = torch.cat([s[3][f:f + s[1][dest]] for s, f in zip(sent, first)])
        got = regroup(lengths, values, weights, world=world, features=mine, batch=b)
        want_lengths = [len(_served(p, bags[p.feature][s])) for p in pieces[dest] for s in range(world * b)]
        want_values = [v for p in pieces[dest] for s in range(world * b) for v in _served(p, bags[p.feature][s])]
        assert got.batch_size == world * b and got.num_features == mine
        assert got.lengths().tolist() == want_lengths
        assert got.values.tolist() == want_values
        assert got.weights.numel() == len(want_values)


def test_unweighted_and_int32_ids_and_empty_batch():
    world, b = 3, 2
    pieces = _pieces(world)
    router = InputRouter(pieces, len(FEATURE_TO_TABLE), torch.device("cpu"))
    bags = _global_lists(world, b, seed=5)
    batch = _batch(bags, range(b), weighted=False)
    narrow = JaggedBatch(values=batch.values.to(torch.int32), offsets=batch.offsets.to(torch.int32),
                         batch_size=b, num_features=batch.num_features)
    lengths, counts, values, weights = _send(router, narrow)
    want_lengths, want_values = _expected_sends(pieces, bags, range(b))
    assert weights is None and values.dtype == torch.int32
    assert lengths.tolist() == want_lengths and values.tolist() == [v for d in want_values for v in d]
    empty = JaggedBatch(values=torch.zeros(0, dtype=torch.int64), offsets=torch.zeros(1, dtype=torch.int64),
                        batch_size=0, num_features=len(FEATURE_TO_TABLE))
    lengths, counts, values, _ = _send(router, empty)
    assert lengths.numel() == 0 and counts == [0] * world and values.numel() == 0


def test_out_of_range_ids_reach_a_shard_that_flags_them():
    """A row-wise table's id below 0 or past its rows goes to the first or last row shard, rebased
    outside that shard's rows, so its lookup flags it (as a table-wise shard would)."""
    world = 2
    pieces = _pieces(world)
    router = InputRouter(pieces, len(FEATURE_TO_TABLE), torch.device("cpu"))
    bags = [[[] for _ in range(1)] for _ in FEATURE_TO_TABLE]
    bags[0][0] = [-3, ROWS[0] + 7, 2**40]  # table 0 is row-wise over ranks (1, 0): rows [0, 25) on 1, [25, 50) on 0
    bags[4][0] = [2**33 + 1]  # table 4, table-wise: past int32, it must not wrap into the table
    _, counts, values, _ = _send(router, _batch(bags, range(1), weighted=False))
    assert counts == [3, 1] and values.dtype == torch.int32  # ids cross as int32, clamped
    # rank 0's shard gets the late ids (the int64 one clamped to 2^31 - 1, still past its 25 rows),
    # table 4's clamped id; rank 1's shard the negative one, clamped to -1
    assert values.tolist() == [ROWS[0] + 7 - 25, 2**31 - 1, 2**31 - 1, -1]


def test_features_of_one_table_need_one_kind():
    pieces = _pieces(2)
    mixed = [list(pieces[0]), list(pieces[1])]
    row_piece = next(p for p in mixed[0] if p.shard.kind == "row")
    table_piece = next(p for p in mixed[1] if p.shard.kind == "table")
    mixed[0].append(ShardFeature(feature=row_piece.feature, shard=table_piece.shard, out_cols=row_piece.out_cols))
    with pytest.raises(ValueError, match=f"feature {row_piece.feature}: needs shards of exactly one"):
        InputRouter(mixed, len(FEATURE_TO_TABLE), torch.device("cpu"))


class _Record(TorchDispatchMode):
    """Records the aten ops run under it."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        sized = "output_size" in (kwargs or {})  # repeat_interleave without it syncs for its size
        self.ops.append(f"{func}{'(sized)' if sized else ''}")
        return func(*args, **(kwargs or {}))


def _ops_of_one_step(features: int, kinds: tuple[str, ...], world: int = 2) -> list[str]:
    """The aten ops of count + pack + regroup for ``features`` features, round-robin over ``kinds``."""
    plans = [TableSharding(kind=k, ranks=(t % world,) if k == "table" else tuple(range(world)))
             for t, k in zip(range(features), kinds * features)]
    shards = make_shards([40] * features, [4] * features, plans, world)
    pieces = shard_features(shards, list(range(features)), [4] * features)
    router = InputRouter(pieces, features, torch.device("cpu"))
    gen = torch.Generator().manual_seed(features)
    lengths = torch.randint(0, 4, (features * 3,), generator=gen)
    batch = JaggedBatch.from_lengths(values=torch.randint(0, 40, (int(lengths.sum()),), generator=gen),
                                     lengths=lengths, batch_size=3, num_features=features)
    with _Record() as record:
        counted = router.count(batch)
    counts = counted.send_counts.tolist()
    with record:
        values, _ = router.pack(batch, counted, sum(counts))
        mine = len(pieces[0])  # rank 0 receiving rank 0's part from every rank
        regroup(counted.send_lengths[:mine].reshape(-1).repeat(world), values[:counts[0]].repeat(world), None,
                world=world, features=mine, batch=3)
    return record.ops


SYNCING_OPS = ("nonzero", "_local_scalar_dense", "masked_select", "bincount", "unique", "item")


@pytest.mark.parametrize("kinds", [("table",), ("row", "column", "table")])
def test_step_has_no_host_sync_and_a_fixed_number_of_ops(kinds):
    """On a GPU these would wait for the device: none may appear; and the op count must not grow
    with the number of features."""
    few, many = _ops_of_one_step(3, kinds), _ops_of_one_step(24, kinds)
    assert not [op for op in many if any(s in op for s in SYNCING_OPS)]
    assert all(op.endswith("(sized)") for op in many if "repeat_interleave" in op)
    assert len(few) == len(many), (len(few), len(many))


def _one_rank_pieces(plans: list[TableSharding]) -> list[ShardFeature]:
    return shard_features(make_shards(ROWS, DIMS, plans, 1), FEATURE_TO_TABLE, DIMS)[0]


def test_one_rank_passes_whole_tables_through_untouched():
    plans = [TableSharding(kind=k, ranks=(0,)) for k in ("row", "column", "table", "row", "column")]
    router = InputRouter([_one_rank_pieces(plans)], len(FEATURE_TO_TABLE), torch.device("cpu"))
    batch = _batch(_global_lists(1, 3, seed=8, plans=plans), range(3), weighted=True)
    with _Record() as record:
        got = router.local_batch(batch)
    assert router.passthrough and got is batch and record.ops == []


@pytest.mark.parametrize("split_columns", [False, True])
def test_one_rank_routes_split_tables_locally(split_columns):
    """Several shards of a table on the one rank: the batch each piece reads, with no host sync
    unless a column-wise table is split (its copies' count is read once, as documented)."""
    plans = [TableSharding(kind="row", ranks=(0, 0)), TableSharding(kind="table", ranks=(0,)),
             TableSharding(kind="column", ranks=(0, 0) if split_columns else (0,)),
             TableSharding(kind="row", ranks=(0, 0, 0)), TableSharding(kind="row", ranks=(0,))]
    pieces, b = _one_rank_pieces(plans), 3
    router = InputRouter([pieces], len(FEATURE_TO_TABLE), torch.device("cpu"))
    bags = _global_lists(1, b, seed=9, plans=plans)
    batch = _batch(bags, range(b), weighted=True)
    with _Record() as record:
        got = router.local_batch(batch)
    syncs = [op for op in record.ops if any(s in op for s in SYNCING_OPS)]
    assert len(syncs) == (1 if split_columns else 0), syncs
    assert not router.passthrough and got.batch_size == b and got.num_features == len(pieces)
    assert got.lengths().tolist() == [len(_served(p, bags[p.feature][s])) for p in pieces for s in range(b)]
    want = [v for p in pieces for s in range(b) for v in _served(p, bags[p.feature][s])]
    assert got.values.tolist() == want
    rows = [v + (p.shard.rows[0] if p.shard.kind == "row" else 0)
            for p in pieces for s in range(b) for v in _served(p, bags[p.feature][s])]
    assert got.weights.tolist() == [r * 0.5 + 0.25 for r in rows]
