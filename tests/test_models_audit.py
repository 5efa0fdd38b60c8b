"""Edge cases of the model configs, the torch embedding tables, the presets' documented sizes and the
eval AUC: errors that name the bad field, offsets of another batch refused, and no misleading AUC."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import pytest
import torch

from polyrec.models import DLRM, ModelConfig, preset
from polyrec.runtime.metrics import auc

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_models import jagged, tiny  # noqa: E402

DOCS = Path(__file__).resolve().parent.parent / "docs" / "training.md"


@pytest.mark.parametrize(("changes", "message"), [
    ({"num_dense": 0}, "num_dense must be positive, got 0"),
    ({"embedding_dim": 0, "bottom_mlp": (6, 0)}, "embedding_dim must be positive, got 0"),
    ({"table_rows": (7, 0, 13)}, r"table_rows sizes must be positive, got \(7, 0, 13\)"),
])
def test_a_size_below_one_is_named_with_its_value(changes, message):
    """Each bad size names its own field and value (one message named three fields, no value)."""
    with pytest.raises(ValueError, match=message):
        tiny("dot").replace(**changes)


@pytest.mark.parametrize("batch", [3, 5])
def test_torch_tables_refuse_offsets_of_another_batch(batch):
    """Offsets of 4 samples with a batch of 3 split the bags between the features at the wrong places
    (logits came back without an error); both backends now refuse them, naming offsets."""
    config = tiny("dot")
    values, offsets = jagged(config, 4, torch.Generator().manual_seed(0))
    model = DLRM(config)
    with pytest.raises(ValueError, match=rf"offsets must have F\*B\+1 = 3\*{batch}\+1 = {3 * batch + 1} entries, got 13"):
        model(torch.rand(batch, config.num_dense), values, offsets)


def test_torch_tables_take_a_batch_of_none():
    model = DLRM(tiny("dcnv2"))
    out = model(torch.rand(0, 5), torch.zeros(0, dtype=torch.int64), torch.zeros(1, dtype=torch.int64))
    assert out.shape == (0,)


@pytest.mark.parametrize("labels", [[1, 1, 1, 1], [0, 0, 0, 0], [1], []])
def test_auc_of_one_class_is_nan(labels):
    """Labels of one class have no AUC: NaN (written as null), not torchmetrics' 0.0 (a batch of 1 at
    --eval-batches 1 reported 'AUC 0.0000')."""
    labels = torch.tensor(labels)
    assert math.isnan(auc(torch.linspace(0, 1, labels.numel()), labels))


def test_auc_of_a_nan_score_is_nan():
    """A NaN score (a diverged model) has no AUC: torchmetrics gave 1.0 for these."""
    assert math.isnan(auc(torch.tensor([0.1, math.nan, 0.9, 0.4]), torch.tensor([0, 1, 1, 0])))
    assert auc(torch.tensor([0.1, 0.6, 0.9, 0.4]), torch.tensor([0, 1, 1, 0])) == 1.0
    assert auc(torch.tensor([0.1, 0.6, 0.9, 0.4]), torch.tensor([0.0, 0.0, 1.0, 1.0])) == 0.75


def test_the_cli_starts_without_torchmetrics():
    """torchmetrics (and the matplotlib it imports) came in with every `polyrec` command, 0.5-0.6 s of its start on
    the 2-core dev host; `auc` imports it on the first evaluation."""
    import subprocess

    probe = "import sys, polyrec.cli; print(sorted(m for m in ('torchmetrics', 'matplotlib') if m in sys.modules))"
    shown = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert shown.strip() == "[]", shown


def _row_of(name: str) -> str:
    return next(line for line in DOCS.read_text().splitlines() if line.startswith(f"| `{name}` |"))


@pytest.mark.parametrize("name", ["mlperf-dcnv2", "dcnv2-small", "dlrm-criteo-kaggle"])
def test_the_presets_table_in_the_docs_matches_the_configs(name):
    """docs/training.md's preset table: rows, fp32 table size (it said 36 MB for dcnv2-small's 33.4), D and
    the interaction width."""
    config = preset(name)
    _, tables, rows, dim, interaction, _ = (cell.strip() for cell in _row_of(name).strip("|").split("|"))
    count = int(re.search(r"[\d,]+", rows).group().replace(",", ""))
    assert count == (max(config.table_rows) if rows.startswith("capped at") else sum(config.table_rows))
    for size, unit in re.findall(r"\(([\d.]+) (MB|GB)", rows):
        assert float(size) == pytest.approx(config.embedding_bytes() / (1e6 if unit == "MB" else 1e9), abs=0.5)
    assert int(dim) == config.embedding_dim
    assert tables.startswith(str(config.num_tables))
    assert re.search(rf"\b{config.interaction_dim}\b", interaction)


def test_edge_shapes_match_the_float64_reference():
    """Tables of one row, D = 1 and a rank above the cross width, batch of 1, against tests/test_models'
    float64 reference (dense layers in float64), forward and the MLPs' weight gradients."""
    from test_models import Reference

    config = ModelConfig(name="edge", num_dense=1, table_rows=(1, 1, 2), embedding_dim=1, multi_hot=(1, 1, 1),
                         bottom_mlp=(3, 1), top_mlp=(1,), interaction="dcnv2", dcn_layers=2, dcn_rank=9)
    model = DLRM(config, seed=1)
    ref = Reference(model)
    dense = torch.rand(1, 1, generator=torch.Generator().manual_seed(3))
    values, offsets = torch.tensor([0, 0, 1]), torch.tensor([0, 1, 2, 3])
    out, want = model(dense, values, offsets, torch.float64), ref(dense, values, offsets)  # ours: fp32 logits
    torch.testing.assert_close(out.double(), want, rtol=1e-6, atol=1e-7)
    out.sum().backward()
    want.sum().backward()
    refs = [m.weight for m in (*ref.bottom, *ref.top) if isinstance(m, torch.nn.Linear)]
    for got, lin in zip([*model.bottom.weights, *model.top.weights], refs):
        torch.testing.assert_close(got.grad.double(), lin.grad, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("changes", [{"embedding_dim": 16.0}, {"num_dense": True}, {"table_rows": (10, 2.5)},
                                     {"dcn_rank": 32.0}])
def test_a_size_that_is_not_a_whole_number_is_named(changes):
    """Was accepted, then failed inside nn.Linear (or trained a model of another shape: True is 1)."""
    name = next(iter(changes))
    with pytest.raises(ValueError, match=f"sizes must be whole numbers, got {name}="):
        preset("dcnv2-small").replace(**changes)


def test_cross_layers_on_a_dot_model_are_refused():
    """A dot-interaction model with dcn_layers was accepted and trained with no cross layer at all."""
    with pytest.raises(ValueError, match="dcn_layers and dcn_rank are for dcnv2 only, got dcn_layers=3"):
        preset("dlrm-criteo-kaggle").replace(dcn_layers=3, dcn_rank=64)


def test_numpy_integers_are_whole_numbers():
    import numpy as np

    config = preset("dcnv2-small")
    assert config.replace(table_rows=tuple(np.int64(r) for r in config.table_rows)).num_tables == 26


@pytest.mark.parametrize("changes", [{"lr": float("nan")}, {"lr": -0.1}, {"eps": float("inf")}, {"beta2": 1.0}])
def test_an_embedding_optimizer_number_out_of_range_is_refused(changes):
    """The model's config took a NaN or negative rate (the torch tables trained on it); polyrec's TBE took NaN."""
    from polyrec.kernels.tbe_optim import EmbeddingOptimizer
    from polyrec.models import EmbeddingOptimConfig

    for config in (EmbeddingOptimConfig, EmbeddingOptimizer):
        with pytest.raises(ValueError, match="must be"):
            config(**changes)
