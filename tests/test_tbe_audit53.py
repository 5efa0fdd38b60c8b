"""TableBatchedEmbedding and JaggedBatch as a user meets them (audit 53), through the Triton interpreter:
a module moved to another device after a lookup, and the refusal of per-sample weights of a float dtype
the kernels do not read."""

from __future__ import annotations

import pytest
import torch

from polyrec.kernels.jagged import JaggedBatch, JaggedBatchError
from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec

TABLES = [TableSpec(name="user", rows=5, dim=3), TableSpec(name="ad", rows=4, dim=2, pooling="mean")]


def small_batch(**kw) -> JaggedBatch:
    return JaggedBatch.from_lengths(values=torch.tensor([1, 2, 0, 3]), lengths=torch.tensor([1, 2, 0, 1]),
                                    batch_size=2, num_features=2, **kw)


def _tensors(held) -> list[torch.Tensor]:
    """The tensors inside a cached value (a config, a plan: lists of (launch, feature ids) pairs)."""
    if isinstance(held, torch.Tensor):
        return [held]
    if isinstance(held, (list, tuple)):
        return [t for item in held for t in _tensors(item)]
    return []


def test_a_move_after_a_lookup_keeps_no_launch_tensor_on_the_old_device():
    """The forward's plans held their feature ids as tensors of the device they were made on, and the
    configs were selected for that device: after ``.to(device)`` the next lookup launched with tensors
    of the old device (and the old device's configs)."""
    module = TableBatchedEmbedding(TABLES, optimizer=EmbeddingOptimizer(kind="sgd", lr=0.1))
    module(small_batch()).sum().backward()  # plans the forward and selects the update on the CPU
    module.to("meta")
    held = [*_tensors(list(module._configs.values())), module._pooled_ids, module._sequence_ids]
    assert {t.device.type for t in held} == {"meta"}


def test_per_sample_weights_of_another_float_dtype_are_refused_naming_the_dtypes_read():
    """float64 weights were refused as "not a float tensor"."""
    module = TableBatchedEmbedding(TABLES, optimizer=EmbeddingOptimizer(kind="sgd", lr=0.1))
    with pytest.raises(JaggedBatchError, match=r"weights must be float32, float16 or bfloat16, got torch.float64"):
        module(small_batch(weights=torch.ones(4, dtype=torch.float64)))
