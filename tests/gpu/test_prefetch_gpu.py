"""On the GPU machine: a file source read ahead for a CUDA device (``open_source(prefetch=True)``: ``Prefetching`` with
``pin`` and ``device``) hands over batches already on the device, equal to the unwrapped source's moved there; read
ahead with ``pin`` alone, page-locked batches; training on them loses nothing: the same losses as without prefetch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from polyrec.data import Prefetching, open_source
from polyrec.models.config import dcnv2_small
from polyrec.runtime import TrainConfig, Trainer

pytestmark = pytest.mark.gpu

CRITEO = Path(__file__).parent.parent / "data" / "criteo_sample.tsv"
CUDA = torch.device("cuda")
FIELDS = ("dense", "values", "offsets", "labels")


def _source(prefetch: bool):
    config = dcnv2_small().with_capped_rows(64)
    return open_source(f"criteo:{CRITEO}", config, batch_size=8, seed=0, device=CUDA, prefetch=prefetch)


def test_batches_read_ahead_for_cuda_land_on_it_equal_to_the_unwrapped_source_s():
    ahead, plain = _source(prefetch=True), _source(prefetch=False)
    assert isinstance(ahead, Prefetching) and ahead.device == CUDA
    try:
        for _ in range(12):  # past the sample file's end: the next epoch too
            got, want = ahead.next_batch(), plain.next_batch().to(CUDA)
            for name in FIELDS:
                a, b = getattr(got, name), getattr(want, name)
                assert a.is_cuda and torch.equal(a, b), name
    finally:
        ahead.close()
        plain.close()


def test_batches_read_ahead_pinned_alone_are_page_locked_and_the_same():
    ahead, plain = Prefetching(_source(prefetch=False), pin=True), _source(prefetch=False)
    try:
        for _ in range(12):
            got, want = ahead.next_batch(), plain.next_batch()
            for name in FIELDS:
                a, b = getattr(got, name), getattr(want, name)
                assert a.is_pinned() and torch.equal(a, b), name
            landed = got.to(CUDA, non_blocking=True)  # the ids taken mod their rows on the GPU (``Batch.mod_rows``)
            assert torch.equal(landed.values.cpu(), want.to(torch.device("cpu")).values)
    finally:
        ahead.close()
        plain.close()


def test_training_with_pinned_prefetch_gives_the_same_losses():
    losses = {}
    for prefetch in (True, False):
        trainer = Trainer(TrainConfig(preset="dcnv2-small", data=f"criteo:{CRITEO}", batch_size=8, steps=6,
                                      row_cap=64, device="cuda", prefetch=prefetch, log_every=1, cuda_graphs=False),
                          progress=False)
        losses[prefetch] = [float(trainer.train_step()) for _ in range(6)]
        trainer.source.close()
    assert losses[True] == losses[False]


def test_multi_hot_ids_read_ahead_are_built_page_locked_and_not_copied_again(tmp_path, monkeypatch):
    """A multi-hot reader read ahead for CUDA writes its ids into page-locked memory (``build_pinned``): pinned alone,
    the batch taken holds that very buffer (``Batch.pinned`` copied the rest), equal to an unwrapped source's ids;
    moved to the GPU by the read-ahead thread, its ids are taken mod their rows there and equal the CPU's
    remainders."""
    import sys

    from polyrec.data import multihot

    sys.path.insert(0, str(Path(__file__).parent.parent))
    from test_data_mlperf_multihot import write_day

    write_day(tmp_path, 0, 64, seed=4)
    built = []
    build = multihot.multi_hot_batch

    def spied(*args, **kwargs):
        batch = build(*args, **kwargs)
        built.append(batch.values.data_ptr())
        return batch

    monkeypatch.setattr(multihot, "multi_hot_batch", spied)
    spec, config = f"mlperf:{tmp_path / 'day_0_sparse_multi_hot.npz'}", dcnv2_small().with_capped_rows(64)
    pinned = Prefetching(open_source(spec, config, batch_size=16, seed=0, device=CUDA), pin=True)
    landed = open_source(spec, config, batch_size=16, seed=0, device=CUDA, prefetch=True)
    plain = open_source(spec, config, batch_size=16, seed=0, device=CUDA, prefetch=False)
    cpu = torch.device("cpu")
    try:
        for _ in range(6):  # past the day's end: the next epoch too
            got, on_gpu, want = pinned.next_batch(), landed.next_batch(), plain.next_batch()
            assert got.values.is_pinned() and got.values.data_ptr() in built
            for name in FIELDS:
                assert getattr(got, name).is_pinned() and torch.equal(getattr(got, name), getattr(want, name)), name
            want = want.to(cpu)  # the ids taken mod their rows on the CPU
            for name in FIELDS:
                assert getattr(on_gpu, name).is_cuda and torch.equal(getattr(on_gpu, name).cpu(), getattr(want, name))
    finally:
        for source in (pinned, landed, plain):
            source.close()
