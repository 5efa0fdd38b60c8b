"""What every data source yields (:class:`Batch`), how it reports bad input, and its resumable interface."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch

from polyrec.models.config import ModelConfig


@dataclass(kw_only=True, slots=True)
class Batch:
    """One training batch in the feature-major jagged layout of TorchRec's KeyedJaggedTensor."""

    dense: torch.Tensor  # [B, num_dense] float32, already transformed (log1p for Criteo counts)
    values: torch.Tensor  # [nnz] int64, row indices, feature-major
    offsets: torch.Tensor  # [F*B+1] int64; bag (f, b) is values[offsets[f*B+b]:offsets[f*B+b+1]]
    labels: torch.Tensor  # [B] float32 in {0, 1}

    @property
    def batch_size(self) -> int:
        return self.dense.shape[0]

    @property
    def num_features(self) -> int:
        return (self.offsets.numel() - 1) // self.batch_size

    def to(self, device: torch.device, non_blocking: bool = False) -> Batch:
        return Batch(dense=self.dense.to(device, non_blocking=non_blocking),
                     values=self.values.to(device, non_blocking=non_blocking),
                     offsets=self.offsets.to(device, non_blocking=non_blocking),
                     labels=self.labels.to(device, non_blocking=non_blocking))


class DataError(ValueError):
    """A malformed input row, named by file and line."""

    def __init__(self, path: str, line: int, problem: str) -> None:
        super().__init__(f"{path}:{line}: {problem}")
        self.path, self.line, self.problem = path, line, problem


@dataclass(kw_only=True, slots=True)
class BadRows:
    """Malformed rows skipped under ``--skip-bad-rows``: how many, and the first few for the report."""

    skip: bool  # False: the first bad row raises DataError
    count: int = 0
    examples: list[str] = field(default_factory=list)  # "file:line: problem", at most MAX_EXAMPLES

    MAX_EXAMPLES = 5

    def handle(self, error: DataError) -> None:
        """Raise ``error``, or count it when skipping."""
        if not self.skip:
            raise error
        self.count += 1
        if len(self.examples) < self.MAX_EXAMPLES:
            self.examples.append(str(error))


class Source(Protocol):
    """A deterministic, resumable stream of batches."""

    bad_rows: BadRows

    def adapt(self, config: ModelConfig) -> ModelConfig:
        """The model config with the table sizes and dense width this data needs."""

    def next_batch(self) -> Batch:
        """The next training batch (full size; streams wrap around into the next epoch)."""

    def eval_batches(self) -> list[Batch] | None:
        """The held-out batches to measure AUC on, or None when the source has none."""

    def state_dict(self) -> dict:
        """The stream position (plain ints), enough to continue exactly where it stopped."""

    def load_state_dict(self, state: dict) -> None:
        ...


def offsets_from_lengths(lengths: torch.Tensor) -> torch.Tensor:
    """lengths [F*B] (feature-major) -> offsets [F*B+1] int64."""
    offsets = torch.zeros(lengths.numel() + 1, dtype=torch.int64, device=lengths.device)
    torch.cumsum(lengths, 0, out=offsets[1:])
    return offsets
