"""TableBatchedEmbedding and JaggedBatch used directly from Python, as a library user meets them (user audit),
through the Triton interpreter: integer fields given as numpy / tensor integers (checkpoints must still load
with ``torch.load(weights_only=True)``), specs of the wrong type or value refused naming the field, duplicate
table names, and ``prepare_backward``'s checks of a batch."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from polyrec.kernels.jagged import JaggedBatch, JaggedBatchError
from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec

SGD = EmbeddingOptimizer(kind="sgd", lr=0.1)


def reload(module: TableBatchedEmbedding) -> dict:
    """``module``'s state_dict through torch.save and torch.load(weights_only=True)."""
    buffer = io.BytesIO()
    torch.save(module.state_dict(), buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@pytest.mark.parametrize("kind", ["numpy", "tensor"])
def test_a_checkpoint_of_a_module_built_from_numpy_or_tensor_integers_loads_with_weights_only(kind):
    """Rows, dims and feature_to_table read from numpy arrays went into the checkpoint's layout as numpy
    scalars, which torch.load(weights_only=True) (torch's default) refused."""
    as_int = np.int64 if kind == "numpy" else torch.tensor
    tables = [TableSpec(name=np.str_("user"), rows=as_int(6), dim=as_int(4)), TableSpec(name="ad", rows=5, dim=4)]
    module = TableBatchedEmbedding(tables, optimizer=SGD, feature_to_table=[as_int(0), as_int(1), as_int(1)])
    state = reload(module)
    twin = TableBatchedEmbedding([TableSpec(name="user", rows=6, dim=4), TableSpec(name="ad", rows=5, dim=4)],
                                 optimizer=SGD, feature_to_table=[0, 1, 1], seed=1)
    twin.load_state_dict(state)
    assert torch.equal(twin.weights, module.weights)


@pytest.mark.parametrize("as_int", [np.int64, torch.tensor])
def test_a_numpy_or_tensor_seed_builds_the_same_module_and_checkpoint_as_an_int(as_int):
    """torch.Generator.manual_seed refused it ("manual_seed expected a long")."""
    tables = [TableSpec(name="user", rows=6, dim=4)]
    module = TableBatchedEmbedding(tables, optimizer=SGD, seed=as_int(3))
    assert torch.equal(module.weights, TableBatchedEmbedding(tables, optimizer=SGD, seed=3).weights)
    assert reload(module)["_extra_state"]["seed"] == 3


@pytest.mark.parametrize("field, value", [("rows", 3.5), ("dim", 4.0), ("rows", True), ("dim", "4")])
def test_a_table_size_that_is_not_an_integer_is_refused_naming_the_table_and_field(field, value):
    """A float dim failed inside triton.next_power_of_2 (">> for float"), a float row count in torch.empty."""
    sizes = {"rows": 3, "dim": 4, field: value}
    with pytest.raises(TypeError, match=rf"table 'user': {field} must be an integer, got {value!r}"):
        TableSpec(name="user", **sizes)


@pytest.mark.parametrize("name", ["", 7, None])
def test_a_table_name_that_is_not_a_non_empty_string_is_refused(name):
    with pytest.raises(ValueError, match="table name must be a non-empty string"):
        TableSpec(name=name, rows=3, dim=4)


def test_duplicate_table_names_are_refused():
    """Error messages and checkpoints name tables; two tables of one name made both ambiguous."""
    with pytest.raises(ValueError, match="table name 'user' is used by 2 tables"):
        TableBatchedEmbedding([TableSpec(name="user", rows=3, dim=4), TableSpec(name="user", rows=5, dim=8)],
                              optimizer=SGD)


@pytest.mark.parametrize("value", [0.0, True])
def test_a_feature_to_table_entry_that_is_not_an_integer_is_refused(value):
    """0.0 failed as a list index deep in the layout; True was taken as table 1."""
    tables = [TableSpec(name="user", rows=3, dim=4), TableSpec(name="ad", rows=5, dim=4)]
    with pytest.raises(TypeError, match=r"feature_to_table\[0\] must be an integer"):
        TableBatchedEmbedding(tables, optimizer=SGD, feature_to_table=[value])


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), -0.5])
def test_an_init_scale_that_is_not_finite_and_non_negative_is_refused_naming_it(scale):
    """torch's uniform_ raised "from is out of bounds for float" (NaN) or "from=0.5 > to=-0.5"."""
    with pytest.raises(ValueError, match="init_scale must be finite and >= 0"):
        TableBatchedEmbedding([TableSpec(name="user", rows=3, dim=4)], optimizer=SGD, init_scale=scale)


@pytest.mark.parametrize("batch_size", [2.0, None])
def test_a_batch_size_that_is_not_an_integer_is_refused_by_the_cheap_checks(batch_size):
    """A float batch size failed in torch.empty inside the lookup ("empty() takes 1 positional argument")."""
    module = TableBatchedEmbedding([TableSpec(name="user", rows=10, dim=4)], optimizer=SGD)
    batch = JaggedBatch(values=torch.tensor([1, 2]), offsets=torch.tensor([0, 1, 2]), batch_size=batch_size,
                        num_features=1)
    with pytest.raises(JaggedBatchError, match="batch_size must be an int"):
        module(batch)


@pytest.mark.parametrize("bad, message", [
    (dict(values=torch.tensor([1.0, 2.0, 3.0, 4.0])), "values must be int64 or int32"),
    (dict(offsets=torch.tensor([0, 1, 2])), r"offsets must have F\*B\+1"),
    (dict(values=torch.tensor([1, 0, 2, 0, 3, 0, 4, 0])[::2]), "values must be contiguous"),
    (dict(num_features=3), "batch has 3 features, module has 2"),
])
def test_prepare_backward_refuses_a_malformed_batch_before_launch(bad, message):
    """prepare_backward launched its kernels on any batch: float ids were sorted as their bit patterns, a short
    offsets failed with an IndexError (on a GPU: read past the tensor)."""
    module = TableBatchedEmbedding([TableSpec(name="user", rows=10, dim=4), TableSpec(name="ad", rows=5, dim=4)],
                                   optimizer=SGD)
    fields = dict(values=torch.tensor([1, 2, 3, 4]), offsets=torch.tensor([0, 1, 2, 3, 4]), batch_size=2,
                  num_features=2)
    with pytest.raises(JaggedBatchError, match=message):
        module.prepare_backward(JaggedBatch(**{**fields, **bad}))


@pytest.mark.parametrize("kind", ["rowwise_adagrad", "adagrad", "adam"])
def test_eps_zero_with_a_state_starting_at_zero_is_refused(kind):
    """eps=0 was accepted: a row whose first gradient is 0 (a zero per-sample weight) divided 0 by 0 and the
    row turned NaN in silence."""
    with pytest.raises(ValueError, match="eps 0 with a state that starts at 0"):
        EmbeddingOptimizer(kind=kind, lr=0.1, eps=0.0)


def test_eps_zero_trains_where_the_state_cannot_be_zero():
    """SGD has no denominator and Adagrad's starting sum of squares above 0 keeps it from 0: both still run."""
    for optim in (EmbeddingOptimizer(kind="sgd", lr=0.1, eps=0.0),
                  EmbeddingOptimizer(kind="rowwise_adagrad", lr=0.1, eps=0.0, initial_accumulator_value=0.1)):
        module = TableBatchedEmbedding([TableSpec(name="user", rows=10, dim=4)], optimizer=optim)
        batch = JaggedBatch(values=torch.tensor([1, 2]), offsets=torch.tensor([0, 1, 2]), batch_size=2,
                            num_features=1, weights=torch.tensor([0.0, 1.0]))
        module(batch).sum().backward()
        assert torch.isfinite(module.weights).all(), optim
