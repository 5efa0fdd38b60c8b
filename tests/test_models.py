"""DLRM / DLRM-DCNv2 against an eager float64 reference built from torch.nn, presets, optimizers."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from polyrec.models import DLRM, EmbeddingOptimConfig, ModelConfig, preset
from polyrec.models.embeddings import SparseRowwiseAdagrad


def tiny(interaction: str) -> ModelConfig:
    return ModelConfig(name=f"tiny-{interaction}", num_dense=5, table_rows=(7, 1, 13), embedding_dim=4,
                       multi_hot=(2, 1, 3), bottom_mlp=(6, 4), top_mlp=(5, 1), interaction=interaction,
                       dcn_layers=2 if interaction == "dcnv2" else 0, dcn_rank=3 if interaction == "dcnv2" else 0)


def jagged(config: ModelConfig, batch: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Random bags with empty bags and duplicate ids: values [nnz], offsets [F*B+1]."""
    lengths = torch.randint(0, 4, (config.num_tables * batch,), generator=gen)
    lengths[0] = 0  # an empty bag for sure
    tables = torch.tensor(config.table_rows).repeat_interleave(batch)  # [F*B] rows of each bag's table
    values = torch.cat([torch.randint(0, int(r), (int(n),), generator=gen) for r, n in zip(tables, lengths)])
    if lengths[1] >= 2:
        values[1] = values[0] if lengths[0] else values[1]
    offsets = torch.zeros(lengths.numel() + 1, dtype=torch.int64)
    offsets[1:] = lengths.cumsum(0)
    return values, offsets


class Reference(nn.Module):
    """The same model written plainly with torch.nn in float64, weights copied from a DLRM."""

    def __init__(self, model: DLRM) -> None:
        super().__init__()
        c = model.config
        self.config = c
        self.bags = nn.ModuleList()
        for bag in model.embeddings.bags:
            ref = nn.EmbeddingBag(bag.num_embeddings, c.embedding_dim, mode="sum").double()
            ref.weight.data.copy_(bag.weight.data)
            self.bags.append(ref)
        self.bottom = self._seq(model.bottom, last_relu=True)
        self.top = self._seq(model.top, last_relu=False)
        self.cross = None
        if model.cross is not None:
            self.cross = nn.ModuleList()
            for v, u, b in zip(model.cross.v, model.cross.u, model.cross.b):
                lin_v = nn.Linear(v.shape[1], v.shape[0], bias=False).double()
                lin_u = nn.Linear(u.shape[1], u.shape[0]).double()
                lin_v.weight.data.copy_(v.data)
                lin_u.weight.data.copy_(u.data)
                lin_u.bias.data.copy_(b.data)
                self.cross.append(nn.ModuleList([lin_v, lin_u]))

    @staticmethod
    def _seq(mlp, last_relu: bool) -> nn.Sequential:
        layers = []
        for i, (w, b) in enumerate(zip(mlp.weights, mlp.biases)):
            lin = nn.Linear(w.shape[1], w.shape[0]).double()
            lin.weight.data.copy_(w.data)
            lin.bias.data.copy_(b.data)
            layers.append(lin)
            if i < len(mlp.weights) - 1 or last_relu:
                layers.append(nn.ReLU())
        return nn.Sequential(*layers)

    def forward(self, dense, values, offsets):
        b = dense.shape[0]
        pooled = []
        for f, bag in enumerate(self.bags):
            lo, hi = int(offsets[f * b]), int(offsets[(f + 1) * b])
            pooled.append(bag(values[lo:hi], offsets[f * b:(f + 1) * b] - lo))
        bottom = self.bottom(dense.double())
        if self.cross is None:
            t = torch.stack([bottom, *pooled], dim=1)
            z = t @ t.transpose(1, 2)
            n = t.shape[1]
            pairs = [z[:, i, j] for i in range(n) for j in range(i)]
            inter = torch.cat([bottom, torch.stack(pairs, dim=1)], dim=1)
        else:
            x0 = torch.cat([bottom, *pooled], dim=1)
            x = x0
            for lin_v, lin_u in self.cross:
                x = x0 * lin_u(lin_v(x)) + x
            inter = x
        return self.top(inter).squeeze(1)


@pytest.mark.parametrize("interaction", ["dot", "dcnv2"])
def test_forward_backward_match_float64_reference(interaction):
    gen = torch.Generator().manual_seed(11)
    config = tiny(interaction)
    model = DLRM(config, seed=3)
    ref = Reference(model)
    batch = 9
    dense = torch.rand(batch, config.num_dense, generator=gen)
    values, offsets = jagged(config, batch, gen)
    labels = torch.randint(0, 2, (batch,), generator=gen).double()

    logits = model(dense, values, offsets)
    ref_logits = ref(dense, values, offsets)
    torch.testing.assert_close(logits.double(), ref_logits, rtol=1e-5, atol=1e-6)

    F.binary_cross_entropy_with_logits(logits, labels.float()).backward()
    F.binary_cross_entropy_with_logits(ref_logits, labels).backward()
    ours = [p.grad for p in model.dense_parameters()]
    theirs = [m.weight.grad for m in ref.bottom if isinstance(m, nn.Linear)]
    assert all(g is not None for g in ours)
    # bottom MLP weights come first in dense_parameters(): weights then biases of each MLP
    for got, want in zip(ours[:len(theirs)], theirs):
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-6)
    for bag, ref_bag in zip(model.embeddings.bags, ref.bags):
        torch.testing.assert_close(bag.weight.grad.to_dense().double(), ref_bag.weight.grad, rtol=1e-4, atol=1e-6)


def test_top_and_cross_gradients_match_reference():
    gen = torch.Generator().manual_seed(2)
    config = tiny("dcnv2")
    model = DLRM(config, seed=5)
    ref = Reference(model)
    dense = torch.rand(6, config.num_dense, generator=gen)
    values, offsets = jagged(config, 6, gen)
    model(dense, values, offsets).sum().backward()
    ref(dense, values, offsets).sum().backward()
    top_ref = [m for m in ref.top if isinstance(m, nn.Linear)]
    for w, lin in zip(model.top.weights, top_ref):
        torch.testing.assert_close(w.grad.double(), lin.weight.grad, rtol=1e-4, atol=1e-6)
    for v, u, (lin_v, lin_u) in zip(model.cross.v, model.cross.u, ref.cross):
        torch.testing.assert_close(v.grad.double(), lin_v.weight.grad, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(u.grad.double(), lin_u.weight.grad, rtol=1e-4, atol=1e-6)


def test_bf16_compute_close_to_fp32():
    gen = torch.Generator().manual_seed(4)
    config = tiny("dcnv2")
    model = DLRM(config, seed=1)
    dense = torch.rand(16, config.num_dense, generator=gen)
    values, offsets = jagged(config, 16, gen)
    fp32 = model(dense, values, offsets)
    bf16 = model(dense, values, offsets, compute_dtype=torch.bfloat16)
    assert bf16.dtype == torch.float32
    torch.testing.assert_close(bf16, fp32, rtol=0.05, atol=0.05)
    bf16.sum().backward()
    assert model.top.weights[0].grad.dtype == torch.float32  # fp32 master weights get the gradient


def test_presets_have_published_sizes():
    ml = preset("mlperf-dcnv2")
    assert sum(ml.table_rows) == 204_184_588
    assert sum(ml.multi_hot) == 214
    assert ml.interaction_dim == 27 * 128 == 3456
    assert ml.embedding_bytes() == pytest.approx(104.5e9, rel=1e-3)
    assert preset("dlrm-criteo-kaggle").interaction_dim == 367  # DLRM reference: ln_top starts at 367
    small = preset("dcnv2-small")
    assert max(small.table_rows) <= 50_000 and small.num_tables == 26
    with pytest.raises(ValueError, match="unknown preset 'nope'; known: mlperf-dcnv2"):
        preset("nope")


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="bottom_mlp must end in embedding_dim=4"):
        tiny("dot").replace(bottom_mlp=(6, 5))
    with pytest.raises(ValueError, match="multi_hot has 2 entries for 3 tables"):
        tiny("dot").replace(multi_hot=(1, 1))
    with pytest.raises(ValueError, match="interaction must be"):
        tiny("dot").replace(interaction="cat")


def _rowwise_adagrad_float64(w, state, rows, grads, lr, eps):
    """Reference: sum duplicate rows' gradients, then the row-wise update, in float64."""
    g = torch.zeros_like(w).index_add_(0, rows, grads)
    touched = torch.unique(rows)
    state[touched] += g[touched].pow(2).mean(dim=1)
    w[touched] -= lr * g[touched] / (state[touched].sqrt() + eps)[:, None]


def test_sparse_rowwise_adagrad_matches_reference_with_duplicates():
    gen = torch.Generator().manual_seed(0)
    w = nn.Parameter(torch.randn(10, 3, generator=gen))
    ref_w, ref_state = w.detach().double().clone(), torch.zeros(10, dtype=torch.float64)
    opt = SparseRowwiseAdagrad([w], lr=0.1, eps=1e-8)
    for _ in range(3):
        rows = torch.tensor([1, 4, 4, 9, 1, 1])
        grads = torch.randn(6, 3, generator=gen)
        w.grad = torch.sparse_coo_tensor(rows[None], grads, w.shape, check_invariants=True)
        opt.step()
        _rowwise_adagrad_float64(ref_w, ref_state, rows, grads.double(), 0.1, 1e-8)
    torch.testing.assert_close(w.detach().double(), ref_w, rtol=1e-6, atol=1e-7)
    assert torch.equal(w.detach()[0], ref_w[0].float())  # untouched rows unchanged


@pytest.mark.parametrize("kind", ["sgd", "adagrad", "adam", "rowwise_adagrad"])
def test_torch_embedding_optimizers_update_only_touched_rows(kind):
    config = tiny("dot")
    model = DLRM(config, embedding_optimizer=EmbeddingOptimConfig(kind=kind, lr=0.1), seed=0)
    before = [b.weight.detach().clone() for b in model.embeddings.bags]
    values = torch.tensor([0, 2, 0, 5, 5, 11])  # 1 sample, bags: t0 {0, 2}, t1 {0}, t2 {5, 5, 11}
    offsets = torch.tensor([0, 2, 3, 6])
    (model.embed(values, offsets, 1) * torch.arange(1.0, 5.0)).sum().backward()
    model.embeddings.apply_gradients()
    changed = [(~torch.isclose(b.weight, w0)).any(dim=1).nonzero().flatten().tolist()
               for b, w0 in zip(model.embeddings.bags, before)]
    assert changed == [[0, 2], [0], [5, 11]]


@pytest.mark.parametrize("kind", ["sgd", "adagrad", "adam", "rowwise_adagrad"])
def test_torch_embedding_optimizers_step_without_torchs_sparse_invariant_warning(kind):
    """torch.optim.Adagrad builds sparse tensors on its second step with the invariant checks left implicit, and
    torch 2.13 warned about that on every run of the direct port (``polyrec bench e2e``'s stderr)."""
    import warnings

    model = DLRM(tiny("dot"), embedding_optimizer=EmbeddingOptimConfig(kind=kind, lr=0.1), seed=0)
    values, offsets = torch.tensor([0, 2, 0, 5, 5, 11]), torch.tensor([0, 2, 3, 6])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            model.embed(values, offsets, 1).sum().backward()
            model.embeddings.apply_gradients()
    assert not [w for w in caught if "invariant" in str(w.message)], [str(w.message) for w in caught]
    assert not torch.sparse.check_sparse_tensor_invariants.is_enabled()  # the global setting as it was


def test_polyrec_backend_missing_is_a_clear_error(monkeypatch):
    import polyrec.models.embeddings as embeddings
    import polyrec.models.layers as layers

    monkeypatch.setattr(embeddings, "polyrec_embedding_available", lambda: False)
    monkeypatch.setattr(layers, "polyrec_dense_available", lambda: False)
    with pytest.raises(ImportError, match="needs polyrec.kernels.tbe and polyrec.kernels.jagged"):
        DLRM(tiny("dot"), embedding_backend="polyrec")
    with pytest.raises(ImportError, match="needs polyrec.kernels.gemm"):
        DLRM(tiny("dot"), dense_backend="polyrec")


def test_beside_is_cat_in_a_buffer_or_without_one():
    """``beside`` writes lead into a buffer's free first columns (the result aliases the buffer) or
    concatenates; either way the values and the gradients are torch.cat's; a buffer that does not hold
    x after the lead's columns is an error."""
    from polyrec.models.layers import beside

    gen = torch.Generator().manual_seed(2)
    buffer = torch.full((5, 7), float("nan"))
    x = buffer[:, 3:]
    x.copy_(torch.randn(5, 4, generator=gen))
    lead = torch.randn(5, 3, generator=gen, requires_grad=True)
    xg = x.clone().requires_grad_()
    grad = torch.randn(5, 7, generator=gen)
    want = torch.cat([lead, xg], 1)
    want.backward(grad)
    want_grads = lead.grad.clone(), xg.grad.clone()
    lead.grad = None
    tapped = x.detach().requires_grad_()
    got = beside(lead, tapped, buffer)
    assert got.data_ptr() == buffer.data_ptr() and torch.equal(got, want.detach())
    got.backward(grad)
    assert torch.equal(lead.grad, want_grads[0]) and torch.equal(tapped.grad, want_grads[1])
    assert torch.equal(beside(lead, xg).detach(), want.detach())
    with pytest.raises(ValueError, match="after 3 free columns"):
        beside(lead, xg, buffer)


def test_pad_reduction_keeps_the_product_and_the_weight_gradient():
    """K = 13 padded to 16 with zeros: the same product as the unpadded one and the same gradient for
    the 13 real columns of the weight (the pad's backward drops the rest); aligned inputs pass through."""
    from polyrec.models.layers import pad_reduction

    gen = torch.Generator().manual_seed(2)
    x, w = torch.randn(5, 13, generator=gen, dtype=torch.float64), torch.randn(7, 13, generator=gen,
                                                                             dtype=torch.float64)
    w1, w2 = w.clone().requires_grad_(), w.clone().requires_grad_()
    xp, wp = pad_reduction(x, w1)
    assert xp.shape == (5, 16) and wp.shape == (7, 16) and not xp[:, 13:].any() and not wp[:, 13:].any()
    grad = torch.randn(5, 7, generator=gen, dtype=torch.float64)
    (xp @ wp.T).backward(grad)
    (x @ w2.T).backward(grad)
    torch.testing.assert_close(xp @ wp.T, x @ w.T, rtol=1e-12, atol=1e-12)
    assert w1.grad.shape == (7, 13)
    torch.testing.assert_close(w1.grad, w2.grad, rtol=1e-12, atol=1e-12)
    aligned, weight = torch.randn(3, 16), torch.randn(4, 16)
    assert pad_reduction(aligned, weight) == (aligned, weight)
