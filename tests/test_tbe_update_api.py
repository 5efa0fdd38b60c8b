"""The TBE's lookup outside autograd and its explicit backward (``forward_for_update`` / ``update``),
which the trainer runs on a side stream: the same updates as the autograd path, bitwise."""

from __future__ import annotations

import pytest
import torch

from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding
from polyrec.models.embeddings import PolyrecEmbeddings
from test_tbe import FEATURES, TABLES, make_batch


def _pair(kind: str) -> tuple[TableBatchedEmbedding, TableBatchedEmbedding]:
    opt = EmbeddingOptimizer(kind=kind, lr=0.05)
    return tuple(TableBatchedEmbedding(TABLES, optimizer=opt, feature_to_table=FEATURES, deterministic=True)
                 for _ in range(2))


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("kind", ["rowwise_adagrad", "adam"])
def test_update_steps_as_the_autograd_backward(kind, weighted, monkeypatch):
    """Three steps with a row-strided gradient (a column slice, as the trainer's): weights and state
    equal bitwise; the lookup has no grad_fn, and the backward uses the forward's sort keys."""
    gen = torch.Generator().manual_seed(21)
    explicit, autograd = _pair(kind)
    calls, real = [], explicit._sort_keys
    monkeypatch.setattr(explicit, "_sort_keys", lambda *x: calls.append(1) or real(*x))
    for _ in range(3):
        batch = make_batch(gen, weighted=weighted)
        out = explicit.forward_for_update(batch)
        assert out.grad_fn is None and not out.requires_grad
        want = autograd(batch)
        assert torch.equal(out, want.detach())
        wide = torch.randn(out.shape[0], out.shape[1] + 5, generator=gen)
        grad = wide[:, 3:3 + out.shape[1]]  # [B, output_dim], row stride output_dim + 5
        explicit.update(grad, batch)
        want.backward(grad)
    assert not calls
    for name in ("weights", "state1", "state2"):
        assert torch.equal(getattr(explicit, name), getattr(autograd, name)), name


def test_a_gradient_of_the_wrong_shape_is_refused_before_any_update():
    module, _ = _pair("sgd")
    batch = make_batch(torch.Generator().manual_seed(22))
    out = module.forward_for_update(batch)
    before = module.weights.clone()
    with pytest.raises(ValueError, match=r"gradient must be \[40, 44\].*got \(40, 43\)"):
        module.update(out[:, :-1], batch)
    assert torch.equal(module.weights, before) and module.step == 0


def test_embeddings_update_from_a_strided_gradient_of_the_pooled_view():
    """``PolyrecEmbeddings.forward_for_update``'s update takes the [B, F, D] view of a wider gradient
    (the cross network's input gradient) and steps as the autograd path does."""
    rows, dim, batch_size = (30, 7, 50), 8, 16
    gen = torch.Generator().manual_seed(23)
    explicit, autograd = (PolyrecEmbeddings(rows, dim, optimizer=_optim(), device=torch.device("cpu"), seed=3)
                          for _ in range(2))
    for _ in range(2):
        lengths = torch.randint(0, 4, (len(rows) * batch_size,), generator=gen)
        values = torch.cat([torch.randint(0, r, (int(lengths[f * batch_size:(f + 1) * batch_size].sum()),),
                                          generator=gen) for f, r in enumerate(rows)])
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
        emb, update = explicit.forward_for_update(values, offsets, batch_size)
        want = autograd(values, offsets, batch_size)  # [B, F, D]
        assert torch.equal(emb, want.detach())
        wide = torch.randn(batch_size, (len(rows) + 1) * dim, generator=gen)  # [B, (F+1) D], as x0's gradient
        grad = wide[:, dim:].view(batch_size, len(rows), dim)
        update(grad)
        want.backward(grad)
    assert torch.equal(explicit.tbe.weights, autograd.tbe.weights)
    assert torch.equal(explicit.tbe.state1, autograd.tbe.state1)


def _optim():
    from polyrec.models import EmbeddingOptimConfig

    return EmbeddingOptimConfig(kind="rowwise_adagrad", lr=0.05)
