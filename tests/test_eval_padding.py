"""A short held-out batch padded to the training batch (``Batch.padded``), so the first evaluation runs the
kernels the precompile's dry evaluation compiled at the full size (``Trainer.evaluate``; the GPU side:
tests/gpu/test_cold_start_gpu.py)."""

from __future__ import annotations

import torch

from polyrec.data import open_source
from polyrec.models import DLRM, preset
from polyrec.runtime import TrainConfig, Trainer

CONFIG = preset("dcnv2-small").with_capped_rows(64)


def _batch(size: int, seed: int = 0):
    return open_source("synthetic", CONFIG, batch_size=size, seed=seed, device=torch.device("cpu")).next_batch()


def test_padded_keeps_every_bag_and_adds_empty_ones():
    batch = _batch(5)
    padded = batch.padded(8)
    features = batch.num_features
    assert padded.batch_size == 8 and padded.num_features == features
    assert torch.equal(padded.values, batch.values) and torch.equal(padded.dense[:5], batch.dense)
    assert not padded.dense[5:].any() and not padded.labels[5:].any()
    for f in range(features):
        for b in range(8):
            got = padded.values[padded.offsets[f * 8 + b]:padded.offsets[f * 8 + b + 1]]
            want = (batch.values[batch.offsets[f * 5 + b]:batch.offsets[f * 5 + b + 1]] if b < 5
                    else batch.values[:0])
            assert torch.equal(got, want), (f, b)
    assert batch.padded(5) is batch and batch.padded(3) is batch


def test_a_padded_batch_gives_each_sample_its_own_logit():
    """No sample of a DLRM sees another: the padded forward's first logits are the short batch's own."""
    model = DLRM(CONFIG, embedding_backend="torch", dense_backend="torch", device=torch.device("cpu"), seed=0)
    batch = _batch(5, seed=3)
    with torch.no_grad():
        alone = model(batch.dense, batch.values, batch.offsets, torch.float32)
        padded = batch.padded(16)
        within = model(padded.dense, padded.values, padded.offsets, torch.float32)[:5]
    torch.testing.assert_close(within, alone, rtol=1e-5, atol=1e-6)


def test_evaluate_pads_a_short_last_batch_and_scores_only_its_samples():
    trainer = Trainer(TrainConfig(preset="dcnv2-small", data="synthetic", batch_size=16, steps=1, row_cap=64,
                                  device="cpu", cpu_threads=1), progress=False)
    held_out = [_batch(16, seed=5), _batch(7, seed=6)]
    trainer.source.eval_batches = lambda: held_out
    sizes = []
    eval_logits = trainer.eval_logits
    trainer.eval_logits = lambda b: sizes.append(b.batch_size) or eval_logits(b)
    result = trainer.evaluate()
    assert sizes == [16, 16] and result["samples"] == 23
