"""The merge levels with one tile per program (merge_chunks 1) and with 8 tiles taken in turn
(merge_chunks 8, the walk of 691c40d): the backward + update against a float64 reference and against
each other, through the interpreter. Update tiles of 2 positions, so the hot table's runs cross many
update programs and the 64-slot merge programs; empty bags, an odd batch, mixed dims, a mean-pooled
table; fp32 and bf16 output gradients; row-wise Adagrad and SGD. Every buffer ``torch.empty`` hands out
is poisoned (NaN, or row id 1 for integers), so a slot read before it is written shows."""

from __future__ import annotations

import dataclasses
import functools
from unittest import mock

import pytest
import torch

from polyrec.kernels import tbe_fused_backward, tbe_select
from polyrec.kernels.jagged import JaggedBatch
from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec
from polyrec.kernels.tbe_reference import init_states, ref_step
from polyrec.perfmodel.tbe import LEVEL_TILE, merge_levels

TABLES = [TableSpec(name="hot", rows=2, dim=8), TableSpec(name="wide", rows=60, dim=16),
          TableSpec(name="odd", rows=7, dim=4, pooling="mean")]
FEATURES = [0, 1, 2, 0]  # the hot table read by two features
MAX_LEN = [9, 3, 3, 9]  # longest bag of each feature
B = 21  # samples per batch (odd)
#: Sorted positions under one first-level program of the 8-tile merge: 2 slots per update program.
MERGE_SPAN = LEVEL_TILE * 8 // 2 * 2
#: Update config under test, merge_chunks set per case: 2 sorted positions per update program.
UPDATE = tbe_select.UpdateConfig(tile=2, num_warps=1, variant="lane", chunks=1)
GRAD_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
#: (output gradient, optimizer): training's bf16 gradient with MLPerf's row-wise Adagrad, and the
#: benchmark's fp32 gradient with SGD (the merge's pieces are fp32 either way; both optimizers with
#: both gradients at once would double the interpreter time).
CASES = [("bf16", "rowwise_adagrad"), ("fp32", "sgd")]


def _batch(gen: torch.Generator) -> JaggedBatch:
    """Bags of 0 to MAX_LEN ids (every 5th empty); the hot table's row 1 gets ~9 in 10 of its ids (a
    run of ~130 positions after a short one)."""
    lengths = torch.cat([torch.randint(0, n + 1, (B,), generator=gen) for n in MAX_LEN])
    lengths[::5] = 0
    values = [torch.randint(0, TABLES[t].rows, (int(lengths[f * B:(f + 1) * B].sum()),), generator=gen)
              for f, t in enumerate(FEATURES)]
    for f, t in enumerate(FEATURES):
        if t == 0:
            values[f] = (torch.rand(values[f].shape, generator=gen) < 0.9).to(torch.int64)
    values = torch.cat(values)
    return JaggedBatch.from_lengths(values=values, lengths=lengths, batch_size=B, num_features=len(FEATURES))


def _run_through_a_merge_program(batch: JaggedBatch) -> bool:
    """Whether a run of equal rows begins before and ends after some MERGE_SPAN-aligned window of sorted
    positions (its pieces pass through a whole first-level program of the 8-tile merge)."""
    bases = torch.tensor([0, *torch.tensor([t.rows for t in TABLES]).cumsum(0).tolist()])
    table = torch.tensor(FEATURES).repeat_interleave(torch.diff(batch.offsets[::B]))
    keys = (batch.values + bases[table]).sort().values
    _, counts = torch.unique_consecutive(keys, return_counts=True)
    ends = counts.cumsum(0)
    starts = ends - counts
    return bool(((starts // MERGE_SPAN + 1) * MERGE_SPAN + MERGE_SPAN <= ends).any())


def _poisoned_empty(real=torch.empty):
    """``torch.empty`` that fills what it returns: NaN for floats, 1 (a valid row id) for integers."""
    def empty(*args, **kwargs):
        out = real(*args, **kwargs)
        with torch.no_grad():
            out.fill_(float("nan") if out.is_floating_point() else 1)
        return out
    return empty


class _CountLaunches:
    """Wraps a Triton kernel and counts its launches (``kernel[grid](...)``)."""

    def __init__(self, kernel):
        self.kernel, self.launches = kernel, 0

    def __getitem__(self, grid):
        self.launches += 1
        return self.kernel[grid]


@functools.cache
def _train(merge_chunks: int, grad: str, kind: str) -> dict:
    """One step of the module and of the float64 reference on the same fresh random batch."""
    gen = torch.Generator().manual_seed(11)
    opt = EmbeddingOptimizer(kind=kind, lr=0.05, initial_accumulator_value=0.1 if kind != "sgd" else 0.0)
    counter = _CountLaunches(tbe_fused_backward.merge_level_kernel)
    with (mock.patch.object(torch, "empty", _poisoned_empty()),
          mock.patch.object(tbe_fused_backward, "merge_level_kernel", counter)):
        module = TableBatchedEmbedding(TABLES, optimizer=opt, feature_to_table=FEATURES, seed=5,
                                       output_dtype=GRAD_DTYPES[grad],
                                       update_config=dataclasses.replace(UPDATE, merge_chunks=merge_chunks))
        start = [w.double().clone() for w in module.table_weights()]
        batch = _batch(gen)
        assert _run_through_a_merge_program(batch)
        out = module(batch)
        g = torch.randn(out.shape, generator=gen).to(out.dtype)  # [B, 36]
        out.backward(g)
    weights, states = ref_step(start, init_states(opt, TABLES), batch, g.double(), opt, 1, TABLES, FEATURES)
    return {"weights": [w.clone() for w in module.table_weights()], "state": [s.clone() for s in module.table_state()],
            "ref_weights": weights, "ref_state": [s[0] for s in states if s], "launches": counter.launches,
            "levels": merge_levels(len(module.key_plan(batch.nnz).blocks) * -(-batch.nnz // UPDATE.span),
                                   LEVEL_TILE * merge_chunks)}


@pytest.mark.parametrize("grad,kind", CASES)
@pytest.mark.parametrize("merge_chunks", [1, 8])
def test_merge_matches_float64_reference(merge_chunks, grad, kind):
    run = _train(merge_chunks, grad, kind)
    for got, want in zip(run["weights"], run["ref_weights"]):
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)
    for got, want in zip(run["state"], run["ref_state"]):
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)
    # the levels the model prices are the levels launched: over the slots of every update launch
    assert run["launches"] == run["levels"] >= 2


@pytest.mark.parametrize("grad,kind", CASES)
def test_chunked_merge_equals_one_tile_merge(grad, kind):
    """Same batches, same start: only the merge's summation order differs. The runs are reused from
    the reference test (cached)."""
    one, eight = _train(1, grad, kind), _train(8, grad, kind)
    for a, b in zip(one["weights"] + one["state"], eight["weights"] + eight["state"]):
        torch.testing.assert_close(b, a, rtol=2e-6, atol=1e-7)
    assert eight["launches"] < one["launches"]


def test_selector_carries_merge_chunks_and_model_prices_its_levels():
    """The selector takes the merge chunks the model prices lower (on the MLPerf step with fp16 rows of
    mixed dims; 1 on a small one), among those the compile jobs cover; the model prices the levels of
    the chunks it is given: 11 -> 5 on the MLPerf step with one-tile lane programs (14.02M ids, tile 8),
    as counted in 691c40d; with one tile per program it prices 0.962 ms on the H200 with the datasheet
    ceilings (0.997 while each level was priced at the calibrated launch latency, 1.838 before
    MERGE_CROSSING_TRIPS was refitted to the faster merge)."""
    from polyrec.hardware.calibrate import ceilings
    from polyrec.hardware.catalog import get_device
    from polyrec.perfmodel.tbe import UpdateShape, merge_seconds, update_seconds

    spec = get_device("H200")
    mlperf = dict(nnz=14_024_704, block_d=128, row_bytes=256, state_tiles=0, grad_bytes=2, rounding="fp16")
    cfg = tbe_select.select_update(spec, **mlperf)
    priced = {m: update_seconds(UpdateShape(variant="lane", tile=cfg.tile, num_warps=cfg.num_warps, chunks=cfg.chunks,
                                            merge_chunks=m, rounding="fp16", grad_bytes=2, elems_per_thread=32),
                                spec, ceilings(spec), nnz=mlperf["nnz"], unique=mlperf["nnz"] * tbe_select.UNIQUE_FRACTION,
                                row_bytes=256, grad_row_bytes=256, state_bytes_per_row=4)
              for m in tbe_select.MERGE_CHUNK_CHOICES}
    assert cfg.merge_chunks == min(priced, key=priced.get) and set(tbe_select.MERGE_CHUNK_CHOICES) == {1, 8}
    assert priced[1] != priced[8]
    small = tbe_select.select_update(spec, nnz=4096 * 58, block_d=16, row_bytes=64, state_tiles=0, grad_bytes=2)
    assert small.merge_chunks == 1
    tiles = -(-14_024_704 // 8)
    assert (merge_levels(tiles, LEVEL_TILE), merge_levels(tiles, LEVEL_TILE * 8)) == (11, 5)
    ceil, kw = ceilings(spec), dict(nnz=14_024_704, unique=10.21e6, grad_row_bytes=512)
    merge = {m: merge_seconds(tile=8, spec=spec, ceil=ceil, chunks=m, **kw) for m in (1, 8)}
    assert merge[1] == pytest.approx(0.9623017597853536e-3, rel=1e-9) and merge[8] != merge[1]
    upd = {m: update_seconds(UpdateShape(variant="lane", tile=8, num_warps=1, elems_per_thread=32, merge_chunks=m),
                             spec, ceil, row_bytes=512, state_bytes_per_row=4, **kw) for m in (1, 8)}
    assert upd[1] - upd[8] == pytest.approx(merge[1] - merge[8], rel=1e-9)
    with pytest.raises(ValueError, match="merge_chunks"):
        tbe_select.UpdateConfig(tile=8, num_warps=1, merge_chunks=0)


@pytest.mark.compile
@pytest.mark.parametrize("device", ["H200", "MI300X", "MI350X"])
def test_compile_jobs_cover_every_merge_chunk_choice(device):
    from polyrec.hardware.catalog import get_device
    from polyrec.kernels.tbe_compile import compile_jobs

    labels = [job.label for job in compile_jobs(get_device(device)) if job.label.startswith("tbe merge-level")]
    for m in tbe_select.MERGE_CHUNK_CHOICES:
        assert any(f" chunks{m} " in label for label in labels), (m, labels)


def test_selector_weighs_each_merge_levels_host_issue_where_the_step_is_host_bound():
    """On a host-bound step the merge takes at least its levels' host issue (``MERGE_LEVEL_HOST_S`` each) in
    the selection; otherwise, and in the device estimate, device time alone: on the MLPerf step as the
    trainer runs it (14.02M ids, one dim 128, bf16 output gradient, 8-tile lane programs) device time
    prices one tile per merge program lower (9 levels), the issue 8 tiles (4 levels); the floor moves
    the update's price by the merge's alone."""
    from polyrec.hardware.calibrate import ceilings
    from polyrec.hardware.catalog import get_device
    from polyrec.perfmodel.tbe import (MERGE_LEVEL_HOST_S, UpdateShape, merge_seconds, update_merge_levels,
                                       update_seconds)

    spec = get_device("H200")
    ceil, nnz = ceilings(spec), 14_024_704
    picks = {bound: tbe_select.select_update(spec, nnz=nnz, block_d=128, row_bytes=512, state_tiles=0, grad_bytes=2,
                                             one_dim=True, host_bound=bound) for bound in (False, True)}
    assert {(c.variant, c.span) for c in picks.values()} == {("lane", 64)}
    assert (picks[False].merge_chunks, picks[True].merge_chunks) == (1, 8)
    assert (update_merge_levels(nnz, 64, 1), update_merge_levels(nnz, 64, 8)) == (9, 4)
    kw = dict(nnz=nnz, unique=10.21e6, tile=64, grad_row_bytes=256, spec=spec, ceil=ceil)
    device = {m: merge_seconds(chunks=m, **kw) for m in (1, 8)}
    issued = {m: merge_seconds(chunks=m, issue_s=MERGE_LEVEL_HOST_S, **kw) for m in (1, 8)}
    assert device[1] < device[8] and issued[8] < issued[1]
    assert issued[1] == pytest.approx(9 * MERGE_LEVEL_HOST_S) and issued[8] == device[8]
    assert merge_seconds(chunks=8, issue_s=1.0, **kw) == pytest.approx(4.0)
    shape = UpdateShape(variant="lane", tile=8, num_warps=1, elems_per_thread=32, chunks=8, merge_chunks=1,
                        grad_bytes=2, one_dim=True)
    upd = {s: update_seconds(shape, spec, ceil, nnz=nnz, unique=10.21e6, row_bytes=512, grad_row_bytes=256,
                             state_bytes_per_row=4, level_issue_s=s) for s in (0.0, MERGE_LEVEL_HOST_S)}
    assert upd[MERGE_LEVEL_HOST_S] - upd[0.0] == pytest.approx(issued[1] - device[1], rel=1e-9)


def test_host_bound_selection_charges_the_lane_updates_permute_launch():
    """On a host-bound step the lane update's permute pass adds its host issue (``LANE_PERMUTE_HOST_S``) to the
    lane's price and nothing to the scan's; on a small update (4096 ids, one dim 32, H100) that is what moves the
    host-bound pick from lane to scan, as four small updates measured on one H100
    (benchmarks/results/small_update_rounds_2026-12-07/) stepped faster under the scan."""
    from polyrec.hardware.catalog import get_device
    from polyrec.perfmodel.tbe import LANE_PERMUTE_HOST_S, MERGE_LEVEL_HOST_S

    calls = []

    def priced(**kw):
        calls.append(kw)
        return 1e-5

    lane = tbe_select.UpdateConfig(variant="lane", tile=8, num_warps=1, chunks=8, merge_chunks=8)
    scan = dataclasses.replace(lane, variant="scan", chunks=1, num_warps=4)
    assert tbe_select._host_bound_seconds(lane, priced) == pytest.approx(1e-5 + LANE_PERMUTE_HOST_S)
    assert tbe_select._host_bound_seconds(scan, priced) == pytest.approx(1e-5)
    assert calls == [{"level_issue_s": MERGE_LEVEL_HOST_S}] * 2
    spec = get_device("H100")
    kw = dict(nnz=4096, block_d=32, row_bytes=128, state_tiles=0, grad_bytes=4, one_dim=True, host_bound=True)
    assert tbe_select.select_update(spec, **kw).variant == "scan"
    tbe_select.clear_cache()
    with mock.patch.object(tbe_select, "LANE_PERMUTE_HOST_S", 0.0):
        assert tbe_select.select_update(spec, **kw).variant == "lane"


def test_half_precision_rows_are_selected_with_their_rounding_priced():
    """The selector prices the stochastic rounding of fp16 / bf16 rows (as the planner's estimate does): its pick
    is the cheapest candidate priced with the rounding, and on the MLPerf step with fp16 rows of one dim (14.02M
    ids, fp32 output gradient) the merge's rounding narrows what 8 tiles per merge program cost over one (12 ->
    1.4 us: the rounding runs on the tiles that hold a piece, fewer with fewer programs). Each level priced at the
    launch latency, the rounding made 8 the cheaper (predicted 0.283 -> 0.256 ms); measured in one process on the
    H200 (benchmarks/results/tbe_breakdown_fp16_mergeab_nvidia-h200_2026-12-01 and its _skewed_ twin, 3 rounds,
    full tables, the merge kernel of then): merge 0.209 -> 0.203 ms uniform, 0.302 -> 0.289 ms skewed; on an H100
    with bf16 rows (h100_merge_2026-12-07) 0.146 -> 0.141. The model's 1 (MERGE_LEVEL_DEVICE_S, MERGE_WALK_TRIPS)
    costs those 5-13 us."""
    from polyrec.hardware.calibrate import ceilings
    from polyrec.hardware.catalog import get_device
    from polyrec.perfmodel.tbe import UpdateShape, update_seconds

    spec, nnz = get_device("H200"), 14_024_704
    cfg = tbe_select.select_update(spec, nnz=nnz, block_d=128, row_bytes=256, state_tiles=0, grad_bytes=4,
                                   rounding="fp16", one_dim=True)
    assert (cfg.variant, cfg.span) == ("lane", 64)

    def priced(merge_chunks: int, rounding: str) -> float:
        shape = UpdateShape(variant="lane", tile=cfg.tile, num_warps=cfg.num_warps, chunks=cfg.chunks, grad_bytes=4,
                            merge_chunks=merge_chunks, rounding=rounding, one_dim=True, elems_per_thread=32,
                            max_registers=cfg.max_registers)
        return update_seconds(shape, spec, ceilings(spec), nnz=nnz, unique=nnz * tbe_select.UNIQUE_FRACTION,
                              row_bytes=256, grad_row_bytes=512, state_bytes_per_row=4)

    assert cfg.merge_chunks == min(tbe_select.MERGE_CHUNK_CHOICES, key=lambda m: priced(m, "fp16"))
    rounded, plain = (priced(8, s) - priced(1, s) for s in ("fp16", ""))
    assert 0 < rounded < 0.7 * plain


def test_a_host_bound_module_selects_with_the_merge_issue():
    """``TableBatchedEmbedding.host_bound`` (set by the trainer) reaches the selector, and a module's kept
    choice is per setting."""
    from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec

    tables = [TableSpec(name=n, rows=100, dim=128) for n in "ab"]
    tbe = TableBatchedEmbedding(tables, optimizer=EmbeddingOptimizer(kind="sgd", lr=0.1), output_dtype=torch.bfloat16)
    assert not tbe.host_bound and tbe._update_config(14_024_704).merge_chunks == 1
    tbe.host_bound = True
    assert tbe._update_config(14_024_704).merge_chunks == 8
