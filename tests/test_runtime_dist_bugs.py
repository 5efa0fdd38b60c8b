"""Bad input and crashes of the sharded runtime found by an audit, each shown wrong before its fix:
malformed offsets (a segfault, unclear crashes, split sizes the ranks disagree on), shardings a rank
cannot build, a plan for another model, and a shard directory rewritten in place (2 gloo processes
where the exchange is involved)."""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path
from unittest import mock

import pytest
import torch

from distributed_util import run_on_ranks
from polyrec.kernels.jagged import JaggedBatch, JaggedBatchError
from polyrec.kernels.tbe import EmbeddingOptimizer
from polyrec.models import preset
from polyrec.planner.propose import make_plan
from polyrec.planner.types import model_spec_from_config, parse_fleet
from polyrec.runtime import parallel
from polyrec.runtime.input_dist import checked_offsets
from polyrec.runtime.distributed_embeddings import DistributedEmbeddings, default_shardings
from polyrec.runtime.plan_apply import load_plan
from polyrec.runtime.checkpoint import atomic_save
from polyrec.runtime.sharded_checkpoint import load_sharded
from polyrec.runtime.sharding import ShardedEmbedding
from polyrec.runtime.shards import TableSharding, make_shards
from test_sharding import DIMS, FEATURE_TO_TABLE, ROWS, double_factory, full_weights

# the tables' kernels run through the interpreter (make test sets it; setting it here, at collection, made the
# compile pass's later kernel imports interpreted ones)
pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET", "0") in ("", "0"),
                                reason="runs the sharded tables' Triton kernels on the CPU (TRITON_INTERPRET=1)")

SGD = EmbeddingOptimizer(kind="sgd", lr=0.1)
#: Offsets of 3 features x 2 samples over 6 ids, as rank 1 sends them; "ok" is what rank 0 sends.
OFFSETS = {"ok": [0, 1, 2, 3, 4, 5, 6],
           "decrease_across_features": [0, 1, 4, 3, 2, 5, 6],  # feature 1 spans -2 ids: was a segfault
           "decrease_in_a_bag": [0, 2, 1, 3, 4, 5, 6],  # row-wise: "repeats can not be negative"
           "past_nnz": [0, 1, 2, 3, 4, 5, 9],  # table-wise: read 3 ids past the values
           "not_from_zero": [1, 1, 2, 3, 4, 5, 6]}  # row-wise: "allocated size does not match"
#: The features of the malformed bags (a bag that decreases, or an offset out of place, is its feature's).
BAD_FEATURES = {"decrease_across_features": "[1]", "decrease_in_a_bag": "[0]", "past_nnz": "[2]",
                "not_from_zero": "[0]"}


def _three_tables(kind: str) -> list[TableSharding]:
    """Tables 0 and 2 whole on rank 0, table 1 of ``kind`` (over both ranks, or whole on rank 1)."""
    middle = TableSharding(kind="table", ranks=(1,)) if kind == "table" else TableSharding(kind=kind, ranks=(0, 1))
    return [TableSharding(kind="table", ranks=(0,)), middle, TableSharding(kind="table", ranks=(0,))]


def _flag_malformed_offsets(rank: int, world: int, kind: str) -> None:
    """Rank 1's malformed offsets, each case in turn: no crash, and the next check raises on both ranks,
    rank 1's naming its features, rank 0's naming rank 1; a good batch after it raises nothing."""
    emb = DistributedEmbeddings((10, 10, 10), 4, optimizer=SGD, shardings=_three_tables(kind), rank=rank,
                                world_size=world, device=torch.device("cpu"), seed=1)
    for case in [*BAD_FEATURES, "ok"]:
        offsets = torch.tensor(OFFSETS[case] if rank == 1 else OFFSETS["ok"])
        emb(torch.arange(6), offsets, 2).sum().backward()
        if case == "ok":
            emb.check_errors()
            continue
        with pytest.raises(JaggedBatchError) as raised:
            emb.check_errors()
        expected = (f"rank 1: the offsets of feature(s) {BAD_FEATURES[case]}" if rank == 1
                    else "flagged by the tables of rank(s) [1]")
        assert expected in str(raised.value), (case, rank, str(raised.value))


@pytest.mark.parametrize("kind", ["table", "row", "column"])
def test_malformed_offsets_are_flagged_on_every_rank_not_crashing_one(kind):
    run_on_ranks(_flag_malformed_offsets, 2, kind)


def _row_shards_on_one_rank() -> ShardedEmbedding:
    """One rank, table 0 in two row shards: the batch is routed and packed locally (no passthrough)."""
    shardings = [TableSharding(kind="row", ranks=(0, 0)), TableSharding(kind="table", ranks=(0,)),
                 TableSharding(kind="table", ranks=(0,))]
    return ShardedEmbedding(rows=ROWS, dims=DIMS, shardings=shardings, feature_to_table=FEATURE_TO_TABLE,
                            local_factory=double_factory(full_weights()), rank=0, world_size=1)


def test_malformed_offsets_on_one_rank_with_local_routing_are_flagged():
    module = _row_shards_on_one_rank()
    offsets = torch.tensor([0, 2, 1, 3, 4, 5, 6, 7, 8])  # 4 features x 2 samples; bag 1 decreases
    module(JaggedBatch(values=torch.arange(8), offsets=offsets, batch_size=2, num_features=4))
    with pytest.raises(JaggedBatchError, match=r"rank 0: the offsets of feature\(s\) \[0\]"):
        module.check_errors()
    module.check_errors()  # reported once


@pytest.mark.parametrize("world", [1, 2])
def test_offsets_of_another_length_are_named_before_any_exchange(world):
    """No process group: the error comes before the first collective (it was torch's "shape '[4, 2]'
    is invalid for input of size 7")."""
    shardings = [TableSharding(kind="row", ranks=(0, world - 1)), TableSharding(kind="table", ranks=(0,)),
                 TableSharding(kind="table", ranks=(world - 1,))]
    module = ShardedEmbedding(rows=ROWS, dims=DIMS, shardings=shardings, feature_to_table=FEATURE_TO_TABLE,
                              local_factory=double_factory(full_weights()), rank=0, world_size=world)
    batch = JaggedBatch(values=torch.arange(6), offsets=torch.arange(8), batch_size=2, num_features=4)
    with pytest.raises(JaggedBatchError, match="offsets must have F.B.1 = 4.2.1 = 9 entries, got 8"):
        module(batch)


def test_default_placement_keeps_a_table_with_fewer_rows_than_ranks_whole():
    """MLPerf capped to 4 rows on 8 ranks: the hot tables were split row-wise over all 8, leaving
    ranks 4-7 a row shard without rows, which they could not build."""
    config = preset("mlperf-dcnv2").with_capped_rows(4)
    shardings = default_shardings(config.table_rows, config.embedding_dim, 8, lookups=config.multi_hot)
    shards = make_shards(config.table_rows, [config.embedding_dim] * config.num_tables, shardings, 8)
    assert all(s.num_rows for s in shards)
    assert {s.rank for s in shards} == set(range(8))


@pytest.mark.parametrize("rows, world", [((9, 1000), 4), ((6, 1000), 4), ((10, 1000), 4), ((5, 7), 4)])
def test_default_placement_splits_a_hot_table_only_where_every_rank_gets_rows(rows, world):
    """A hot table of 9 rows on 4 ranks was split row-wise (3, 3, 3 and 0 rows), which the runtime's own
    buildability check then refused on every rank."""
    shardings = default_shardings(rows, 16, world, lookups=[100.0, 1.0])
    shards = make_shards(rows, [16] * len(rows), shardings, world)
    assert all(s.num_rows for s in shards)


@pytest.mark.parametrize("shardings, message", [
    ([TableSharding(kind="row", ranks=(0, 1)), TableSharding(kind="table", ranks=(0,))],
     r"table 0 \(1 rows\) split row-wise over more ranks than rows"),
    ([TableSharding(kind="table", ranks=(0,)), TableSharding(kind="table", ranks=(0,))],
     r"rank\(s\) \[1\] of 2 hold no shard")])
def test_a_sharding_some_rank_cannot_build_raises_on_every_rank(shardings, message):
    """Before, only the rank that could not build raised (TableSpec's "rows and dim must be > 0" for
    its row shard without rows); its peers went on into their first collective."""
    for rank in range(2):
        with pytest.raises(ValueError, match=message):
            DistributedEmbeddings((1, 5), 4, optimizer=SGD, shardings=shardings, rank=rank, world_size=2,
                                  device=torch.device("cpu"), seed=0)


def test_a_plan_for_a_model_of_other_dims_is_refused(tmp_path):
    """Same table rows, another embedding dim (a co-designed plan may change it): it was accepted."""
    config = preset("dcnv2-small")
    wider = config.replace(embedding_dim=2 * config.embedding_dim,
                           bottom_mlp=(*config.bottom_mlp[:-1], 2 * config.embedding_dim))
    path = tmp_path / "plan.json"
    path.write_text(make_plan(model_spec_from_config(wider), parse_fleet("H200x2")).to_json())
    with pytest.raises(ValueError, match=r"embedding dim: the plan's 32, the run's 16; bottom_mlp"):
        load_plan(path, config, world_size=2)
    deeper = config.replace(dcn_layers=config.dcn_layers + 1)
    path.write_text(make_plan(model_spec_from_config(deeper), parse_fleet("H200x2")).to_json())
    with pytest.raises(ValueError, match=r"dcn_layers: the plan's 3, the run's 2"):
        load_plan(path, config, world_size=2)


def _save_twice_at_one_step(rank: int, world: int, directory: str) -> None:
    """A save at the step of the checkpoint being pointed to (a run resumed under another sharding and
    stopped before its first step) goes to a new directory: the pointed one keeps its files until the
    new pointer is in place, so a crash between the ranks' files cannot leave it half rewritten."""
    def embeddings(first_rank: int) -> DistributedEmbeddings:
        shardings = [TableSharding(kind="table", ranks=(first_rank,)),
                     TableSharding(kind="table", ranks=(1 - first_rank,))]
        return DistributedEmbeddings((20, 30), 4, optimizer=SGD, shardings=shardings, rank=rank, world_size=world,
                                     device=torch.device("cpu"), seed=1)

    before = embeddings(0)
    first = parallel.save_shards(Path(directory), before, 5)
    pointed = Path(directory) / first["sharded"]
    files = {p.name: p.read_bytes() for p in pointed.iterdir()}
    second = parallel.save_shards(Path(directory), embeddings(1), 5)
    assert second != first
    assert {p.name: p.read_bytes() for p in pointed.iterdir()} == files
    again = embeddings(0)
    load_sharded(pointed, again.sharded.local_shards, again.local)
    for got, want in zip(again.local.table_weights(), before.local.table_weights()):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_a_second_save_at_one_step_does_not_rewrite_the_pointed_shards(tmp_path):
    run_on_ranks(_save_twice_at_one_step, 2, str(tmp_path))


def test_shard_files_get_the_main_checkpoints_mode_and_a_failed_write_leaves_nothing(tmp_path):
    """They were 0o600 (a temp file's mode) where checkpoint.pt is 0o666 less the umask, and a failed
    write left its temp file behind."""
    mask = os.umask(0o022)
    try:
        atomic_save({"x": 1}, tmp_path / "emb-rank0.pt")
    finally:
        os.umask(mask)
    assert stat.S_IMODE((tmp_path / "emb-rank0.pt").stat().st_mode) == 0o644
    with mock.patch("torch.save", side_effect=OSError(28, "No space left on device")), pytest.raises(OSError):
        atomic_save({"x": 1}, tmp_path / "emb-rank1.pt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["emb-rank0.pt"]


def _start_with(rank: int, world: int, changes: dict, message: str) -> None:
    """Each rank builds a Trainer; rank 1 with ``changes``: both must refuse before any step."""
    from polyrec.runtime.config import TrainConfig
    from polyrec.runtime.trainer import Trainer
    cfg = TrainConfig(preset="dcnv2-small", data="synthetic", steps=2, batch_size=8, device="cpu",
                      embedding_backend="polyrec", cuda_graphs=False)
    if rank == 1:
        cfg = dataclasses.replace(cfg, **changes)
    with pytest.raises(ValueError, match=message):
        Trainer(cfg)


@pytest.mark.parametrize("changes, message", [
    ({"batch_size": 16}, r"batch_size differs between ranks \(rank 0: 8, rank 1: 16\)"),
    ({"steps": 3}, r"steps differs between ranks \(rank 0: 2, rank 1: 3\)"),
    ({"data": "criteo:/nowhere.tsv"}, r"data_kind differs between ranks \(rank 0: 'synthetic', rank 1: 'criteo'\)")])
def test_ranks_started_with_different_options_refuse_on_every_rank(changes, message):
    """Before, a batch size that differed between ranks aborted gloo mid-step (and NCCL would not
    have noticed); a different step count left one rank waiting in a collective at the end."""
    run_on_ranks(_start_with, 2, changes, message)


def test_host_local_fields_may_differ_between_ranks():
    from polyrec.runtime.config import TrainConfig
    one = TrainConfig(data="criteo:/mnt/a/day_0.tsv", cpu_threads=2, metrics_path=Path("a.jsonl"))
    other = TrainConfig(data="criteo:/data/day_0.tsv", cpu_threads=4, metrics_path=Path("b.jsonl"))
    assert one.rank_shared() == other.rank_shared()


def test_checked_offsets_keep_a_valid_batch_and_make_any_other_well_formed():
    """Valid offsets come back as they are and flag nothing; random ones come back non-decreasing, from
    0 to nnz, and flag exactly the features of the bags that decrease or hold an offset out of place."""
    gen = torch.Generator().manual_seed(5)
    for trial in range(60):
        features, b = int(torch.randint(1, 5, (1,), generator=gen)), int(torch.randint(1, 6, (1,), generator=gen))
        lengths = torch.randint(0, 4, (features * b,), generator=gen)
        nnz = int(lengths.sum())
        batch = JaggedBatch.from_lengths(values=torch.arange(nnz), lengths=lengths, batch_size=b,
                                         num_features=features)
        bad = torch.zeros(features, dtype=torch.bool)
        assert torch.equal(checked_offsets(batch, bad), batch.offsets.long()) and not bad.any()
        given = batch.offsets.long().clone()
        if trial % 2:  # one offset out of place
            given[int(torch.randint(0, given.numel(), (1,), generator=gen))] += int(torch.randint(-3, 4, (1,), generator=gen))
        else:  # any offsets at all
            given = torch.randint(-2, nnz + 3, given.shape, generator=gen)
        out = checked_offsets(JaggedBatch(values=batch.values, offsets=given, batch_size=b, num_features=features), bad)
        assert out[0] == 0 and out[-1] == nnz and bool((out[1:] >= out[:-1]).all()), (given, out)
        outside = (given < 0) | (given > nnz)
        outside[0] |= given[0] != 0
        outside[-1] |= given[-1] != nnz
        wrong_bag = (given[1:] < given[:-1]) | outside[1:] | outside[:-1]
        assert torch.equal(bad, wrong_bag.view(features, b).any(1)), (given, bad)
        bad.zero_()


@pytest.mark.parametrize("damage, message", [
    (lambda d: (d / "emb-rank0.pt").write_bytes((d / "emb-rank0.pt").read_bytes()[:1000]),
     r"emb-rank0.pt is damaged or not a polyrec shard file \("),
    (lambda d: (d / "emb-rank0.pt").write_bytes(b""), r"emb-rank0.pt is damaged or not a polyrec shard file \("),
    (lambda d: atomic_save({"x": 1}, d / "emb-rank0.pt"), r"emb-rank0.pt is damaged .*\(it lacks shards, pieces"),
    (lambda d: (d / "manifest.json").write_text('{"version": 1, "world_'),
     r"manifest.json is damaged or not a polyrec shard manifest \("),
    (lambda d: (d / "manifest.json").write_text("[1]"), r"manifest.json is damaged .*\(it holds a list\)")])
def test_a_damaged_shard_file_or_manifest_is_named(tmp_path, damage, message):
    """A truncated rank file raised torch's unpickling RuntimeError (a traceback on every rank) and a
    truncated manifest a bare JSON error without its path; checkpoint.pt was already named as damaged."""
    from polyrec.kernels.tbe import TableBatchedEmbedding, TableSpec
    from polyrec.runtime.sharded_checkpoint import full_tables, save_sharded

    tbe = TableBatchedEmbedding([TableSpec(name="t0", rows=50, dim=8), TableSpec(name="t1", rows=30, dim=8)],
                                optimizer=SGD)
    save_sharded(tmp_path, full_tables(tbe), tbe, rank=0, world_size=1, step=1)
    damage(tmp_path)
    with pytest.raises(ValueError, match=message):
        load_sharded(tmp_path, full_tables(tbe), tbe)
