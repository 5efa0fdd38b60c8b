"""TableBatchedEmbedding's refusals of bad input and bad set-ups, through the Triton interpreter: strided
batch tensors, malformed offsets in the pooled and sequence lookups (cheap checks: the kernels' flags),
a sequence lookup of no samples, checkpoints of another table layout, output dtypes, per-sample weights
that require grad."""

from __future__ import annotations

import io

import pytest
import torch

from polyrec.kernels.jagged import JaggedBatch, JaggedBatchError
from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec

SGD = EmbeddingOptimizer(kind="sgd", lr=0.5)


def make(tables: list[tuple[str, int, int, str]], **kw) -> TableBatchedEmbedding:
    """A module of (name, rows, dim, pooling) tables, SGD unless ``optimizer`` says otherwise."""
    kw.setdefault("optimizer", SGD)
    return TableBatchedEmbedding([TableSpec(name=n, rows=r, dim=d, pooling=p) for n, r, d, p in tables], **kw)


def batch(values: list[int], offsets: list[int], batch_size: int, num_features: int, **kw) -> JaggedBatch:
    return JaggedBatch(values=torch.tensor(values), offsets=torch.tensor(offsets), batch_size=batch_size,
                       num_features=num_features, **kw)


TWO = [("user", 10, 4, "sum"), ("ad", 5, 4, "sum")]
SEQ = [("hist", 10, 4, "none"), ("clicks", 10, 4, "none")]
SEQ_NAMES = [name for name, *_ in SEQ]


@pytest.mark.parametrize("field", ["values", "offsets", "weights"])
def test_a_strided_tensor_is_refused_before_launch(field):
    good = batch([1, 2, 3, 4], [0, 1, 2, 3, 4], 2, 2, weights=torch.ones(4))
    strided = torch.stack([getattr(good, field), torch.zeros_like(getattr(good, field))], 1).view(-1)[::2]
    bad = JaggedBatch(**{"values": good.values, "offsets": good.offsets, "weights": good.weights, field: strided},
                      batch_size=2, num_features=2)
    with pytest.raises(JaggedBatchError, match=rf"{field} must be contiguous, got stride 2"):
        make(TWO)(bad)  # the default (cheap) checks


@pytest.mark.parametrize("offsets, feature", [
    ([1, 2, 3, 4, 4], 0),  # offsets[0] != 0: values[0] is in no bag
    ([0, 1, 2, 3, 3], 1),  # offsets[-1] < nnz: values[3] is in no bag
])
def test_ids_outside_every_bag_are_flagged_naming_the_feature(offsets, feature):
    with pytest.raises(JaggedBatchError, match="offsets"):  # the debug checks, before launch
        make(TWO, debug_checks=True)(batch([1, 2, 3, 4], offsets, 2, 2))
    names = [name for name, *_ in TWO]
    with pytest.raises(JaggedBatchError, match=rf"feature {feature} \(table '{names[feature]}', rows \d+\): ids "
                                               "outside every bag"):
        make(TWO)(batch([1, 2, 3, 4], offsets, 2, 2))  # the default (cheap) checks: bag_ends_kernel's flag
    with pytest.raises(JaggedBatchError, match=rf"feature {feature} \(table '{SEQ_NAMES[feature]}', rows 10\): ids "
                                               "outside every bag"):
        make(SEQ).lookup_sequence(batch([1, 2, 3, 4], offsets, 2, 2))


def test_ids_of_a_batch_without_bags_are_flagged_as_outside_every_bag():
    """Batch size 0 with ids: the default checks flagged nothing (the lookup returned before them), while the
    debug checks refused the batch."""
    names = [name for name, *_ in TWO]
    with pytest.raises(JaggedBatchError, match=rf"feature 1 \(table '{names[1]}', rows \d+\): ids outside every bag"):
        make(TWO)(batch([1, 2], [0], 0, 2))
    with pytest.raises(JaggedBatchError, match=rf"feature 1 \(table '{SEQ_NAMES[1]}', rows 10\): ids outside every "
                                               "bag"):
        make(SEQ).lookup_sequence(batch([1, 2], [0], 0, 2))
    empty = JaggedBatch(values=torch.empty(0, dtype=torch.int64), offsets=torch.zeros(1, dtype=torch.int64),
                        batch_size=0, num_features=2)
    assert make(TWO)(empty).shape == (0, 8)  # no ids, no bags: nothing to flag


def test_bags_that_cover_every_id_raise_no_ends_flag():
    pooled = make(TWO)(batch([1, 2, 3, 4], [0, 1, 2, 3, 4], 2, 2))
    assert pooled.shape == (2, 8)  # no error: the ends are right (the flag is not raised on any input)
    empty = make(TWO)(JaggedBatch(values=torch.empty(0, dtype=torch.int64), offsets=torch.zeros(5, dtype=torch.int64),
                                  batch_size=2, num_features=2))  # nnz 0: every bag empty
    assert torch.equal(empty, torch.zeros(2, 8))


def test_debug_checks_name_the_feature_and_table_of_decreasing_offsets():
    module = make(TWO, debug_checks=True)
    with pytest.raises(JaggedBatchError, match=r"offsets decrease at bag 2 \(feature 1 of table 'ad', sample 0\): "
                                               r"2 -> 1"):
        module(batch([1, 2, 3, 4], [0, 1, 2, 1, 4], 2, 2))


@pytest.mark.parametrize("offsets, feature, table", [
    ([0, 2, 6, 6, 6], 0, "hist"),  # past nnz = 4 (the ids after values' end must not be read)
    ([0, 3, 1, 3, 4], 0, "hist"),  # decreasing inside a feature
    ([0, 1, 3, 2, 4], 1, "clicks"),  # decreasing at the feature boundary (3 -> 2)
])
def test_sequence_lookup_flags_bad_offsets(offsets, feature, table):
    storage = torch.tensor([1, 2, 3, 4, 7, 8, 9])
    bad = JaggedBatch(values=storage[:4], offsets=torch.tensor(offsets), batch_size=2, num_features=2)
    with pytest.raises(JaggedBatchError, match=rf"feature {feature} \(table '{table}', rows 10\): offsets that "
                                               r"decrease or lie outside \[0, nnz\]"):
        make(SEQ).lookup_sequence(bad)


def test_sequence_lookup_past_nnz_reads_and_updates_nothing_outside_values():
    module = make([("hist", 10, 4, "none")])
    module.defer_errors = True  # keep the flags for check_errors: the lookup and its backward run
    before = module.table_weights()[0].clone()
    storage = torch.tensor([1, 2, 3, 7, 8, 9])
    out = module.lookup_sequence(JaggedBatch(values=storage[:3], offsets=torch.tensor([0, 2, 6]), batch_size=2,
                                             num_features=1))
    assert out.shape == (3, 4)  # the feature's range clamped to nnz = 3
    torch.testing.assert_close(out, before[[1, 2, 3]])
    out.sum().backward()
    moved = (module.table_weights()[0] != before).any(1).nonzero().flatten().tolist()
    assert moved == [1, 2]  # bag 0; bag 1 (2 -> 6) is masked
    with pytest.raises(JaggedBatchError, match="feature 0 \\(table 'hist', rows 10\\): offsets that decrease"):
        module.check_errors()


def test_sequence_lookup_of_no_samples_is_empty():
    module = make([("hist", 10, 4, "none")])
    empty = JaggedBatch(values=torch.empty(0, dtype=torch.int64), offsets=torch.zeros(1, dtype=torch.int64),
                        batch_size=0, num_features=1)
    out = module.lookup_sequence(empty)
    assert out.shape == (0, 4) and out.dtype == torch.float32
    out.sum().backward()


@pytest.mark.parametrize("tables, kw, message", [
    ([("ad", 5, 4, "sum"), ("user", 10, 4, "sum")], {}, r"table 0 \('ad'\): name 'user' in the checkpoint, 'ad'"),
    ([("user", 11, 4, "sum"), ("ad", 4, 4, "sum")], {}, r"table 0 \('user'\): rows 10 in the checkpoint, 11"),
    ([("x", 15, 4, "sum")], {}, r"table 0 \('x'\): name 'user'"),  # the same buffer sizes
    ([("user", 10, 4, "sum"), ("ad", 5, 4, "mean")], {}, r"table 1 \('ad'\): pooling 'sum' in the checkpoint"),
    ([("user", 10, 4, "sum")], {}, "2 tables in the checkpoint, 1 in the module"),
    (TWO, {"feature_to_table": [1, 0]}, r"feature_to_table \[0, 1\] in the checkpoint, \[1, 0\] in the module"),
    (TWO, {"weight_dtype": torch.float16}, "weight_dtype 'float32' in the checkpoint, 'float16' in the module"),
])
def test_a_checkpoint_of_another_layout_is_refused_before_anything_is_copied(tables, kw, message):
    saved = make(TWO, optimizer=EmbeddingOptimizer(kind="rowwise_adagrad")).state_dict()
    module = make(tables, optimizer=EmbeddingOptimizer(kind="rowwise_adagrad"), **kw)
    before = module.weights.clone(), module.state1.clone()
    with pytest.raises(ValueError, match="checkpoint of another table layout: " + message):
        module.load_state_dict(saved)
    assert torch.equal(module.weights, before[0]) and torch.equal(module.state1, before[1])


def test_a_checkpoint_loads_with_weights_only_and_one_without_a_layout_still_loads():
    source = make(TWO, seed=3)
    source.step = 5
    buffer = io.BytesIO()
    torch.save(source.state_dict(), buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    module = make(TWO)
    module.load_state_dict(saved)
    assert torch.equal(module.weights, source.weights) and module.step == 5
    older = dict(saved, _extra_state={"step": 5, "optimizer": "sgd"})  # written before the layout was stored
    module = make(TWO)
    module.load_state_dict(older)
    assert torch.equal(module.weights, source.weights) and module.step == 5


def test_output_dtype_is_checked_in_the_constructor():
    with pytest.raises(ValueError, match="output_dtype must be one of .*got torch.float64"):
        make(TWO, output_dtype=torch.float64)
    assert make(TWO, output_dtype=torch.bfloat16)(batch([1, 2], [0, 1, 1, 2, 2], 2, 2)).dtype == torch.bfloat16


def test_per_sample_weights_that_require_grad_are_refused_in_a_trained_lookup():
    module = make(TWO)
    weights = torch.tensor([0.5, 2.0], requires_grad=True)
    weighted = batch([1, 2], [0, 1, 1, 2, 2], 2, 2, weights=weights)
    with pytest.raises(ValueError, match="batch.weights requires grad.*no gradient for per-sample weights"):
        module(weighted)
    with torch.no_grad():
        assert module(weighted).shape == (2, 8)
    detached = batch([1, 2], [0, 1, 1, 2, 2], 2, 2, weights=weights.detach())
    module(detached).sum().backward()
