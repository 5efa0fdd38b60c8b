"""Synthetic Criteo-like batches, generated on the device, labelled by a hidden model.

Batch ``i`` is a pure function of (seed, stream, i): resuming needs only the batch counter, and any
batch can be regenerated. Categorical indices follow the model's table sizes and multi-hot sizes
(MLPerf's for ``mlperf-dcnv2``), uniform or power-law ("Zipf") distributed. Labels are drawn from a
fixed hidden model, logistic in (dense features, a pseudo-random value per table row), so a model
that learns shows an AUC above 0.5 and a perfect one reaches the hidden model's own AUC. The hidden
model comes from ``model_seed``, which all ranks share: every rank's labels follow one model, while
each rank draws its own batches from its own ``seed``.
"""

from __future__ import annotations

import math

import torch

from polyrec.data.types import Batch, BadRows, Closing, offsets_from_lengths
from polyrec.models.config import ModelConfig

#: Prime modulus of the per-row hash (2^31 - 1, a Mersenne prime): products stay below 2^62 in int64.
HASH_PRIME = 2_147_483_647
#: Odd multiplier of the per-row hash (the 32-bit golden-ratio constant 0x9E3779B9, cut to 31 bits).
HASH_MULTIPLIER = 0x1E3779B9
#: Default power-law exponent of "zipf" indices; 1.05 is the skew commonly used for Criteo-like
#: synthetic embedding traffic (FBGEMM's TBE benchmark ``--alpha`` values are 1.0-1.2).
DEFAULT_ZIPF_ALPHA = 1.05
#: The id distributions synthetic data draws (``synthetic:<name>``); the first is what plain ``synthetic`` draws.
DISTRIBUTIONS = ("zipf", "uniform")
#: Hidden-model weights: dense and categorical parts each have logit std about this, chosen so the
#: hidden model's own AUC is about 0.8 (measured by tests/test_data_synthetic.py).
HIDDEN_PART_STD = 1.0
#: Hidden-model intercept: sigmoid(-1.0) gives a click rate near 0.3, Kaggle-Criteo-like (about 0.26).
HIDDEN_INTERCEPT = -1.0
#: Std of the log of synthetic dense counts: counts = floor(exp(N(0, 1.5^2))), spanning 0 to ~100s,
#: a made-up but Criteo-like range (Criteo's integer features are counts, most small, a long tail).
DENSE_LOG_STD = 1.5
#: Samples used once to standardize the dense features inside the hidden model.
DENSE_REFERENCE_SAMPLES = 65_536
TRAIN_STREAM, EVAL_STREAM = 0, 1


def row_hash(table: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """A pseudo-random value in [-1, 1) for each (table, row); table, rows int64 [n] -> float32 [n]."""
    x = (rows * HASH_MULTIPLIER + (table + 1) * 1_000_003) % HASH_PRIME
    x = (x * x + table) % HASH_PRIME
    return (x.to(torch.float64) / HASH_PRIME * 2.0 - 1.0).float()


def power_law_rows(u: torch.Tensor, rows: torch.Tensor, alpha: float) -> torch.Tensor:
    """Inverse CDF of a continuous power law x^-alpha on [1, rows+1): u float64 [n] -> row int64 [n]."""
    if abs(alpha - 1.0) < 1e-9:
        x = torch.exp(u * torch.log(rows + 1.0))
    else:
        x = ((torch.pow(rows + 1.0, 1.0 - alpha) - 1.0) * u + 1.0).pow(1.0 / (1.0 - alpha))
    return torch.minimum(x.floor().long() - 1, rows.long() - 1).clamp_(min=0)


class SyntheticSource(Closing):
    """Criteo-like batches of one model config: ``num_dense`` counts, ``multi_hot[f]`` lookups per feature."""

    eval_rows_per_rank = True  # eval batches from each rank's own seed

    def __init__(self, config: ModelConfig, *, batch_size: int, seed: int = 0, device: torch.device | str = "cpu",
                 distribution: str = "zipf", alpha: float = DEFAULT_ZIPF_ALPHA, num_eval_batches: int = 8,
                 pool: int = 0, model_seed: int | None = None) -> None:
        """``seed``: the batch stream (one per rank); ``model_seed``: the hidden labelling model, the same
        on every rank (None: ``seed``, as in one process)."""
        if distribution not in DISTRIBUTIONS:
            raise ValueError(f"synthetic distribution must be {' or '.join(map(repr, DISTRIBUTIONS))}, got "
                             f"{distribution!r}")
        self.config, self.batch_size, self.seed = config, batch_size, seed
        self.device = torch.device(device)
        self.distribution, self.alpha, self.num_eval_batches = distribution, alpha, num_eval_batches
        self.pool = pool  # > 0: training batches repeat with this period (benchmarks), made at the end of __init__
        self.bad_rows, self.eval_bad_rows = BadRows(skip=False), None
        self.position = 0
        b, hot = batch_size, torch.tensor(config.multi_hot)
        lengths = hot.repeat_interleave(b)  # [F*B] feature-major
        offsets = offsets_from_lengths(lengths)
        self.bounds = tuple(offsets[::b].tolist()) if b else None  # the same every batch (Batch.feature_bounds)
        self.offsets = offsets.to(self.device)
        rows = torch.tensor(config.table_rows, dtype=torch.float64)
        self.elem_rows = rows.repeat_interleave(hot * b).to(self.device)  # [nnz] table size of each lookup
        self.feature_sizes = (hot * b).tolist()  # lookups of each feature in a batch (contiguous, feature-major)
        self.elem_table = torch.arange(len(hot)).repeat_interleave(hot * b).to(self.device)  # [nnz]
        model_seed = seed if model_seed is None else model_seed
        gen = torch.Generator().manual_seed(model_seed)
        self.dense_w = (torch.randn(config.num_dense, generator=gen) * HIDDEN_PART_STD
                        / math.sqrt(config.num_dense)).to(self.device)  # [num_dense]
        self.table_w = (torch.randn(len(hot), generator=gen) * HIDDEN_PART_STD
                        / math.sqrt(len(hot))).to(self.device)  # [F]
        ref = self._dense(torch.Generator().manual_seed(model_seed), DENSE_REFERENCE_SAMPLES)
        self.dense_mean, self.dense_std = ref.mean(0).to(self.device), ref.std(0).to(self.device)  # [num_dense]
        self.bag_scale = (1.0 / hot.float().sqrt()).repeat_interleave(b).to(self.device)  # [F*B]
        # the pool's batches made before any step, so that a timed step never pays for making one
        self._pool = [self.batch(TRAIN_STREAM, key) for key in range(pool)]

    def adapt(self, config: ModelConfig) -> ModelConfig:
        return config

    def _generator(self, stream: int, index: int) -> torch.Generator:
        seed = (self.seed * 1_000_003 + stream * 998_244_353 + index * 7_919) % (2**63 - 1)
        return torch.Generator(device=self.device).manual_seed(seed)

    def batch(self, stream: int, index: int) -> Batch:
        """Batch ``index`` of ``stream`` (TRAIN_STREAM or EVAL_STREAM)."""
        gen, b, dev = self._generator(stream, index), self.batch_size, self.device
        dense = self._dense(gen, b)  # [B, num_dense]
        u = torch.rand(self.elem_rows.shape, generator=gen, device=dev, dtype=torch.float64)
        if self.distribution == "uniform":
            values = torch.minimum((u * self.elem_rows).long(), self.elem_rows.long() - 1)
        else:
            values = power_law_rows(u, self.elem_rows, self.alpha)  # [nnz]
        logits = self._hidden_logits(dense, values)
        labels = (torch.rand(b, generator=gen, device=dev) < torch.sigmoid(logits)).float()
        return Batch(dense=dense, values=values, offsets=self.offsets, labels=labels, feature_bounds=self.bounds)

    def _dense(self, gen: torch.Generator, batch_size: int) -> torch.Tensor:
        """Log-normal counts, log1p-transformed as Criteo's dense features are -> [B, num_dense]."""
        shape = (batch_size, self.config.num_dense)
        counts = torch.exp(torch.randn(shape, generator=gen, device=gen.device) * DENSE_LOG_STD).floor()
        return torch.log1p(counts)

    def _hidden_logits(self, dense: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """The hidden model: standardized dense features and per-row hash values, weighted. -> [B]."""
        num_f = len(self.config.multi_hot)
        h = row_hash(self.elem_table, values)  # [nnz]
        # fixed bag sizes: feature f's lookups are a [B, hot_f] block; summing rows is deterministic on a GPU
        bags = torch.cat([part.view(self.batch_size, -1).sum(1) for part in h.split(self.feature_sizes)])  # [F*B]
        cat = (bags * self.bag_scale).view(num_f, self.batch_size) * self.table_w[:, None]  # [F, B]
        z = (dense - self.dense_mean) / self.dense_std
        return HIDDEN_INTERCEPT + z @ self.dense_w + cat.sum(0) * math.sqrt(3.0)

    def next_batch(self) -> Batch:
        """Training batch number ``position``; with a pool, batch ``position % pool`` (made in ``__init__``)."""
        batch = self._pool[self.position % self.pool] if self.pool else self.batch(TRAIN_STREAM, self.position)
        self.position += 1
        return batch

    def eval_batches(self) -> list[Batch]:
        return [self.batch(EVAL_STREAM, i) for i in range(self.num_eval_batches)]

    def state_dict(self) -> dict:
        return {"position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.position = int(state["position"])
