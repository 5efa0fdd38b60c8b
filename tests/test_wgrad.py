"""Deferred weight gradients (polyrec.kernels.wgrad): the polyrec dense layers queue their weight
GEMMs instead of returning them, and the queue gives every fp32 master the gradient autograd would
have given it, bit for bit. Through the Triton interpreter on tiny shapes (on the CPU the queue runs in
place; the GPU test runs it on a side stream)."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

from polyrec.kernels.wgrad import DeferredWeightGrads
from polyrec.models import DLRM, ModelConfig
from polyrec.models.layers import polyrec_dense_available

pytestmark = [
    pytest.mark.skipif(not polyrec_dense_available(), reason="polyrec.kernels.gemm is not installed"),
    pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                       reason="polyrec's kernels run on the CPU only through Triton's interpreter"),
]


def tiny(interaction: str) -> ModelConfig:
    return ModelConfig(name=f"tiny-{interaction}", num_dense=3, table_rows=(11, 5), embedding_dim=8,
                       multi_hot=(2, 1), bottom_mlp=(16, 8), top_mlp=(16, 1), interaction=interaction,
                       dcn_layers=2 if interaction == "dcnv2" else 0, dcn_rank=4 if interaction == "dcnv2" else 0)


def dense_backward(model: DLRM, dense: torch.Tensor, emb: torch.Tensor, labels: torch.Tensor) -> None:
    F.binary_cross_entropy_with_logits(model.dense_forward(dense, emb.clone().requires_grad_()), labels).backward()


@pytest.mark.parametrize("interaction", ["dot", "dcnv2"])
def test_deferred_gradients_equal_autograds(interaction):
    """Two backward passes (the second accumulates): the weights get no gradient from autograd, the
    queue gives each the same bits autograd gives the undeferred model; biases stay with autograd."""
    config = tiny(interaction)
    ref = DLRM(config, dense_backend="polyrec", seed=3)
    ours = DLRM(config, dense_backend="polyrec", seed=3)
    ours.ops.deferred = queue = DeferredWeightGrads()
    gen = torch.Generator().manual_seed(4)
    for _ in range(2):
        dense, labels = torch.randn(5, 3, generator=gen), torch.randint(0, 2, (5,), generator=gen).float()
        emb = torch.randn(5, 2, 8, generator=gen)
        dense_backward(ref, dense, emb, labels)
        before = {id(p): None if p.grad is None else p.grad.clone() for p in ours.dense_parameters()}
        dense_backward(ours, dense, emb, labels)
        weights = [p for p in ours.dense_parameters() if p.dim() == 2]
        assert len(queue) == len(weights)
        assert all(_same(p.grad, before[id(p)]) for p in weights)  # untouched until the queue runs
        queue.launch()
        queue.wait()
        assert len(queue) == 0
    for a, b in zip(ours.dense_parameters(), ref.dense_parameters(), strict=True):
        assert torch.equal(a.grad, b.grad), a.shape


def _same(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and torch.equal(a, b))


def test_defer_takes_only_leaf_masters():
    queue = DeferredWeightGrads()
    w = torch.zeros(2, 2, requires_grad=True)
    with pytest.raises(ValueError, match="leaf"):
        queue.defer(w * 2, lambda: torch.ones(2, 2))
    queue.launch()  # empty: nothing happens
    assert w.grad is None


def test_cross_network_names_missing_masters():
    from polyrec.kernels.dcn import cross_network

    x0 = torch.randn(4, 6)
    vs, us, bs = [torch.randn(2, 6)], [torch.randn(6, 2)], [torch.randn(6)]
    with pytest.raises(ValueError, match="masters of V and U"):
        cross_network(x0, vs, us, bs, deferred=(DeferredWeightGrads(), vs))
