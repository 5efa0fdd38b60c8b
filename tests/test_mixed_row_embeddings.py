"""Tables of several row dtypes (``polyrec.models.mixed_embeddings``: one TBE per dtype) against float64 and torch
references, through the Triton interpreter on tiny shapes: the lookup in table order, training steps, bad ids
named by the model's feature, and checkpoint state."""

from __future__ import annotations

import math
import os

import pytest
import torch

from polyrec.kernels.jagged import JaggedBatchError
from polyrec.models.embeddings import (EmbeddingOptimConfig, PolyrecEmbeddings, TorchEmbeddings, bag_bounds,
                                       build_embeddings)
from polyrec.models.mixed_embeddings import MixedRowEmbeddings, dtype_groups, feature_subset

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                reason="polyrec's TBE runs on the CPU only through Triton's interpreter: set "
                                       "TRITON_INTERPRET=1 (make test does)")

ROWS = (11, 5, 17, 7, 3)
DIM = 8
F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
#: fp32 tables on both sides of an fp16 one: the groups' outputs are put back in table order
DTYPES = (F32, F16, F32, BF16, F16)
CPU = torch.device("cpu")


def mixed(kind: str = "rowwise_adagrad", dtypes: tuple[torch.dtype, ...] = DTYPES):
    return build_embeddings("polyrec", ROWS, DIM, optimizer=EmbeddingOptimConfig(kind=kind, lr=0.05), device=CPU,
                            seed=3, weight_dtype=dtypes)


def jagged(batch_size: int, gen: torch.Generator, empty: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Feature-major ids with duplicates (small tables) and empty bags (bag ``empty`` and zero-length draws)."""
    lengths = torch.randint(0, 5, (len(ROWS) * batch_size,), generator=gen)
    lengths[empty] = 0
    tables = torch.tensor(ROWS).repeat_interleave(batch_size)
    values = torch.cat([torch.randint(0, int(r), (int(n),), generator=gen) for r, n in zip(tables, lengths)])
    offsets = torch.zeros(lengths.numel() + 1, dtype=torch.int64)
    offsets[1:] = lengths.cumsum(0)
    return values, offsets


def pooled64(weights: list[torch.Tensor], values: torch.Tensor, offsets: torch.Tensor, b: int) -> torch.Tensor:
    """The float64 sum of each bag's rows: [B, F, D]."""
    out = torch.full((b, len(weights), DIM), float("nan"), dtype=torch.float64)
    for f, w in enumerate(weights):
        for s in range(b):
            lo, hi = int(offsets[f * b + s]), int(offsets[f * b + s + 1])
            out[s, f] = w.double()[values[lo:hi]].sum(0)
    return out


def test_groups_keep_first_appearance_order():
    assert dtype_groups(DTYPES) == [(F32, [0, 2]), (F16, [1, 4]), (BF16, [3])]


@pytest.mark.parametrize("features", [[1, 4], [0, 2, 3], [3]])
def test_a_feature_subset_is_the_jagged_batch_of_those_features(features):
    """Each feature's bags, in the subset's order, with the same ids (an empty bag among them); no samples give
    no ids and offsets [0]."""
    b = 4
    values, offsets = jagged(b, torch.Generator().manual_seed(len(features)), empty=3 * b)
    bounds = bag_bounds(offsets, b, len(ROWS))
    part, starts = feature_subset(values, offsets, bounds, b, features, torch.tensor(features))
    assert starts.shape == (len(features) * b + 1,) and int(starts[0]) == 0 and int(starts[-1]) == part.numel()
    for k, f in enumerate(features):
        for s in range(b):
            mine = part[starts[k * b + s]:starts[k * b + s + 1]]
            assert torch.equal(mine, values[offsets[f * b + s]:offsets[f * b + s + 1]]), (f, s)
    empty = torch.zeros(1, dtype=torch.int64)
    part, starts = feature_subset(values[:0], empty, [0] * (len(ROWS) + 1), 0, features, torch.tensor(features))
    assert part.numel() == 0 and starts.tolist() == [0]


def test_one_dtype_per_table_builds_one_tbe_per_dtype_and_one_dtype_builds_the_plain_module():
    tables = mixed()
    assert isinstance(tables, MixedRowEmbeddings) and [t.weight_dtype for t in tables.tbes] == [F32, F16, BF16]
    assert [w.dtype for w in tables.table_weights()] == list(DTYPES)
    assert [tuple(w.shape) for w in tables.table_weights()] == [(r, DIM) for r in ROWS]
    assert isinstance(mixed(dtypes=(F16,) * len(ROWS)), PolyrecEmbeddings)
    with pytest.raises(ValueError, match="3 row dtypes for 5 tables"):
        mixed(dtypes=(F32, F16, F32))
    with pytest.raises(ValueError, match="'torch' keeps fp32 rows, got weight dtype torch.bfloat16, torch.float16$"):
        build_embeddings("torch", ROWS, DIM, optimizer=EmbeddingOptimConfig(), device=CPU, seed=0,
                         weight_dtype=DTYPES)


@pytest.mark.parametrize("batch_size", [1, 6])
def test_lookup_equals_float64_sums_in_table_order(batch_size):
    tables = mixed()
    values, offsets = jagged(batch_size, torch.Generator().manual_seed(batch_size))
    with torch.no_grad():
        out = tables(values, offsets, batch_size)
    assert out.shape == (batch_size, len(ROWS), DIM) and out.dtype == F32
    torch.testing.assert_close(out.double(), pooled64(tables.table_weights(), values, offsets, batch_size),
                               rtol=1e-6, atol=1e-6)


def test_no_samples_give_an_empty_lookup():
    out = mixed()(torch.zeros(0, dtype=torch.int64), torch.zeros(1, dtype=torch.int64), 0)
    assert out.shape == (0, len(ROWS), DIM)


@pytest.mark.parametrize("kind", ["rowwise_adagrad", "sgd", "adam"])
def test_training_steps_follow_torch_table_by_table(kind):
    """Three steps of loss sum(out * R): every table's rows equal those of torch's fp32 tables started from the
    same rows, fp32 tables to fp32 rounding, half-precision ones to their own (stochastic rounding per step)."""
    gen = torch.Generator().manual_seed(7)
    ours = mixed(kind)
    ref = TorchEmbeddings(ROWS, DIM, optimizer=EmbeddingOptimConfig(kind=kind, lr=0.05), device=CPU, seed=0)
    with torch.no_grad():
        for w, bag in zip(ours.table_weights(), ref.bags):
            bag.weight.copy_(w.float())
    for _ in range(3):
        values, offsets = jagged(6, gen, empty=2)
        upstream = torch.randn(6, len(ROWS), DIM, generator=gen)
        for module in (ours, ref):
            (module(values, offsets, 6) * upstream).sum().backward()
            module.apply_gradients()
    for t, (w, bag) in enumerate(zip(ours.table_weights(), ref.bags)):
        tol = 1e-5 if w.dtype == F32 else 2e-2
        torch.testing.assert_close(w.float(), bag.weight.detach(), rtol=tol, atol=tol, msg=f"table {t} ({w.dtype})")
    moved = [not torch.equal(w.float(), before) for w, before in
             zip(ours.table_weights(), mixed(kind).table_weights())]
    assert all(moved)  # every table was updated (its ids drew into each of the three batches)


def test_the_output_leaves_lead_columns_free_and_is_held_for_later_lookups():
    """As a one-dtype module's: DLRM-DCNv2's x0 beside the lookup (``lead_buffer``, once per output) and a CUDA
    graph's static input (``hold_output``: the next trained lookup of that batch size writes the same buffer)."""
    tables = mixed()
    tables.lead_columns = 3
    gen = torch.Generator().manual_seed(11)
    values, offsets = jagged(4, gen)
    emb = tables(values, offsets, 4)
    lead = tables.lead_buffer(emb)
    assert lead is not None and lead.shape == (4, 3 + len(ROWS) * DIM)
    assert lead[:, 3:].data_ptr() == emb.data_ptr() and tables.lead_buffer(emb) is None
    torch.testing.assert_close(emb.detach().double(), pooled64(tables.table_weights(), values, offsets, 4))
    assert tables.hold_output(emb)
    values, offsets = jagged(4, gen)
    again = tables(values, offsets, 4)
    assert again.data_ptr() == emb.data_ptr() and tables.lead_buffer(again) is not None
    torch.testing.assert_close(again.detach().double(), pooled64(tables.table_weights(), values, offsets, 4))


def test_a_bad_id_names_the_models_feature_and_table():
    """Table 3 is the only bf16 one (its TBE's feature 0): the error names feature 3."""
    tables = mixed()
    values, offsets = jagged(4, torch.Generator().manual_seed(2))
    start = int(offsets[3 * 4])
    values[start:int(offsets[3 * 4 + 4])] = ROWS[3] + 1  # every id of feature 3 past its table's end
    assert int(offsets[3 * 4 + 4]) > start
    with pytest.raises(JaggedBatchError, match=r"feature 3 \(table 't3', rows 7\)"):
        tables(values, offsets, 4)
        tables.check_errors()


def test_offsets_of_another_batch_are_refused():
    tables = mixed()
    values, offsets = jagged(4, torch.Generator().manual_seed(4))
    with pytest.raises(JaggedBatchError, match="F\\*B\\+1 = 5\\*3\\+1"):
        tables(values, offsets, 3)
    with pytest.raises(JaggedBatchError, match=f"offsets must run from 0 to nnz = {values.numel() - 1}"):
        tables(values[:-1], offsets, 4)


def test_state_round_trips_and_a_one_dtype_state_is_refused(tmp_path):
    tables = mixed()
    values, offsets = jagged(4, torch.Generator().manual_seed(5))
    tables(values, offsets, 4).sum().backward()
    torch.save(tables.export_state(), tmp_path / "emb.pt")
    other = mixed()
    other.import_state(torch.load(tmp_path / "emb.pt", weights_only=True))  # as checkpoints are loaded
    for a, b in zip(other.tbes, tables.tbes):
        assert torch.equal(a.weights, b.weights) and torch.equal(a.state1, b.state1) and a.step == b.step == 1
    plain = mixed(dtypes=(F32,) * len(ROWS))
    with pytest.raises(ValueError, match="the checkpoint's tables hold one row dtype, these hold 3"):
        other.import_state(plain.export_state())


def test_embedding_dtype_names_one_dtype_or_one_per_table():
    """``--embedding-dtype``: an unknown name is refused naming its table; a list of another length than the
    model's tables is refused once the model is known (several ranks take several: tests/test_mixed_shards.py)."""
    from polyrec.runtime.config import TrainConfig, resolve, table_row_dtypes

    with pytest.raises(ValueError, match=r"got 'fp8' \(table 1 of 2\)"):
        resolve(TrainConfig(device="cpu", embedding_backend="polyrec", embedding_dtype="fp32,fp8"))
    with pytest.raises(ValueError, match="fp32,fp16 needs --embedding-backend polyrec"):
        resolve(TrainConfig(device="cpu", embedding_backend="torch", embedding_dtype="fp32,fp16"))
    cfg = TrainConfig(device="cpu", embedding_backend="polyrec", embedding_dtype="fp32, fp16,bf16")
    rt = resolve(cfg)
    assert table_row_dtypes(rt, 3) == (F32, F16, BF16)
    with pytest.raises(ValueError, match="names 3 row dtypes; the model has 26 tables"):
        table_row_dtypes(rt, 26)


def test_the_run_summary_counts_the_tables_of_each_dtype():
    from polyrec.cli.train import row_dtype_text

    assert row_dtype_text("fp16") == "fp16"
    assert row_dtype_text("fp32,fp16,fp32,bf16") == "fp32 x2, fp16 x1, bf16 x1"
    assert row_dtype_text("fp16,fp16") == "fp16"


def test_a_semi_sync_run_of_mixed_rows_resumes_bit_exact(tmp_path):
    """The semi-sync pipeline carries a batch and its lookup across the checkpoint: with one TBE per row dtype,
    2 steps, then 2 more resumed, give the losses of 4 straight (CPU: the side stream's order on one stream)."""
    from polyrec.runtime import TrainConfig, Trainer

    rows = ",".join("fp16" if t % 3 == 0 else "fp32" for t in range(26))  # dcnv2-small's 26 tables

    def run(directory, steps: int, resume: bool = False):
        cfg = TrainConfig(preset="dcnv2-small", row_cap=64, batch_size=16, steps=steps, device="cpu",
                          embedding_backend="polyrec", dense_backend="torch", log_every=1, checkpoint_dir=directory,
                          resume=resume, embedding_dtype=rows, pipeline="semi-sync", data="synthetic:uniform")
        trainer = Trainer(cfg, progress=False)
        assert isinstance(trainer.model.embeddings, MixedRowEmbeddings)
        return trainer.train()

    straight = run(tmp_path / "a", 4)
    first, resumed = run(tmp_path / "b", 2), run(tmp_path / "b", 4, resume=True)
    assert first.losses + resumed.losses == straight.losses and len(straight.losses) == 4


@pytest.mark.parametrize("group", [0, 1], ids=["fp32 group", "fp16 group"])
def test_a_save_finds_a_non_finite_row_in_any_dtypes_tables(group):
    """Before a checkpoint the trainer checks every tensor of the embeddings' state: the state of one TBE per row
    dtype is a list of their state dicts, which the check read as holding no tensor (a NaN row was saved)."""
    from polyrec.runtime import TrainConfig, Trainer

    cfg = TrainConfig(preset="dcnv2-small", row_cap=64, batch_size=16, steps=1, device="cpu",
                      embedding_backend="polyrec", dense_backend="torch", log_every=1,
                      embedding_dtype=",".join("fp16" if t % 3 == 0 else "fp32" for t in range(26)))
    trainer = Trainer(cfg, progress=False)
    assert trainer.finite_state()
    trainer.model.embeddings.tbes[group].weights[5] = float("nan")
    assert not trainer.finite_state()


def test_host_bounds_split_the_ids_without_reading_the_offsets(monkeypatch):
    """Given the batch's feature_bounds, the lookup equals the one that reads them from the offsets, and does not
    read them (``bag_bounds``: the host sync)."""
    import polyrec.models.mixed_embeddings as mixed_module

    tables = mixed()
    values, offsets = jagged(5, torch.Generator().manual_seed(21), empty=7)
    bounds = tuple(offsets[::5].tolist())
    with torch.no_grad():
        read = tables(values, offsets, 5)
        monkeypatch.setattr(mixed_module, "bag_bounds", lambda *a: pytest.fail("the offsets were read"))
        given = tables(values, offsets, 5, bounds=bounds)
    assert torch.equal(read, given)
    tables.check_errors()


def test_host_bounds_that_are_not_the_offsets_are_raised():
    """Bounds that start at 0 and end at nnz but split two features elsewhere pass the host's checks; the device
    compares them with the offsets, and check_errors names them before what the TBEs flagged of the wrong split
    (on the CPU a TBE raises that in the lookup). A wrong count is refused at once."""
    tables = mixed()
    values, offsets = jagged(5, torch.Generator().manual_seed(22))
    bounds = list(offsets[::5].tolist())
    assert bounds[2] > bounds[1]
    bounds[2] -= 1
    with torch.no_grad(), pytest.raises(JaggedBatchError):
        tables(values, offsets, 5, bounds=tuple(bounds))
        tables.check_errors()
    with pytest.raises(JaggedBatchError, match="feature_bounds .* are not its offsets'"):
        tables.check_errors()
    with pytest.raises(JaggedBatchError, match="feature_bounds: 5 for 5 features"):
        mixed()(values, offsets, 5, bounds=tuple(bounds[:-1]))


def test_training_steps_split_the_ids_by_the_sources_bounds(monkeypatch):
    """The trainer hands the lookup the synthetic source's bounds (its offsets are the same every batch): no step
    and no evaluation reads them from the device."""
    import polyrec.models.mixed_embeddings as mixed_module
    from polyrec.runtime import TrainConfig, Trainer

    cfg = TrainConfig(preset="dcnv2-small", row_cap=64, batch_size=16, steps=3, device="cpu",
                      embedding_backend="polyrec", dense_backend="torch", log_every=10**9, data="synthetic:uniform",
                      embedding_dtype=",".join("fp16" if t % 3 == 0 else "fp32" for t in range(26)))
    trainer = Trainer(cfg, progress=False)
    monkeypatch.setattr(mixed_module, "bag_bounds", lambda *a: pytest.fail("a step read the bounds"))
    losses = [float(trainer.train_step()) for _ in range(3)]
    assert all(math.isfinite(v) for v in losses)
    assert 0.0 <= trainer.evaluate()["auc"] <= 1.0
    trainer.model.embeddings.check_errors()
