"""A TBE that writes its features' columns of a caller's wider output (``TableBatchedEmbedding``'s
``output_columns``) and several such TBEs sharing one output (``tbe_lookups.lookup_shared``), through the Triton
interpreter on tiny shapes: against the same tables laid out one after another, with the columns of nobody's
features poisoned, both update variants, and the layout's checks."""

from __future__ import annotations

import os

import pytest
import torch

from polyrec.kernels import tbe_select
from polyrec.kernels.jagged import JaggedBatch
from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec
from polyrec.kernels.tbe_lookups import lookup_shared

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                reason="polyrec's TBE runs on the CPU only through Triton's interpreter: set "
                                       "TRITON_INTERPRET=1 (make test does)")

DIMS = (8, 4, 8)
ROWS = (9, 5, 3)  # 3 rows: duplicates in most bags
#: the three features' first columns in a 28-column output, out of order, columns 12..15 nobody's
COLUMNS, WIDTH = [16, 24, 4], 28
FREE = [c for c in range(WIDTH) if not any(a <= c < a + d for a, d in zip(COLUMNS, DIMS))]
SGD = EmbeddingOptimizer(kind="sgd", lr=0.5)


def tables() -> list[TableSpec]:
    return [TableSpec(name=f"t{t}", rows=r, dim=d) for t, (r, d) in enumerate(zip(ROWS, DIMS))]


def batch(batch_size: int, seed: int, rows: tuple[int, ...] = ROWS) -> JaggedBatch:
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 4, (len(rows) * batch_size,), generator=gen)
    lengths[0] = 0  # an empty bag
    limits = torch.tensor(rows).repeat_interleave(batch_size).repeat_interleave(lengths)
    values = (torch.rand(limits.shape, generator=gen) * limits).long()
    return JaggedBatch.from_lengths(values=values, lengths=lengths, batch_size=batch_size, num_features=len(rows))


def placed_columns(out: torch.Tensor) -> torch.Tensor:
    """The features' columns of a [B, WIDTH] output, one after another (the plain layout)."""
    return torch.cat([out[:, c:c + d] for c, d in zip(COLUMNS, DIMS)], dim=1)


@pytest.mark.parametrize("variant", tbe_select.UPDATE_VARIANTS)
def test_placed_columns_look_up_and_train_as_the_plain_layout(variant):
    """Same rows, same ids: the placed module's columns equal the plain module's output, the columns of no
    feature keep their poison, and a backward from the placed columns of the gradient moves the rows as the
    plain module's backward from the same gradient does."""
    config = tbe_select.UpdateConfig(tile=4, num_warps=1, variant=variant)
    plain = TableBatchedEmbedding(tables(), optimizer=SGD, seed=5, update_config=config)
    placed = TableBatchedEmbedding(tables(), optimizer=SGD, seed=5, update_config=config,
                                   output_columns=(COLUMNS, WIDTH))
    assert placed.output_dim == WIDTH
    gen = torch.Generator().manual_seed(2)
    for step in range(2):
        jag = batch(5, seed=step)
        into = torch.full((5, WIDTH), float("nan"))
        out = placed(jag, into=into)
        want = plain(jag)
        torch.testing.assert_close(placed_columns(out.detach()), want.detach(), rtol=0, atol=0)
        assert torch.isnan(out.detach()[:, FREE]).all()
        grad = torch.randn(5, WIDTH, generator=gen)
        out.backward(grad)
        want.backward(placed_columns(grad))
        for a, b in zip(placed.table_weights(), plain.table_weights()):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_modules_sharing_one_output_fill_it_in_table_order_beside_lead_columns():
    """Tables 0 and 2 in one module, table 1 in another (fp16 rows): their lookups into one [B, 3 + 12]
    buffer equal each table's own lookup at its place; the lead columns keep their poison; each module's
    backward takes its columns of the gradient."""
    rows, dim, b = (6, 4, 7), 4, 3
    specs = [TableSpec(name=f"t{t}", rows=r, dim=dim) for t, r in enumerate(rows)]
    groups = ([0, 2], [1])
    modules = [TableBatchedEmbedding([specs[t] for t in group], optimizer=SGD, seed=g,
                                     weight_dtype=(torch.float32, torch.float16)[g],
                                     output_columns=([t * dim for t in group], len(rows) * dim))
               for g, group in enumerate(groups)]
    whole = batch(b, seed=9, rows=rows)
    parts = [JaggedBatch.from_lengths(
        values=torch.cat([whole.values[whole.offsets[f * b]:whole.offsets[(f + 1) * b]] for f in group]),
        lengths=torch.cat([whole.offsets[f * b + 1:(f + 1) * b + 1] - whole.offsets[f * b:(f + 1) * b]
                           for f in group]), batch_size=b, num_features=len(group)) for group in groups]
    into = torch.full((b, 3 + len(rows) * dim), float("nan"))
    out = lookup_shared(modules, parts, lead_columns=3, into=into)
    assert out.data_ptr() == into[:, 3:].data_ptr() and torch.isnan(into[:, :3]).all()
    weights = {t: w.float().clone() for m, group in zip(modules, groups) for t, w in zip(group, m.table_weights())}
    for f in range(len(rows)):
        for s in range(b):
            ids = whole.values[whole.offsets[f * b + s]:whole.offsets[f * b + s + 1]]
            torch.testing.assert_close(out.detach()[s, f * dim:(f + 1) * dim], weights[f][ids].sum(0))
    out.backward(torch.ones_like(out))
    for m, group in zip(modules, groups):
        for t, w in zip(group, m.table_weights()):
            ids = whole.values[whole.offsets[t * b]:whole.offsets[(t + 1) * b]]
            counts = torch.bincount(ids, minlength=rows[t]).float()[:, None]
            torch.testing.assert_close(w.float(), weights[t] - 0.5 * counts, rtol=0, atol=2e-3)


@pytest.mark.parametrize("columns, width, message", [
    ([0, 8], 20, "2 columns for 3 features"),
    ([0, 8, 24], 28, r"feature 2 would fill columns 24..31 of a 28-column output"),
    ([0, 6, 12], 28, "features 0 and 1 overlap"),
    ([-1, 8, 12], 28, "feature 0 would fill columns -1..6"),
])
def test_bad_placements_are_refused(columns, width, message):
    with pytest.raises(ValueError, match=message):
        TableBatchedEmbedding(tables(), optimizer=SGD, output_columns=(columns, width))


def test_a_sequence_feature_has_no_place_in_the_pooled_output():
    specs = [TableSpec(name="seq", rows=4, dim=4, pooling="none")]
    with pytest.raises(ValueError, match="feature 0 \\(table 'seq'\\) has pooling 'none'"):
        TableBatchedEmbedding(specs, optimizer=SGD, output_columns=([0], 4))


def test_shared_lookups_refuse_modules_of_other_widths():
    one = TableBatchedEmbedding(tables(), optimizer=SGD)
    other = TableBatchedEmbedding(tables(), optimizer=SGD, output_columns=(COLUMNS, WIDTH))
    jag = batch(2, seed=1)
    with pytest.raises(ValueError, match="differ in width, dtype or device"):
        lookup_shared([one, other], [jag, jag])
    with pytest.raises(ValueError, match="1 batches for 2 modules"):
        lookup_shared([other, other], [jag])
