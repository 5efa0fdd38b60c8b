"""JaggedBatch: construction, validation (cheap and full), TorchRec conversion when installed."""

from __future__ import annotations

import pytest
import torch

from polyrec.kernels.jagged import JaggedBatch, JaggedBatchError


def test_from_lengths_is_feature_major():
    b = JaggedBatch.from_lengths(values=torch.arange(6), lengths=torch.tensor([1, 0, 2, 3]), batch_size=2,
                                 num_features=2)
    assert b.offsets.tolist() == [0, 1, 1, 3, 6]
    assert b.lengths().tolist() == [1, 0, 2, 3] and b.nnz == 6
    b.validate(rows=[10, 10], full=True)


def test_full_validation_names_feature_and_table():
    b = JaggedBatch.from_lengths(values=torch.tensor([0, 1, 7]), lengths=torch.tensor([1, 1, 1, 0]), batch_size=2,
                                 num_features=2)
    b.validate(rows=[5, 5])  # cheap: ids are not read
    with pytest.raises(JaggedBatchError, match="feature 1 \\('f1'\\) of table 'small': id 7 at values\\[2\\]"):
        b.validate(rows=[5, 5], full=True, feature_names=["f0", "f1"], table_names=["big", "small"])
    bad = JaggedBatch(values=torch.arange(3), offsets=torch.tensor([0, 2, 1, 3, 3]), batch_size=2, num_features=2)
    with pytest.raises(JaggedBatchError, match="offsets decrease at bag 1 \\(feature 0, sample 1\\)"):
        bad.validate(full=True)
    with pytest.raises(JaggedBatchError, match="offsets decrease at bag 1 \\(feature 0 of table 'big', sample 1\\)"):
        bad.validate(full=True, table_names=["big", "small"])
    short = JaggedBatch(values=torch.arange(3), offsets=torch.tensor([0, 1, 1, 2, 2]), batch_size=2, num_features=2)
    with pytest.raises(JaggedBatchError, match="offsets\\[-1\\] must equal nnz"):
        short.validate(full=True)
    with pytest.raises(JaggedBatchError, match="weights must have the shape"):
        JaggedBatch(values=torch.arange(3), offsets=torch.tensor([0, 1, 1, 3, 3]), batch_size=2, num_features=2,
                    weights=torch.ones(2)).validate()


def test_cheap_validation_refuses_strided_tensors():
    """The kernels read element i at base + i: a strided view would be read as if packed."""
    offsets, strided = torch.tensor([0, 1, 2, 3, 4]), torch.arange(8)[::2]
    JaggedBatch(values=strided.contiguous(), offsets=offsets, batch_size=2, num_features=2).validate()
    with pytest.raises(JaggedBatchError, match=r"values must be contiguous, got stride 2; pass values.contiguous\(\)"):
        JaggedBatch(values=strided, offsets=offsets, batch_size=2, num_features=2).validate()
    with pytest.raises(JaggedBatchError, match="offsets must be contiguous, got stride 2"):
        JaggedBatch(values=strided.contiguous(), offsets=torch.arange(10)[::2], batch_size=2,
                    num_features=2).validate()
    with pytest.raises(JaggedBatchError, match="weights must be contiguous, got stride 3"):
        JaggedBatch(values=strided.contiguous(), offsets=offsets, batch_size=2, num_features=2,
                    weights=torch.rand(12)[::3]).validate()


def test_kjt_round_trip():
    pytest.importorskip("torchrec")
    b = JaggedBatch.from_lengths(values=torch.arange(5), lengths=torch.tensor([2, 0, 1, 2]), batch_size=2,
                                 num_features=2, weights=torch.rand(5))
    back = JaggedBatch.from_kjt(b.to_kjt(["a", "b"]))
    assert torch.equal(back.values, b.values) and torch.equal(back.offsets, b.offsets)
    assert torch.equal(back.weights, b.weights) and back.batch_size == 2
