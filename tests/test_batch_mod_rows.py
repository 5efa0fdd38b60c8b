"""A batch whose ids are taken mod their tables' rows where it lands (``Batch.mod_rows``): the multi-hot reader's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from polyrec.data.types import Batch, feature_remainders

CPU = torch.device("cpu")


def raw_batch(seed: int, rows: list[int], hots: list[int], b: int, dtype: torch.dtype = torch.int32) -> Batch:
    """A feature-major batch of ``b`` samples, feature f's bags ``hots[f]`` ids in [0, 2^31) as read."""
    g = torch.Generator().manual_seed(seed)
    n = b * sum(hots)
    lengths = torch.tensor(hots).repeat_interleave(b)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    return Batch(dense=torch.randn(b, 3, generator=g), values=torch.randint(0, 2**31 - 1, (n,), generator=g,
                                                                            dtype=dtype),
                 offsets=offsets, labels=torch.randint(0, 2, (b,), generator=g).float(),
                 mod_rows=torch.tensor(rows, dtype=torch.int64))


def exact(batch: Batch) -> torch.Tensor:
    """Each id mod its feature's rows, one by one in Python."""
    bounds = batch.host_bounds()
    rows = batch.mod_rows.tolist()
    return torch.tensor([v % rows[next(f for f in range(len(rows)) if bounds[f] <= i < bounds[f + 1])]
                         for i, v in enumerate(batch.values.tolist())], dtype=torch.int64)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_to_takes_each_feature_s_ids_mod_its_rows_and_keeps_the_rest(dtype):
    batch = raw_batch(0, [7, 1, 2**40, 1000], [3, 1, 2, 5], 9, dtype)
    landed = batch.to(CPU)
    assert landed.values.dtype == torch.int64 and landed.mod_rows is None
    assert torch.equal(landed.values, exact(batch))
    assert landed.feature_bounds == (0, 27, 36, 54, 99)
    for name in ("dense", "offsets", "labels"):
        assert torch.equal(getattr(landed, name), getattr(batch, name))
    assert batch.values.dtype == dtype and batch.mod_rows is not None  # the host batch is left as read


def test_features_of_no_ids_between_others_leave_every_id_written():
    batch = raw_batch(2, [6, 2**31 - 1, 2**31, 9, 1], [2, 0, 3, 0, 4], 5)  # 2^31 - 1 fits int32, 2^31 does not
    assert torch.equal(batch.to(CPU).values, exact(batch))


def test_padding_and_pinning_keep_the_ids_to_take_mod():
    batch = raw_batch(1, [5, 3], [2, 1], 4)
    padded = batch.padded(6)
    assert torch.equal(padded.to(CPU).values, exact(batch))  # the padding's bags are empty: the same ids
    if torch.cuda.is_available():
        assert torch.equal(batch.pinned().to(CPU).values, exact(batch))


def test_a_batch_of_no_samples_lands_with_no_ids():
    batch = Batch(dense=torch.zeros(0, 3), values=torch.zeros(0, dtype=torch.int32),
                  offsets=torch.zeros(1, dtype=torch.int64), labels=torch.zeros(0),
                  mod_rows=torch.tensor([4, 5]))
    landed = batch.to(CPU)
    assert landed.values.dtype == torch.int64 and landed.values.numel() == 0


def test_feature_remainders_refuse_bounds_that_do_not_describe_the_ids():
    values = torch.arange(10, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"bounds \[0, 4, 9\] \(2 features\) and 2 table sizes do not describe "
                                         "10 ids"):
        feature_remainders(values, torch.tensor([3, 4]), (0, 4, 9))
    with pytest.raises(ValueError, match="3 table sizes"):
        feature_remainders(values, torch.tensor([3, 4, 5]), (0, 4, 10))
    np.testing.assert_array_equal(feature_remainders(values, torch.tensor([3, 4]), (0, 4, 10)).numpy(),
                                  [0, 1, 2, 0, 0, 1, 2, 3, 0, 1])
