"""polyrec's backends (TBE embeddings, Triton GEMMs) against the torch reference path, through the
Triton interpreter on tiny shapes: forward, and a few training steps with the same optimizers."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

from polyrec.models import DLRM, EmbeddingOptimConfig, ModelConfig
from polyrec.models.embeddings import polyrec_embedding_available
from polyrec.models.layers import polyrec_dense_available

pytestmark = [
    pytest.mark.skipif(not polyrec_embedding_available(), reason="polyrec.kernels.tbe is not installed"),
    pytest.mark.skipif(not polyrec_dense_available(), reason="polyrec.kernels.gemm is not installed"),
    pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                       reason="polyrec's kernels run on the CPU only through Triton's interpreter: set "
                              "TRITON_INTERPRET=1 (make test does)"),
]


def tiny(interaction: str) -> ModelConfig:
    return ModelConfig(name=f"tiny-{interaction}", num_dense=3, table_rows=(11, 5, 17), embedding_dim=8,
                       multi_hot=(2, 1, 3), bottom_mlp=(16, 8), top_mlp=(16, 1), interaction=interaction,
                       dcn_layers=2 if interaction == "dcnv2" else 0, dcn_rank=4 if interaction == "dcnv2" else 0)


def batch(config: ModelConfig, b: int, gen: torch.Generator):
    lengths = torch.randint(0, 4, (config.num_tables * b,), generator=gen)
    lengths[0] = 0
    tables = torch.tensor(config.table_rows).repeat_interleave(b)
    values = torch.cat([torch.randint(0, int(r), (int(n),), generator=gen) for r, n in zip(tables, lengths)])
    offsets = torch.zeros(lengths.numel() + 1, dtype=torch.int64)
    offsets[1:] = lengths.cumsum(0)
    return (torch.rand(b, config.num_dense, generator=gen), values, offsets,
            torch.randint(0, 2, (b,), generator=gen).float())


def pair(config: ModelConfig, kind: str) -> tuple[DLRM, DLRM]:
    opt = EmbeddingOptimConfig(kind=kind, lr=0.05)
    ref = DLRM(config, embedding_optimizer=opt, seed=7)
    ours = DLRM(config, embedding_backend="polyrec", dense_backend="polyrec", embedding_optimizer=opt, seed=7)
    for w, bag in zip(ours.embeddings.tbe.table_weights(), ref.embeddings.bags):
        w.copy_(bag.weight.detach())
    return ref, ours


def train_steps(model: DLRM, batches) -> list[float]:
    dense_opt = torch.optim.Adagrad(model.dense_parameters(), lr=0.05)
    losses = []
    for dense, values, offsets, labels in batches:
        emb = model.embed(values, offsets, dense.shape[0])
        leaf = emb.detach().requires_grad_()
        loss = F.binary_cross_entropy_with_logits(model.dense_forward(dense, leaf), labels)
        loss.backward()
        emb.backward(leaf.grad)
        dense_opt.step()
        dense_opt.zero_grad()
        model.embeddings.apply_gradients()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("interaction", ["dot", "dcnv2"])
def test_polyrec_forward_equals_torch(interaction):
    gen = torch.Generator().manual_seed(3)
    config = tiny(interaction)
    ref, ours = pair(config, "rowwise_adagrad")
    dense, values, offsets, _ = batch(config, 5, gen)
    torch.testing.assert_close(ours(dense, values, offsets), ref(dense, values, offsets), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", ["rowwise_adagrad", "adagrad"])
def test_polyrec_training_steps_equal_torch(kind):
    gen = torch.Generator().manual_seed(5)
    config = tiny("dcnv2")
    ref, ours = pair(config, kind)
    batches = [batch(config, 6, gen) for _ in range(3)]
    ref_losses, our_losses = train_steps(ref, batches), train_steps(ours, batches)
    torch.testing.assert_close(torch.tensor(our_losses), torch.tensor(ref_losses), rtol=1e-4, atol=1e-5)
    for w, bag in zip(ours.embeddings.tbe.table_weights(), ref.embeddings.bags):
        torch.testing.assert_close(w, bag.weight.detach(), rtol=1e-4, atol=1e-5)
    for a, b in zip(ours.dense_parameters(), ref.dense_parameters()):
        torch.testing.assert_close(a.detach(), b.detach(), rtol=1e-4, atol=1e-5)


def test_polyrec_embedding_state_round_trips(tmp_path):
    config = tiny("dot")
    _, ours = pair(config, "rowwise_adagrad")
    train_steps(ours, [batch(config, 4, torch.Generator().manual_seed(1))])
    torch.save(ours.embeddings.export_state(), tmp_path / "emb.pt")
    state = torch.load(tmp_path / "emb.pt", weights_only=True)  # as checkpoints are loaded
    _, other = pair(config, "rowwise_adagrad")
    other.embeddings.import_state(state)
    assert torch.equal(other.embeddings.tbe.weights, ours.embeddings.tbe.weights)
    assert torch.equal(other.embeddings.tbe.state1, ours.embeddings.tbe.state1)


def test_bf16_embedding_output_feeds_bf16_dense():
    """The trainer's GPU path: TBE pooled output in bf16, dense matmuls in bf16, fp32 weights underneath."""
    gen = torch.Generator().manual_seed(9)
    config = tiny("dcnv2")
    ref, _ = pair(config, "rowwise_adagrad")
    ours = DLRM(config, embedding_backend="polyrec", dense_backend="polyrec", seed=7,
                embedding_optimizer=EmbeddingOptimConfig(kind="rowwise_adagrad", lr=0.05),
                embedding_output_dtype=torch.bfloat16)
    for w, bag in zip(ours.embeddings.tbe.table_weights(), ref.embeddings.bags):
        w.copy_(bag.weight.detach())
    dense, values, offsets, labels = batch(config, 6, gen)
    emb = ours.embed(values, offsets, 6)
    assert emb.dtype == torch.bfloat16
    torch.testing.assert_close(emb.float(), ref.embed(values, offsets, 6), rtol=1e-2, atol=1e-2)
    logits = ours.dense_forward(dense, emb, torch.bfloat16)
    torch.testing.assert_close(logits, ref(dense, values, offsets), rtol=0.05, atol=0.05)
    before = ours.embeddings.tbe.weights.clone()
    F.binary_cross_entropy_with_logits(logits, labels).backward()
    assert not torch.equal(ours.embeddings.tbe.weights, before)  # the fused update ran from a bf16 gradient
    assert torch.isfinite(ours.embeddings.tbe.weights).all()


def step_both(losses: list[torch.Tensor], opts: list[torch.optim.Optimizer], models: tuple[DLRM, DLRM]) -> None:
    """One training step of each model from its loss (dense optimizer, then the embedding update); the two
    losses equal."""
    for loss, opt, model in zip(losses, opts, models):
        loss.backward()
        opt.step()
        opt.zero_grad()
        model.embeddings.apply_gradients()
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-4, atol=1e-5)


def test_cross_input_is_assembled_in_the_lookup_buffer():
    """DLRM-DCNv2 with polyrec's tables: the lookup leaves the bottom MLP's columns free in its output
    buffer and x0 is that buffer (no copy of the embeddings); two training steps through it (the
    gradient split into column views) equal the torch model's, and a second assembly from the same
    lookup falls back to a copy."""
    gen = torch.Generator().manual_seed(11)
    config = tiny("dcnv2")
    ref, ours = pair(config, "rowwise_adagrad")
    opts = [torch.optim.Adagrad(m.dense_parameters(), lr=0.05) for m in (ours, ref)]
    for _ in range(2):
        dense, values, offsets, labels = batch(config, 6, gen)
        emb = ours.embed(values, offsets, 6)
        tapped = emb.view_as(emb)  # as the trainer's tap hands it on: a view at the same place
        seen = []
        hook = ours.cross.register_forward_pre_hook(lambda module, args: seen.append(args[0].detach()))
        losses = [F.binary_cross_entropy_with_logits(m.dense_forward(dense, e), labels)
                  for m, e in ((ours, tapped), (ref, ref.embed(values, offsets, 6)))]
        hook.remove()
        assert ours.embeddings.lead_buffer(tapped) is None  # taken by dense_forward, once
        x0 = seen[0]
        assert x0.shape == (6, config.interaction_dim) and x0[:, 8:].data_ptr() == emb.data_ptr()
        torch.testing.assert_close(x0[:, :8], ours.bottom(dense, ours.ops))
        step_both(losses, opts, (ours, ref))
    for w, bag in zip(ours.embeddings.tbe.table_weights(), ref.embeddings.bags):
        torch.testing.assert_close(w, bag.weight.detach(), rtol=1e-4, atol=1e-5)
    for a, b in zip(ours.dense_parameters(), ref.dense_parameters()):
        torch.testing.assert_close(a.detach(), b.detach(), rtol=1e-4, atol=1e-5)


def test_a_held_lookup_buffer_takes_every_trained_lookup_and_is_x0_at_every_call():
    """``hold_output`` (the graphed trainer's static input): later trained lookups of that batch size land
    in the held buffer, ``lead_buffer`` hands it out at every call (a graph capture runs the dense half
    several times), and training through it equals the torch model's; an evaluation lookup (no grad) or
    another batch size gets a buffer of its own; a tensor that is not the latest output is refused."""
    gen = torch.Generator().manual_seed(12)
    config = tiny("dcnv2")
    ref, ours = pair(config, "rowwise_adagrad")
    opts = [torch.optim.Adagrad(m.dense_parameters(), lr=0.05) for m in (ours, ref)]
    dense, values, offsets, labels = batch(config, 6, gen)
    first = ours.embed(values, offsets, 6)
    assert not ours.embeddings.hold_output(first.clone())  # not the module's output
    assert ours.embeddings.hold_output(first)
    for step in range(3):
        if step:
            dense, values, offsets, labels = batch(config, 6, gen)
        emb = ours.embed(values, offsets, 6)
        assert emb.data_ptr() == first.data_ptr()
        for _ in range(2):  # the same x0 buffer at every call
            lead = ours.embeddings.lead_buffer(emb.view_as(emb))
            assert lead is not None and lead[:, 8:].data_ptr() == first.data_ptr()
        losses = [F.binary_cross_entropy_with_logits(m.dense_forward(dense, e), labels)
                  for m, e in ((ours, emb.view_as(emb)), (ref, ref.embed(values, offsets, 6)))]
        step_both(losses, opts, (ours, ref))
    for w, bag in zip(ours.embeddings.tbe.table_weights(), ref.embeddings.bags):
        torch.testing.assert_close(w, bag.weight.detach(), rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        assert ours.embed(values, offsets, 6).data_ptr() != first.data_ptr()
    dense, values, offsets, labels = batch(config, 4, gen)
    assert ours.embed(values, offsets, 4).data_ptr() != first.data_ptr()


def test_a_dot_model_holds_its_lookup_buffer_too():
    """DLRM's dot interaction leaves no lead columns: the held buffer is the lookup's output itself, later
    trained lookups land in it with the values a new buffer gets, and ``lead_buffer`` has nothing to hand out."""
    gen = torch.Generator().manual_seed(13)
    config = tiny("dot")
    _, ours = pair(config, "sgd")
    _, twin = pair(config, "sgd")
    dense, values, offsets, labels = batch(config, 5, gen)
    first = ours.embed(values, offsets, 5)
    assert ours.embeddings.hold_output(first)
    for _ in range(2):
        dense, values, offsets, labels = batch(config, 5, gen)
        emb = ours.embed(values, offsets, 5)
        assert emb.data_ptr() == first.data_ptr() and torch.equal(emb, twin.embed(values, offsets, 5))
    assert ours.embeddings.lead_buffer(emb) is None
