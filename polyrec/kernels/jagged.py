"""The jagged (multi-hot) sparse input of the embedding kernels, and TorchRec interop.

Layout (the same as TorchRec's ``KeyedJaggedTensor``): ``offsets`` is feature-major, so bag
``f * B + b`` (feature ``f``, sample ``b``) holds ``values[offsets[f*B + b] : offsets[f*B + b + 1]]``.
Each feature's ids are therefore one contiguous range of ``values``.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

INDEX_DTYPES = (torch.int64, torch.int32)
WEIGHT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class JaggedBatchError(ValueError):
    """A malformed batch; the message names the field and, where known, the feature and table."""


def check_offsets_length(offsets: Tensor, num_features: int, batch_size: int) -> None:
    """``offsets`` holds ``F * B + 1`` entries (one bag per feature and sample, then the end), else
    JaggedBatchError: offsets of another batch split the bags between the features at the wrong places."""
    expected = num_features * batch_size + 1
    if offsets.numel() != expected:
        raise JaggedBatchError(f"offsets must have F*B+1 = {num_features}*{batch_size}+1 = {expected} entries, "
                               f"got {offsets.numel()}")


def _feature_name(feature: int, names: Sequence[str] | None, tables: Sequence[str] | None) -> str:
    name = f"feature {feature}"
    if names is not None:
        name += f" ('{names[feature]}')"
    if tables is not None:
        name += f" of table '{tables[feature]}'"
    return name


@dataclass(kw_only=True, slots=True)
class JaggedBatch:
    """Multi-hot ids of ``num_features`` features for ``batch_size`` samples; the tensors must be
    contiguous (the kernels read them packed)."""

    values: Tensor  # [nnz] int64 (int32 accepted): row ids, local to each feature's table
    offsets: Tensor  # [F * B + 1] int64 (int32 accepted): feature-major bag boundaries
    batch_size: int  # B
    num_features: int  # F
    weights: Tensor | None = None  # [nnz] float per-sample weights, or None

    @property
    def nnz(self) -> int:
        return self.values.numel()

    @property
    def device(self) -> torch.device:
        return self.values.device

    @classmethod
    def from_lengths(cls, *, values: Tensor, lengths: Tensor, batch_size: int, num_features: int,
                     weights: Tensor | None = None) -> JaggedBatch:
        """Build from per-bag lengths ``[F * B]`` (feature-major) instead of offsets."""
        if lengths.dim() != 1 or lengths.numel() != batch_size * num_features:
            raise JaggedBatchError(f"lengths must have shape [F*B] = [{batch_size * num_features}], "
                                   f"got {tuple(lengths.shape)}")
        if lengths.dtype not in INDEX_DTYPES:
            raise JaggedBatchError(f"lengths must be int64 or int32, got {lengths.dtype}")
        offsets = torch.zeros(lengths.numel() + 1, dtype=torch.int64, device=lengths.device)
        torch.cumsum(lengths.to(torch.int64), 0, out=offsets[1:])
        return cls(values=values, offsets=offsets, batch_size=batch_size, num_features=num_features,
                   weights=weights)

    def lengths(self) -> Tensor:
        """[F * B] bag sizes."""
        return self.offsets[1:] - self.offsets[:-1]

    def to(self, device: torch.device | str, *, non_blocking: bool = False) -> JaggedBatch:
        move = lambda t: None if t is None else t.to(device, non_blocking=non_blocking)  # noqa: E731
        return JaggedBatch(values=move(self.values), offsets=move(self.offsets), batch_size=self.batch_size,
                           num_features=self.num_features, weights=move(self.weights))

    def validate(self, *, rows: Sequence[int] | None = None, full: bool = False,
                 feature_names: Sequence[str] | None = None, table_names: Sequence[str] | None = None,
                 device: torch.device | None = None) -> None:
        """Raise ``JaggedBatchError`` naming what is wrong.

        The cheap checks (default) read only metadata (dtypes, devices, shapes, contiguity) and never
        wait for the device. ``full=True`` also reads the data: offsets start at 0, never decrease and
        end at nnz, and every id of feature ``f`` lies in ``[0, rows[f])``; it synchronises, so use it
        to debug. ``rows``, ``feature_names`` and ``table_names`` are per feature.
        """
        self._check_metadata(device)
        if full:
            self._check_offsets(feature_names, table_names)
            if rows is not None:
                self._check_ids(rows, feature_names, table_names)

    def _check_metadata(self, device: torch.device | None) -> None:
        for name, size in (("batch_size", self.batch_size), ("num_features", self.num_features)):
            if isinstance(size, bool) or not isinstance(size, numbers.Integral):  # numpy's ints are Integral
                raise JaggedBatchError(f"{name} must be an int, got {size!r} ({type(size).__name__})")
        if self.batch_size < 0 or self.num_features < 0:
            raise JaggedBatchError(f"batch_size and num_features must be >= 0, got {self.batch_size}, "
                                   f"{self.num_features}")
        for name, tensor in (("values", self.values), ("offsets", self.offsets)):
            if tensor.dtype not in INDEX_DTYPES:
                raise JaggedBatchError(f"{name} must be int64 or int32, got {tensor.dtype}")
            if tensor.dim() != 1:
                raise JaggedBatchError(f"{name} must be 1-D, got shape {tuple(tensor.shape)}")
        check_offsets_length(self.offsets, self.num_features, self.batch_size)
        if self.weights is not None:
            if self.weights.dtype not in WEIGHT_DTYPES:
                raise JaggedBatchError(f"weights must be float32, float16 or bfloat16, got {self.weights.dtype}")
            if self.weights.shape != self.values.shape:
                raise JaggedBatchError(f"weights must have the shape of values {tuple(self.values.shape)}, "
                                       f"got {tuple(self.weights.shape)}")
        expected_device = device if device is not None else self.values.device
        for name, tensor in (("values", self.values), ("offsets", self.offsets), ("weights", self.weights)):
            if tensor is None:
                continue
            if tensor.device != torch.device(expected_device):
                raise JaggedBatchError(f"{name} is on {tensor.device}, expected {expected_device}")
            if not tensor.is_contiguous():  # the kernels read element i at base + i
                raise JaggedBatchError(f"{name} must be contiguous, got stride {tensor.stride()[0]}; "
                                       f"pass {name}.contiguous()")

    def _check_offsets(self, feature_names: Sequence[str] | None, table_names: Sequence[str] | None) -> None:
        offsets = self.offsets.to(torch.int64)
        if int(offsets[0]) != 0:
            raise JaggedBatchError(f"offsets[0] must be 0, got {int(offsets[0])}")
        if int(offsets[-1]) != self.nnz:
            raise JaggedBatchError(f"offsets[-1] must equal nnz = {self.nnz}, got {int(offsets[-1])}")
        bad = torch.nonzero(offsets[1:] < offsets[:-1])
        if bad.numel():
            bag = int(bad[0])
            feature, sample = divmod(bag, max(self.batch_size, 1))
            where = _feature_name(feature, feature_names, table_names)
            raise JaggedBatchError(f"offsets decrease at bag {bag} ({where}, sample {sample}): "
                                   f"{int(offsets[bag])} -> {int(offsets[bag + 1])}")

    def _check_ids(self, rows: Sequence[int], feature_names: Sequence[str] | None,
                   table_names: Sequence[str] | None) -> None:
        if len(rows) != self.num_features:
            raise JaggedBatchError(f"rows has {len(rows)} entries, expected one per feature ({self.num_features})")
        bounds = self.offsets[:: max(self.batch_size, 1)].tolist() if self.batch_size else [0] * (self.num_features + 1)
        for feature in range(self.num_features):
            ids = self.values[bounds[feature]: bounds[feature + 1]]
            if not ids.numel():
                continue
            low, high = int(ids.min()), int(ids.max())
            if low < 0 or high >= rows[feature]:
                bad = low if low < 0 else high
                where = bounds[feature] + int(torch.nonzero(ids == bad)[0])
                raise JaggedBatchError(f"{_feature_name(feature, feature_names, table_names)}: id {bad} at "
                                       f"values[{where}] is out of range [0, {rows[feature]})")

    @classmethod
    def from_kjt(cls, kjt, *, keys: Sequence[str] | None = None) -> JaggedBatch:
        """From a TorchRec ``KeyedJaggedTensor`` (optionally reordered to ``keys``)."""
        if keys is not None and list(kjt.keys()) != list(keys):
            missing = [k for k in keys if k not in kjt.keys()]
            if missing:
                raise JaggedBatchError(f"keys {missing} are not in the KeyedJaggedTensor, whose keys are {list(kjt.keys())}")
            kjt = kjt.permute([list(kjt.keys()).index(k) for k in keys])
        num_features = len(kjt.keys())
        lengths = kjt.lengths()
        batch_size = lengths.numel() // max(num_features, 1)
        return cls.from_lengths(values=kjt.values(), lengths=lengths, batch_size=batch_size,
                                num_features=num_features, weights=kjt.weights_or_none())

    def to_kjt(self, keys: Sequence[str]):
        """To a TorchRec ``KeyedJaggedTensor`` with the given feature names (needs torchrec)."""
        if len(keys) != self.num_features:
            raise JaggedBatchError(f"{len(keys)} keys for {self.num_features} features")
        try:
            from torchrec.sparse.jagged_tensor import KeyedJaggedTensor
        except ModuleNotFoundError as err:
            if err.name != "torchrec":  # torchrec is there but lacks something of its own
                raise
            raise ImportError("JaggedBatch.to_kjt needs torchrec, an optional extra of polyrec that is not "
                              "installed (pip install polyrec[torchrec])") from err
        return KeyedJaggedTensor(keys=list(keys), values=self.values, weights=self.weights,
                                 lengths=self.lengths())
