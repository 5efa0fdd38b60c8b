"""TableBatchedEmbedding through the Triton interpreter vs nn.EmbeddingBag + torch optimizers and a
float64 reference: several steps, duplicates, hot rows longer than a chunk, empty bags, mixed dims."""

from __future__ import annotations

import io
import math
from copy import deepcopy

import pytest
import torch

from polyrec.kernels.jagged import JaggedBatch, JaggedBatchError
from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec
from polyrec.kernels import tbe_select
from polyrec.kernels.tbe_reference import init_states, ref_pooled, ref_step

TABLES = [TableSpec(name="big", rows=40, dim=8), TableSpec(name="hot", rows=2, dim=16),
          TableSpec(name="mid", rows=9, dim=4, pooling="mean")]
FEATURES = [0, 1, 2, 1]  # table 1 read by two features: duplicates across features too
B = 40
#: Sorted positions per update program in these tests: small, so hot rows' runs cross many tiles.
TILE = 8


@pytest.fixture(autouse=True)
def small_update_tiles(monkeypatch):
    """The default (lane) variant; tests/test_tbe_segments.py runs both variants."""
    monkeypatch.setattr(tbe_select, "select_update", lambda spec, **kw: tbe_select.UpdateConfig(tile=TILE, num_warps=1, variant="lane", chunks=2))


def make_batch(gen: torch.Generator, *, weighted: bool = False, tables=TABLES, features=FEATURES,
               batch_size: int = B, max_len: int = 5) -> JaggedBatch:
    """Random bags (some empty); the 'hot' table gets > 2 * TILE ids on 2 rows (runs cross tiles)."""
    lengths = torch.randint(0, max_len + 1, (len(features) * batch_size,), generator=gen)
    lengths[::7] = 0
    vals = []
    for i, t in enumerate(features):
        n = int(lengths[i * batch_size:(i + 1) * batch_size].sum())
        vals.append(torch.randint(0, tables[t].rows, (n,), generator=gen))
    values = torch.cat(vals)
    weights = torch.rand(values.numel(), generator=gen) + 0.5 if weighted else None
    return JaggedBatch.from_lengths(values=values, lengths=lengths, batch_size=batch_size,
                                    num_features=len(features), weights=weights)


def test_hot_table_runs_cross_tiles():
    batch = make_batch(torch.Generator().manual_seed(0))
    off = batch.offsets
    hot = torch.cat([batch.values[int(off[B]): int(off[2 * B])], batch.values[int(off[3 * B]):]])
    assert int((hot == 0).sum()) > 2 * TILE and int((hot == 1).sum()) > 2 * TILE


@pytest.mark.parametrize("kind,wd", [("sgd", 0.0), ("rowwise_adagrad", 0.0), ("rowwise_adagrad", 0.01),
                                     ("adagrad", 0.0), ("adam", 0.0)])
def test_training_matches_float64_reference(kind, wd):
    gen = torch.Generator().manual_seed(1)
    opt = EmbeddingOptimizer(kind=kind, lr=0.05, weight_decay=wd, initial_accumulator_value=0.1 if "ada" in kind else 0)
    module = TableBatchedEmbedding(TABLES, optimizer=opt, feature_to_table=FEATURES, seed=3)
    weights = [w.double().clone() for w in module.table_weights()]
    states = init_states(opt, TABLES)
    for step in range(1, 4):
        batch = make_batch(gen, weighted=step == 2)
        out = module(batch)
        current = [w.double() for w in module.table_weights()]  # the forward is checked on the module's weights
        torch.testing.assert_close(out.double(), ref_pooled(current, batch, TABLES, FEATURES), rtol=1e-5, atol=1e-6)
        grad = torch.randn(out.shape, generator=gen)
        out.backward(grad)
        weights, states = ref_step(weights, states, batch, grad, opt, step, TABLES, FEATURES)
        for got, want in zip(module.table_weights(), weights):
            torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)
    if kind in ("rowwise_adagrad", "adagrad"):
        for got, want in zip(module.table_state(), states):
            torch.testing.assert_close(got.double(), want[0], rtol=1e-5, atol=1e-6)


def _one_dim_tables(dim: int) -> list[TableSpec]:
    return [TableSpec(name="big", rows=40, dim=dim), TableSpec(name="hot", rows=2, dim=dim),
            TableSpec(name="mid", rows=9, dim=dim, pooling="mean")]


@pytest.mark.parametrize("kind,dtype,dim", [("rowwise_adagrad", torch.float32, 8), ("adam", torch.float32, 8),
                                            ("rowwise_adagrad", torch.float16, 8),
                                            ("rowwise_adagrad", torch.float32, 12)])
def test_tables_of_one_dim_update_as_the_reference_and_as_with_the_table_looked_up(kind, dtype, dim):
    """Tables sharing one dim are updated with rows addressed as global row x dim (ONE_DIM); the same
    steps with each tile's table looked up (``one_dim`` 0, the mixed-dims path) give the same bits
    (fp16 rows: the same stochastic rounding, deterministic mode), and fp32 rows follow the float64
    reference (fp16 rows: ``test_low_precision_weights_track_reference``, on the looked-up path). Dim 12
    pads its rows to BLOCK_D 16: the columns past the dim are masked."""
    tables = _one_dim_tables(dim)
    gen = torch.Generator().manual_seed(12)
    opt = EmbeddingOptimizer(kind=kind, lr=0.05, initial_accumulator_value=0.1 if "ada" in kind else 0)
    kw = dict(optimizer=opt, feature_to_table=FEATURES, seed=3, weight_dtype=dtype, deterministic=True)
    fast = TableBatchedEmbedding(tables, **kw)
    looked_up = TableBatchedEmbedding(tables, **kw)
    looked_up.one_dim = 0
    assert fast.one_dim == dim and TableBatchedEmbedding(TABLES, optimizer=opt, feature_to_table=FEATURES).one_dim == 0
    weights, states = [w.double().clone() for w in fast.table_weights()], init_states(opt, tables)
    for step in range(1, 4):
        batch = make_batch(gen, weighted=step == 2, tables=tables)
        grad = torch.randn(B, dim * len(FEATURES), generator=gen)
        fast(batch).backward(grad)
        looked_up(batch).backward(grad)
        weights, states = ref_step(weights, states, batch, grad, opt, step, tables, FEATURES)
    assert torch.equal(fast.weights, looked_up.weights) and torch.equal(fast.state1, looked_up.state1)
    assert torch.equal(fast.state2, looked_up.state2)
    if dtype == torch.float32:
        for got, want in zip(fast.table_weights(), weights):
            torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)


#: Per dim group's BLOCK_D, its update config: another variant, tile and span in each group.
GROUP_CONFIGS = {4: tbe_select.UpdateConfig(tile=4, num_warps=1, variant="scan"),
                 8: tbe_select.UpdateConfig(tile=8, num_warps=1, variant="lane", chunks=1),
                 16: tbe_select.UpdateConfig(tile=4, num_warps=1, variant="lane", chunks=8, merge_chunks=8)}


@pytest.mark.parametrize("kind,grouped", [("rowwise_adagrad", True), ("adam", True), ("rowwise_adagrad", False)])
def test_dims_of_several_blocks_update_per_group_as_the_reference(kind, grouped, monkeypatch):
    """TABLES' dims 8, 16 and 4 take three BLOCK_D: one update launch per group at its own width, each
    with its own config (a scan, a one-tile lane and an 8-tile lane update: spans 4, 8 and 32), its pieces
    in its own slots, one merge over all; the sort keys carry the group (``group * total_rows`` + row).
    ``group_dims=False``: one launch at the widest BLOCK_D (16, the 8-tile lane update), keys = rows."""
    monkeypatch.setattr(tbe_select, "select_update", lambda spec, **kw: GROUP_CONFIGS[kw["block_d"]])
    gen = torch.Generator().manual_seed(21)
    opt = EmbeddingOptimizer(kind=kind, lr=0.05, initial_accumulator_value=0.1 if "ada" in kind else 0)
    module = TableBatchedEmbedding(TABLES, optimizer=opt, feature_to_table=FEATURES, seed=3, group_dims=grouped)
    rows = sum(t.rows for t in TABLES)
    plan = module.key_plan(100)
    assert module.dim_blocks == [4, 8, 16]
    if grouped:
        assert plan.blocks == (4, 8, 16) and plan.invalid_key == 3 * rows
        assert plan.key_base.tolist() == [1 * rows + 0, 2 * rows + 40, 0 * rows + 42]
    else:
        assert plan.blocks == (16,) and plan.invalid_key == rows and plan.key_base.tolist() == [0, 40, 42]
    weights, states = [w.double().clone() for w in module.table_weights()], init_states(opt, TABLES)
    for step in range(1, 4):
        batch = make_batch(gen, weighted=step == 2, max_len=9)
        grad = torch.randn(B, module.output_dim, generator=gen)
        module(batch).backward(grad)
        weights, states = ref_step(weights, states, batch, grad, opt, step, TABLES, FEATURES)
        for got, want in zip(module.table_weights(), weights):
            torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)
    for got, want in zip(module.table_state(), states):
        torch.testing.assert_close(got.double(), want[0], rtol=1e-5, atol=1e-6)


def test_lead_columns_leave_room_before_the_output_and_train_the_same():
    """``lead_columns``: the output is the last columns of a [B, lead + output_dim] buffer, with the same
    values, and a gradient that arrives as columns of a wider tensor trains the tables as a contiguous
    one does (the same bits)."""
    gen = torch.Generator().manual_seed(15)
    opt = EmbeddingOptimizer(kind="rowwise_adagrad", lr=0.05)
    with_lead, plain = (TableBatchedEmbedding(TABLES, optimizer=opt, feature_to_table=FEATURES, seed=3)
                        for _ in range(2))
    batch = make_batch(gen)
    out, want = with_lead(batch, lead_columns=5), plain(batch)
    assert out._base.shape == (B, 5 + want.shape[1]) and out.data_ptr() == out._base[:, 5:].data_ptr()
    assert torch.equal(out, want)
    wide = torch.randn(B, 5 + want.shape[1], generator=gen)
    out.backward(wide[:, 5:])
    want.backward(wide[:, 5:].contiguous())
    assert torch.equal(with_lead.weights, plain.weights) and torch.equal(with_lead.state1, plain.state1)
    with pytest.raises(ValueError, match="lead_columns must be >= 0"):
        with_lead(batch, lead_columns=-1)


def test_lookups_into_a_given_buffer_fill_it_in_place_and_train_the_same():
    """``into``: two steps' lookups written into one buffer (a CUDA graph's static input) give the values
    of lookups into new buffers, leave the lead columns as they were, and train the tables the same; a
    buffer of the wrong shape, dtype or layout is refused."""
    gen = torch.Generator().manual_seed(16)
    opt = EmbeddingOptimizer(kind="rowwise_adagrad", lr=0.05)
    held, plain = (TableBatchedEmbedding(TABLES, optimizer=opt, feature_to_table=FEATURES, seed=3) for _ in range(2))
    width = 4 + plain.output_dim
    into = torch.full((B, width), float("nan"))
    for _ in range(2):
        batch = make_batch(gen)
        out, want = held(batch, lead_columns=4, into=into), plain(batch, lead_columns=4)
        assert out.data_ptr() == into[:, 4:].data_ptr() and torch.equal(out, want)
        assert torch.isnan(into[:, :4]).all()
        grad = torch.randn(B, width, generator=gen)[:, 4:]
        out.backward(grad)
        want.backward(grad)
    assert torch.equal(held.weights, plain.weights) and torch.equal(held.state1, plain.state1)
    batch = make_batch(gen)
    for bad in (torch.empty(B, width + 1), torch.empty(B, width, dtype=torch.float64), torch.empty(width, B).t()):
        with pytest.raises(ValueError, match="into: need a contiguous"):
            held(batch, lead_columns=4, into=bad)


@pytest.mark.parametrize("kind", ["sgd", "adagrad"])
def test_matches_embedding_bag_and_torch_optimizer(kind):
    """Same tables as nn.EmbeddingBag(sparse=True) + torch.optim.SGD / Adagrad, three steps."""
    gen = torch.Generator().manual_seed(2)
    tables = [TableSpec(name="a", rows=30, dim=8), TableSpec(name="b", rows=3, dim=4)]
    opt = EmbeddingOptimizer(kind=kind, lr=0.1, eps=1e-10)
    module = TableBatchedEmbedding(tables, optimizer=opt)
    bags = [torch.nn.EmbeddingBag(t.rows, t.dim, mode="sum", sparse=True) for t in tables]
    for bag, w in zip(bags, module.table_weights()):
        bag.weight.data.copy_(w)
    params = [b.weight for b in bags]
    torch_opt = torch.optim.SGD(params, lr=0.1) if kind == "sgd" else torch.optim.Adagrad(params, lr=0.1, eps=1e-10)
    for _ in range(3):
        batch = make_batch(gen, tables=tables, features=[0, 1], batch_size=16)
        off = batch.offsets
        want = torch.cat([bags[f](batch.values[int(off[f * 16]): int(off[(f + 1) * 16])],
                                  off[f * 16:(f + 1) * 16] - off[f * 16]) for f in range(2)], 1)
        got = module(batch)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        grad = torch.randn(got.shape, generator=gen)
        got.backward(grad)
        torch_opt.zero_grad()
        want.backward(grad)
        torch_opt.step()
        for bag, w in zip(bags, module.table_weights()):
            torch.testing.assert_close(w, bag.weight.detach(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_weights_track_reference(dtype):
    gen = torch.Generator().manual_seed(4)
    opt = EmbeddingOptimizer(kind="rowwise_adagrad", lr=0.05)
    module = TableBatchedEmbedding(TABLES, optimizer=opt, feature_to_table=FEATURES, weight_dtype=dtype)
    weights = [w.double().clone() for w in module.table_weights()]
    states = init_states(opt, TABLES)
    ulp = 2.0 ** -10 if dtype == torch.float16 else 2.0 ** -7
    for step in range(1, 3):
        batch = make_batch(gen)
        out = module(batch)
        assert out.dtype == torch.float32
        torch.testing.assert_close(out.double(), ref_pooled(weights, batch, TABLES, FEATURES), rtol=1e-5, atol=1e-6)
        grad = torch.randn(out.shape, generator=gen)
        out.backward(grad)
        weights, states = ref_step(weights, states, batch, grad, opt, step, TABLES, FEATURES)
        for got, want in zip(module.table_weights(), weights):
            err = (got.double() - want).abs() / want.abs().clamp_min(2.0 ** -14)
            assert float(err.max()) <= 2 * ulp
        weights = [w.double().clone() for w in module.table_weights()]  # continue from the rounded values


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_stochastic_rounding_is_unbiased(dtype):
    """All rows start at 1.0; one SGD step of lr * g = delta, a fraction of an ulp. Round-to-nearest
    would leave every row at 1.0; stochastic rounding must average to 1 - delta."""
    rows, dim = 512, 16
    ulp_below_one = 2.0 ** -11 if dtype == torch.float16 else 2.0 ** -8
    delta = 0.3 * ulp_below_one
    module = TableBatchedEmbedding([TableSpec(name="t", rows=rows, dim=dim)], optimizer=EmbeddingOptimizer(
        kind="sgd", lr=delta), weight_dtype=dtype, init_scale=0.0, deterministic=True, seed=11)
    module.weights.fill_(1.0)
    batch = JaggedBatch.from_lengths(values=torch.arange(rows), lengths=torch.ones(rows, dtype=torch.int64),
                                     batch_size=rows, num_features=1)
    module(batch).backward(torch.ones(rows, dim))
    w = module.weights.double()
    assert set(w.unique().tolist()) <= {1.0, 1.0 - ulp_below_one}
    frac_down = float((w < 1.0).double().mean())  # expected 0.3, n = 8192 draws
    sigma = math.sqrt(0.3 * 0.7 / w.numel())
    assert abs(frac_down - 0.3) < 5 * sigma


@pytest.mark.parametrize("pooled_dim,grouped", [(8, None), (32, True)])
def test_sequence_lookup_and_update(pooled_dim, grouped):
    """Also beside a pooled table of another BLOCK_D, updated per dim group (``group_dims=True``)."""
    tables = [TableSpec(name="pooled", rows=10, dim=pooled_dim), TableSpec(name="seq", rows=6, dim=8, pooling="none")]
    gen = torch.Generator().manual_seed(5)
    module = TableBatchedEmbedding(tables, optimizer=EmbeddingOptimizer(kind="sgd", lr=0.5), group_dims=grouped)
    assert module.key_plan(100).grouped == bool(grouped)
    batch = make_batch(gen, tables=tables, features=[0, 1], batch_size=10)
    before = [w.clone() for w in module.table_weights()]
    seq = module.lookup_sequence(batch)
    s, e = int(batch.offsets[10]), int(batch.offsets[20])
    torch.testing.assert_close(seq, before[1][batch.values[s:e]])
    assert module(batch).shape == (10, pooled_dim)  # the sequence feature is left out of the pooled output
    grad = torch.randn(seq.shape, generator=gen)
    seq.backward(grad)
    want = before[1].double().index_add(0, batch.values[s:e], -0.5 * grad.double())
    torch.testing.assert_close(module.table_weights()[1].double(), want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(module.table_weights()[0], before[0])


def test_sequence_sort_keys_are_priced_at_the_sequence_bags(monkeypatch):
    """One pooled and one sequence feature, bags of 8 and 1 ids: the sequence backward's sort-key tile is chosen
    at the sequence feature's bag length (it took the pooled features' where their counts matched). The pooled
    backward takes its keys from the trained forward (no selection here)."""
    tables = [TableSpec(name="pooled", rows=10, dim=8), TableSpec(name="seq", rows=6, dim=8, pooling="none")]
    module = TableBatchedEmbedding(tables, optimizer=EmbeddingOptimizer(kind="sgd", lr=0.5))
    priced, select = [], tbe_select.select_forward

    def spy(*args, **kw):
        priced.append(kw["bag_lengths"])
        return select(*args, **kw)

    monkeypatch.setattr(tbe_select, "select_forward", spy)
    batch = JaggedBatch.from_lengths(values=torch.randint(0, 6, (10 * 9,)), batch_size=10, num_features=2,
                                     lengths=torch.tensor([8] * 10 + [1] * 10))
    module.lookup_sequence(batch).sum().backward()
    assert priced == [[1.0]]


def test_deterministic_mode_is_bitwise_repeatable():
    def run() -> torch.Tensor:
        gen = torch.Generator().manual_seed(6)
        module = TableBatchedEmbedding(TABLES, optimizer=EmbeddingOptimizer(kind="adam", lr=0.01),
                                       feature_to_table=FEATURES, weight_dtype=torch.bfloat16, deterministic=True)
        for _ in range(2):
            batch = make_batch(gen)
            out = module(batch)
            out.backward(torch.randn(out.shape, generator=gen))
        return module.weights.clone()

    assert torch.equal(run().view(torch.int16), run().view(torch.int16))


def test_checkpoint_resume_is_exact():
    gen = torch.Generator().manual_seed(7)
    opt = EmbeddingOptimizer(kind="adam", lr=0.01)
    batches = [make_batch(gen) for _ in range(2)]
    grads = [torch.randn(B, 8 + 16 + 4 + 16, generator=gen) for _ in range(2)]
    a = TableBatchedEmbedding(TABLES, optimizer=opt, feature_to_table=FEATURES, deterministic=True)
    a(batches[0]).backward(grads[0])
    b = TableBatchedEmbedding(TABLES, optimizer=opt, feature_to_table=FEATURES, deterministic=True, seed=99)
    b.load_state_dict(a.state_dict())
    assert b.step == 1
    for m in (a, b):
        m(batches[1]).backward(grads[1])
    assert torch.equal(a.weights, b.weights) and torch.equal(a.state2, b.state2)


def test_half_precision_resume_keeps_the_rounding_seed():
    """bf16 rows round stochastically from the module's seed and step: a module built with another seed
    continues bitwise from the checkpoint (it holds the seed)."""
    gen = torch.Generator().manual_seed(17)
    opt = EmbeddingOptimizer(kind="rowwise_adagrad", lr=0.05)
    batches = [make_batch(gen) for _ in range(2)]
    grads = [torch.randn(B, 8 + 16 + 4 + 16, generator=gen) for _ in range(2)]
    kw = dict(optimizer=opt, feature_to_table=FEATURES, deterministic=True, weight_dtype=torch.bfloat16)
    a = TableBatchedEmbedding(TABLES, seed=5, **kw)
    a(batches[0]).backward(grads[0])
    b = TableBatchedEmbedding(TABLES, seed=99, **kw)
    b.load_state_dict(a.state_dict())
    for m in (a, b):
        m(batches[1]).backward(grads[1])
    assert torch.equal(a.weights.view(torch.int16), b.weights.view(torch.int16))


def test_fp32_rows_draw_no_rounding_seed():
    """Only half-precision rows round stochastically: an fp32 step leaves torch's generator where it was."""
    gen = torch.Generator().manual_seed(18)
    module = TableBatchedEmbedding(TABLES, optimizer=EmbeddingOptimizer(kind="sgd"), feature_to_table=FEATURES)
    batch, grad = make_batch(gen), torch.randn(B, 8 + 16 + 4 + 16, generator=gen)
    before = torch.get_rng_state()
    module(batch).backward(grad)
    assert torch.equal(torch.get_rng_state(), before)


class _DeviceEvent:
    """Stands in for the torch.cuda.Event a GPU lookup leaves: waitable, not copyable."""

    def __init__(self):
        self.waited = False

    def synchronize(self):
        self.waited = True

    def query(self):
        return self.waited

    def __reduce__(self):
        raise TypeError("cannot pickle 'Event' object")


def test_a_module_with_pending_flags_copies_and_saves():
    """After a GPU lookup the module holds its flags' copy event: deepcopy and torch.save wait for it and
    drop it, and the copy still reports the bad input the flags hold."""
    module = TableBatchedEmbedding(TABLES, optimizer=EmbeddingOptimizer(kind="sgd"), feature_to_table=FEATURES)
    module(make_batch(torch.Generator().manual_seed(19)))
    event, flags = _DeviceEvent(), torch.zeros_like(module.flags)
    flags[2] = 1
    module._pending_flags = (flags, event)
    torch.save(module, io.BytesIO())
    copy = deepcopy(module)
    assert event.waited and module._pending_flags[1] is event
    with pytest.raises(JaggedBatchError, match=r"feature 2 \(table 'mid'"):
        copy.check_errors()


def test_out_of_range_and_negative_ids_name_feature_and_table():
    module = TableBatchedEmbedding(TABLES, optimizer=EmbeddingOptimizer(kind="sgd"), feature_to_table=FEATURES)
    batch = make_batch(torch.Generator().manual_seed(8))
    before = module.weights.clone()
    for bad in (9, -1):
        values = batch.values.clone()
        values[int(batch.offsets[2 * B])] = bad if bad < 0 else 9  # feature 2 reads table 'mid' (9 rows)
        broken = JaggedBatch(values=values, offsets=batch.offsets, batch_size=B, num_features=4)
        with pytest.raises(JaggedBatchError, match=r"feature 2 \(table 'mid', rows 9\)"):
            module(broken)
        debug = TableBatchedEmbedding(TABLES, optimizer=EmbeddingOptimizer(kind="sgd"), feature_to_table=FEATURES,
                                      debug_checks=True)
        with pytest.raises(JaggedBatchError, match=rf"feature 2 of table 'mid': id {bad} at values\["):
            debug(broken)
    assert torch.equal(module.weights, before)


def test_bad_offsets_dtype_and_shape_errors():
    module = TableBatchedEmbedding(TABLES, optimizer=EmbeddingOptimizer(kind="sgd"), feature_to_table=FEATURES,
                                   debug_checks=True)
    batch = make_batch(torch.Generator().manual_seed(9))
    offsets = batch.offsets.clone()
    offsets[5] = offsets[7] + 1
    with pytest.raises(JaggedBatchError, match="offsets decrease at bag"):
        module(JaggedBatch(values=batch.values, offsets=offsets, batch_size=B, num_features=4))
    cheap = TableBatchedEmbedding(TABLES, optimizer=EmbeddingOptimizer(kind="sgd"), feature_to_table=FEATURES)
    with pytest.raises(JaggedBatchError, match="offsets that decrease"):
        cheap(JaggedBatch(values=batch.values, offsets=offsets, batch_size=B, num_features=4))
    with pytest.raises(JaggedBatchError, match="values must be int64 or int32"):
        module(JaggedBatch(values=batch.values.float(), offsets=batch.offsets, batch_size=B, num_features=4))
    with pytest.raises(JaggedBatchError, match="offsets must have F\\*B\\+1"):
        module(JaggedBatch(values=batch.values, offsets=batch.offsets[:-1], batch_size=B, num_features=4))
    with pytest.raises(JaggedBatchError, match="batch has 3 features"):
        module(JaggedBatch(values=batch.values, offsets=batch.offsets[: 3 * B + 1], batch_size=B, num_features=3))
    with pytest.raises(JaggedBatchError, match="values is on meta"):
        module(JaggedBatch(values=batch.values.to("meta"), offsets=batch.offsets, batch_size=B, num_features=4))


def test_int32_inputs_and_no_grad():
    module = TableBatchedEmbedding(TABLES, optimizer=EmbeddingOptimizer(kind="sgd"), feature_to_table=FEATURES)
    batch = make_batch(torch.Generator().manual_seed(10))
    small = JaggedBatch(values=batch.values.int(), offsets=batch.offsets.int(), batch_size=B, num_features=4)
    with torch.no_grad():
        torch.testing.assert_close(module(small), module(batch))


def test_a_row_strided_gradient_updates_as_its_contiguous_copy():
    """The trainer hands the backward the embedding columns of the cross network's input gradient, a
    [B, out] slice with a longer row stride: it must update exactly as the same values contiguous."""
    gen = torch.Generator().manual_seed(8)
    opt = EmbeddingOptimizer(kind="rowwise_adagrad", lr=0.05)
    out_dim = 8 + 16 + 4 + 16
    batches = [make_batch(gen) for _ in range(2)]
    wide = [torch.randn(B, out_dim + 12, generator=gen) for _ in range(2)]  # 12 leading columns not ours
    a = TableBatchedEmbedding(TABLES, optimizer=opt, feature_to_table=FEATURES, deterministic=True)
    b = TableBatchedEmbedding(TABLES, optimizer=opt, feature_to_table=FEATURES, deterministic=True)
    for batch, g in zip(batches, wide):
        strided = g[:, 12:]
        assert strided.stride(0) == out_dim + 12 and not strided.is_contiguous()
        a(batch).backward(strided)
        b(batch).backward(strided.contiguous())
    assert torch.equal(a.weights, b.weights) and torch.equal(a.state1, b.state1)


def test_gradient_offsets_are_sized_by_the_span_of_a_strided_gradient():
    """int32 offsets were chosen by the gradient's element count: a [3, 4] slice of rows 2^30 + 8 apart has 12
    elements but its last row starts past 2^31 (offsets wrapped negative; a crash in the interpreter)."""
    from polyrec.kernels.grid import element_span

    wide = torch.empty(3, 10)[:, :4]
    assert element_span(wide) == 2 * 10 + 4 and element_span(torch.empty(3, 4)) == 12
    assert element_span(torch.empty(0, 4)) == 0 and element_span(torch.empty(3, 4).expand(2, 3, 4)) == 12
    module = TableBatchedEmbedding([TableSpec(name="t", rows=3, dim=4)], optimizer=EmbeddingOptimizer(kind="sgd"),
                                   update_config=tbe_select.UpdateConfig(tile=8, num_warps=1, variant="lane", chunks=1))
    batch = JaggedBatch(values=torch.tensor([0, 1, 2]), offsets=torch.tensor([0, 1, 2, 3]), batch_size=3,
                        num_features=1)
    ids = module._sort_ids(batch.values, batch.offsets, None, 3, None)
    assert module._permute(2**31, ids, 3, False, 2**30)[0].dtype == torch.int32
    g_off, _ = module._permute(2**31 + 1, ids, 3, False, 2**30 + 8)
    assert g_off.dtype == torch.int64 and g_off[:3].tolist() == [0, 2**30 + 8, 2 * (2**30 + 8)]  # padded after
    spans, permute = [], module._permute
    module._permute = lambda span, *rest: spans.append(span) or permute(span, *rest)
    module(batch).backward(torch.randn(3, 10)[:, :4])
    assert spans == [2 * 10 + 4]  # the backward sizes them by the span (was the element count, 12)


def _sort_calls(module: TableBatchedEmbedding, monkeypatch) -> list[int]:
    """Counts ``module._sort_ids`` calls (the id-only part of a backward)."""
    calls, real = [], module._sort_ids
    monkeypatch.setattr(module, "_sort_ids", lambda *a: calls.append(1) or real(*a))
    return calls


@pytest.mark.parametrize("weighted", [False, True])
def test_a_backward_prepared_during_the_forward_updates_as_one_that_sorts_itself(weighted, monkeypatch):
    """``prepare_backward`` (sharded embeddings call it while the pooled rows cross the all-to-all):
    the next backward of the same batch sorts nothing and updates bitwise as an unprepared one, also
    for a gradient with another row stride (whose offsets it recomputes)."""
    gen = torch.Generator().manual_seed(12)
    opt = EmbeddingOptimizer(kind="adagrad", lr=0.05)
    a = TableBatchedEmbedding(TABLES, optimizer=opt, feature_to_table=FEATURES, deterministic=True)
    b = TableBatchedEmbedding(TABLES, optimizer=opt, feature_to_table=FEATURES, deterministic=True)
    calls = _sort_calls(a, monkeypatch)
    for step in range(3):
        batch = make_batch(gen, weighted=weighted)
        grad = torch.randn(B, a.output_dim + 4 * step, generator=gen)[:, 4 * step:]  # strided from step 1
        out = a(batch)
        a.prepare_backward(batch)
        out.backward(grad)
        b(batch).backward(grad)
        assert len(calls) == step + 1  # the prepared sort only
    assert torch.equal(a.weights, b.weights) and torch.equal(a.state1, b.state1)


@pytest.mark.parametrize("weighted", [False, True])
def test_a_trained_forward_writes_the_sort_keys_its_backward_would(weighted, monkeypatch):
    """The pooled forward of a lookup that will be trained writes each id position's key, gradient row
    and scale (mean pooling, per-sample weights) as ``sort_keys_kernel`` does; its backward then
    launches no sort-key kernel and updates bitwise as one that does."""
    gen = torch.Generator().manual_seed(14)
    opt = EmbeddingOptimizer(kind="rowwise_adagrad", lr=0.05)
    a = TableBatchedEmbedding(TABLES, optimizer=opt, feature_to_table=FEATURES, deterministic=True)
    b = TableBatchedEmbedding(TABLES, optimizer=opt, feature_to_table=FEATURES, deterministic=True)
    calls, real = [], a._sort_keys
    monkeypatch.setattr(a, "_sort_keys", lambda *x: calls.append(1) or real(*x))
    for _ in range(2):
        batch = make_batch(gen, weighted=weighted)
        out = a(batch)
        written = a._forward_keys
        want = real(batch.values, batch.offsets, batch.weights, B, None)
        n = batch.nnz
        assert written.keys.numel() > n and torch.equal(written.keys, want.keys)
        assert torch.all(written.keys[n:] == written.plan.invalid_key)  # the padding: the invalid key
        assert torch.equal(written.src, want.src)
        assert (written.scale is None) == (want.scale is None)
        if written.scale is not None:
            torch.testing.assert_close(written.scale, want.scale, rtol=0, atol=0)
        grad = torch.randn(out.shape, generator=gen)
        out.backward(grad)
        out_b = b(batch)
        b._forward_keys = None  # b sorts with the kernel
        out_b.backward(grad)
    assert not calls
    assert torch.equal(a.weights, b.weights) and torch.equal(a.state1, b.state1)


def test_an_out_of_range_id_gets_the_invalid_key_from_the_forward():
    module = TableBatchedEmbedding(TABLES, optimizer=EmbeddingOptimizer(kind="sgd"), feature_to_table=FEATURES)
    module.defer_errors = True  # flagged, kept for check_errors
    batch = make_batch(torch.Generator().manual_seed(16))
    batch.values[0], batch.values[1] = -1, TABLES[FEATURES[0]].rows
    module(batch)
    keys = module._forward_keys.keys
    invalid = module._forward_keys.plan.invalid_key
    assert keys[0] == keys[1] == invalid and bool((keys[2:batch.nnz] < invalid).all())


def test_no_sort_keys_are_kept_without_a_backward():
    module = TableBatchedEmbedding(TABLES, optimizer=EmbeddingOptimizer(kind="sgd"), feature_to_table=FEATURES)
    batch = make_batch(torch.Generator().manual_seed(15))
    with torch.no_grad():
        module(batch)
    assert module._forward_keys is None
    module(batch)
    assert module._forward_keys is not None


def test_a_prepared_sort_of_another_or_changed_batch_is_not_used(monkeypatch):
    gen = torch.Generator().manual_seed(13)
    opt = EmbeddingOptimizer(kind="sgd", lr=0.5)
    a = TableBatchedEmbedding(TABLES, optimizer=opt, feature_to_table=FEATURES, deterministic=True)
    b = TableBatchedEmbedding(TABLES, optimizer=opt, feature_to_table=FEATURES, deterministic=True)
    calls = _sort_calls(a, monkeypatch)
    first, second = make_batch(gen), make_batch(gen)
    out = a(first)
    a.prepare_backward(second)  # another batch: the backward of `first` sorts again
    out.backward(torch.ones_like(out))
    b(first).backward(torch.ones_like(out))
    assert len(calls) == 2
    out = a(second)
    a.prepare_backward(second)
    second.values[0] = (second.values[0] + 1) % TABLES[FEATURES[0]].rows  # changed after the sort
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.backward(torch.ones_like(out))  # autograd refuses first; the sort would not be used either
    assert a._take_prepared(second.values, second.offsets, second.weights) is None
    assert torch.equal(a.weights, b.weights)


@pytest.mark.parametrize("weighted", [False, True])
def test_a_forward_split_into_launches_writes_every_column_as_the_reference(weighted, monkeypatch):
    """The pooled forward in several launches (one per group of features, each its own tile, as
    ``tbe_forward_plan`` may plan it) writes every feature's columns, equal to the float64 reference:
    mean pooling, empty bags, per-sample weights, a table read by two features in different launches."""
    import polyrec.kernels.tbe as tbe
    from polyrec.kernels.tbe_forward_plan import ForwardLaunch

    groups = [((0, 3), tbe_select.ForwardConfig(bags=16, hots=1, num_warps=2)),
              ((1,), tbe_select.ForwardConfig(bags=4, hots=4, num_warps=2)),
              ((2,), tbe_select.ForwardConfig(bags=1, hots=16, num_warps=2))]
    monkeypatch.setattr(tbe, "plan_forward", lambda spec, **kw: [ForwardLaunch(features=f, config=c) for f, c in groups])
    module = TableBatchedEmbedding(TABLES, optimizer=EmbeddingOptimizer(kind="sgd", lr=0.1), feature_to_table=FEATURES,
                                   seed=5)
    batch = make_batch(torch.Generator().manual_seed(6), weighted=weighted)
    real_empty = torch.empty

    def poisoned(*args, **kwargs):  # the output buffer starts as NaN: a column no launch writes shows
        t = real_empty(*args, **kwargs)
        return t if t.requires_grad or not t.is_floating_point() else t.fill_(float("nan"))

    monkeypatch.setattr(torch, "empty", poisoned)
    out = module(batch)
    assert len(module.forward_plan(batch)) == 3 and not torch.isnan(out).any()
    weights = [w.double() for w in module.table_weights()]
    torch.testing.assert_close(out.double(), ref_pooled(weights, batch, TABLES, FEATURES), rtol=1e-5, atol=1e-6)


def test_dim_groups_get_their_own_launches_where_the_update_is_long_and_the_host_keeps_up():
    """``group_dims=None``: one launch per dim group where the update at the widest BLOCK_D is predicted
    at >= ``GROUP_MIN_UPDATE_S`` (MLPerf-sized batches) and the step is not host-bound; one launch on
    small batches (the extra launches' host time is not paid back) and on host-bound steps."""
    from polyrec.hardware.catalog import get_device

    spec = get_device("H200")
    shape = dict(groups=2, total_rows=20, block_d=128, row_bytes=512, state_tiles=0)
    assert tbe_select.groups_pay(spec, nnz=20_000_000, **shape)
    assert not tbe_select.groups_pay(spec, nnz=200_000, **shape)
    assert not tbe_select.groups_pay(spec, nnz=20_000_000, host_bound=True, **shape)
    module = TableBatchedEmbedding([TableSpec(name="a", rows=10, dim=16), TableSpec(name="b", rows=10, dim=128)],
                                   optimizer=EmbeddingOptimizer(kind="rowwise_adagrad", lr=0.1))
    assert module.key_plan(20_000_000).blocks == (16, 128) and module.key_plan(200_000).blocks == (128,)
    module.host_bound = True
    assert module.key_plan(20_000_000).blocks == (128,)


def test_dim_groups_are_not_chosen_where_their_keys_would_need_int64():
    """Group keys reach groups * total_rows: where that passes int32 and the rows do not, the default keeps
    one launch (int64 keys would double the sort's key bytes); ``group_dims=True`` still groups."""
    def two_tables() -> TableBatchedEmbedding:
        return TableBatchedEmbedding([TableSpec(name="a", rows=10, dim=16), TableSpec(name="b", rows=10, dim=128)],
                                     optimizer=EmbeddingOptimizer(kind="rowwise_adagrad", lr=0.1))

    module = two_tables()
    assert module.key_plan(20_000_000).key_dtype == torch.int32 and module.key_plan(20_000_000).grouped
    module = two_tables()  # a new module: the choice of the first is kept per batch size
    module.total_rows = 2**30  # as if the tables held 2^30 rows: 2 groups' keys reach 2^31
    assert not module.key_plan(20_000_000).grouped and module.key_plan(20_000_000).key_dtype == torch.int32
    module.group_dims = True
    assert module.key_plan(20_000_000).grouped and module.key_plan(20_000_000).key_dtype == torch.int64


def test_packed_views_cut_a_buffer_as_the_module_packs_it():
    """tbe.packed_views (used by checkpoints without a live module) gives the module's own table views,
    per element and per row (row-wise state)."""
    from polyrec.kernels.tbe import packed_views

    tables = [TableSpec(name="a", rows=5, dim=8), TableSpec(name="b", rows=3, dim=4), TableSpec(name="c", rows=2, dim=8)]
    module = TableBatchedEmbedding(tables, optimizer=EmbeddingOptimizer(kind="rowwise_adagrad"))
    shapes = [(t.rows, t.dim) for t in tables]
    for got, want in zip(packed_views(module.weights, shapes), module.table_weights(), strict=True):
        assert got.shape == want.shape and got.data_ptr() == want.data_ptr()
    rows = packed_views(torch.arange(10.0), shapes, per_row=True)
    assert [r.tolist() for r in rows] == [[0, 1, 2, 3, 4], [5, 6, 7], [8, 9]]


@pytest.mark.parametrize("weight_dtype", [torch.float32, torch.float16])
def test_a_dtype_change_is_refused_before_anything_changes(weight_dtype):
    """Was: .half() cast the fp32 optimizer state too (an fp16 Adagrad sum overflowed and froze its row) and left
    weight_dtype, so stochastic rounding, as built. Moves, and a cast that changes nothing, still apply."""
    module = TableBatchedEmbedding(TABLES, optimizer=EmbeddingOptimizer(kind="rowwise_adagrad"),
                                   feature_to_table=FEATURES, weight_dtype=weight_dtype)
    casts = {"half": lambda m: m.half(), "bf16": lambda m: m.to(torch.bfloat16), "double": lambda m: m.double(),
             "float": lambda m: m.float()}
    for name, cast in casts.items():
        if weight_dtype == torch.float32 and name == "float":
            assert cast(module) is module  # fp32 rows and state: nothing to change
            continue
        with pytest.raises(TypeError, match="a dtype change would cast both"):
            cast(module)
        assert module.weights.dtype == weight_dtype and module.state1.dtype == torch.float32
    assert module.to("cpu").cpu() is module
