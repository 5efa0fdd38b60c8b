"""On the GPU machine: tables of several row dtypes (a plan's per-table precisions, one TBE per dtype:
``polyrec.models.mixed_embeddings``): the lookup equals float64 sums, the trainer's step paths (eager, CUDA-graphed,
semi-sync, the cold start's dry run) train as one-dtype tables do, and a resumed run continues the same losses."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from polyrec.models.embeddings import EmbeddingOptimConfig, build_embeddings
from polyrec.models.mixed_embeddings import MixedRowEmbeddings
from polyrec.runtime import TrainConfig, Trainer
from resume_check import assert_resume_repeats_losses

pytestmark = pytest.mark.gpu

STEPS = 6
TABLES = 26  # dcnv2-small
#: fp16 and fp32 tables in turn, a bf16 one among them (table 5): three TBEs, outputs put back in table order
MIXED = ",".join("bf16" if t == 5 else ("fp16" if t % 2 else "fp32") for t in range(TABLES))
FP16_TABLES = TABLES // 2 - 1  # the odd tables but table 5


def _run(**changes) -> tuple[list[float], list[torch.Tensor], list[torch.Tensor], Trainer]:
    """Losses of the first steps, each table's rows before and after them (dcnv2-small, fixed seed)."""
    cfg = TrainConfig(preset="dcnv2-small", data="synthetic:uniform", batch_size=2048, steps=STEPS, device="cuda",
                      embedding_backend="polyrec", dense_backend="polyrec", log_every=10**9, **changes)
    trainer = Trainer(cfg, progress=False)
    tables = trainer.model.embeddings
    initial = [w.float().clone() for w in tables.table_weights()]
    losses = [float(trainer.train_step()) for _ in range(STEPS)]
    return losses, initial, [w.float().clone() for w in tables.table_weights()], trainer


def test_lookup_equals_float64_sums():
    gen = torch.Generator(device="cuda").manual_seed(1)
    rows, batch = (1000, 37, 5000, 3), 513
    dtypes = (torch.float16, torch.float32, torch.bfloat16, torch.float16)
    tables = build_embeddings("polyrec", rows, 64, optimizer=EmbeddingOptimConfig(), device=torch.device("cuda"),
                              seed=2, weight_dtype=dtypes)
    assert isinstance(tables, MixedRowEmbeddings)
    lengths = torch.randint(0, 9, (len(rows) * batch,), device="cuda", generator=gen)
    bounds = torch.tensor(rows, device="cuda").repeat_interleave(batch).repeat_interleave(lengths)
    values = (torch.rand(bounds.shape, device="cuda", generator=gen) * bounds).long()  # duplicates in small tables
    offsets = torch.zeros(lengths.numel() + 1, dtype=torch.int64, device="cuda")
    offsets[1:] = lengths.cumsum(0)
    with torch.no_grad():
        out = tables(values, offsets, batch)  # [B, F, D]
    bag = torch.arange(len(rows) * batch, device="cuda").repeat_interleave(lengths)
    want = torch.zeros(len(rows) * batch, 64, dtype=torch.float64, device="cuda")
    for f, w in enumerate(tables.table_weights()):
        mine = (bag // batch) == f
        want.index_add_(0, bag[mine], w.double()[values[mine]])
    torch.testing.assert_close(out.double(), want.view(len(rows), batch, 64).transpose(0, 1), rtol=1e-6, atol=1e-6)


def test_tables_built_on_the_cpu_look_up_on_the_gpu_once_moved():
    """``.to("cuda")`` moves every TBE and the groups' column indices (buffers): the lookup runs there and equals
    the CPU's."""
    rows, dtypes = (50, 7, 30), (torch.float32, torch.float16, torch.float32)
    tables = build_embeddings("polyrec", rows, 16, optimizer=EmbeddingOptimConfig(), device=torch.device("cpu"),
                              seed=4, weight_dtype=dtypes)
    values = torch.tensor([0, 3, 49, 1, 6, 6, 29, 0])
    offsets = torch.tensor([0, 2, 3, 4, 6, 7, 8])  # 3 features x 2 samples
    with torch.no_grad():
        on_cpu = [w.float().clone() for w in tables.table_weights()]
        out = tables.to("cuda")(values.cuda(), offsets.cuda(), 2)
    assert out.device.type == "cuda"
    want = torch.stack([torch.stack([on_cpu[f][values[offsets[f * 2 + b]:offsets[f * 2 + b + 1]]].sum(0)
                                     for f in range(3)]) for b in range(2)])
    torch.testing.assert_close(out.cpu(), want)


@pytest.mark.parametrize("changes", [{}, {"cuda_graphs": True}, {"pipeline": "semi-sync"}],
                         ids=["eager", "graphs", "semi-sync"])
def test_mixed_rows_train_like_fp32_rows(changes):
    """Same losses as fp32 rows within half-precision noise, and every table updated."""
    fp32, _, _, _ = _run()
    mixed, initial, after, trainer = _run(embedding_dtype=MIXED, **changes)
    assert isinstance(trainer.model.embeddings, MixedRowEmbeddings)
    assert [w.dtype for w in trainer.model.embeddings.table_weights()].count(torch.float16) == FP16_TABLES
    assert mixed == pytest.approx(fp32, rel=0.02 if not changes.get("pipeline") else 0.05)
    assert all(not torch.equal(a, b) and torch.isfinite(b).all() for a, b in zip(initial, after))


def test_cold_start_dry_run_puts_every_tbes_step_back():
    """The dry steps of the precompile run every TBE; their step counts (stochastic rounding's seeds) are put back,
    so the run's losses equal one without the precompile. (What it compiles depends on what earlier tests of this
    process compiled: not asserted.)"""
    with_dry, _, _, trainer = _run(embedding_dtype=MIXED, precompile=True)
    assert trainer.cold_start is not None and trainer.precompile_skipped is None
    assert [tbe.step for tbe in trainer.model.embeddings.tbes] == [STEPS] * 3
    without, _, _, _ = _run(embedding_dtype=MIXED, precompile=False)
    assert with_dry == without


def test_resume_continues_the_same_losses(tmp_path: Path):
    def run(directory: Path, steps: int, resume: bool = False):
        cfg = TrainConfig(preset="dcnv2-small", data="synthetic:uniform", batch_size=2048, steps=steps, device="cuda",
                          embedding_backend="polyrec", dense_backend="polyrec", log_every=1, checkpoint_dir=directory,
                          resume=resume, embedding_dtype=MIXED)
        return Trainer(cfg, progress=False).train()

    assert_resume_repeats_losses(run, tmp_path)


def test_host_bounds_give_the_same_lookup_and_wrong_ones_are_named_first():
    """On the GPU the TBEs flag bad input without raising in the lookup: with the batch's own bounds the lookup
    equals the one that reads them; with a wrong split, check_errors names the bounds before the TBEs' flags."""
    from polyrec.kernels.jagged import JaggedBatchError

    gen = torch.Generator(device="cuda").manual_seed(3)
    rows, batch = (1000, 37, 5000, 3), 257
    tables = build_embeddings("polyrec", rows, 32, optimizer=EmbeddingOptimConfig(), device=torch.device("cuda"),
                              seed=5, weight_dtype=(torch.float16, torch.float32, torch.float16, torch.float32))
    lengths = torch.randint(1, 6, (len(rows) * batch,), device="cuda", generator=gen)
    bounds_of_ids = torch.tensor(rows, device="cuda").repeat_interleave(batch).repeat_interleave(lengths)
    values = (torch.rand(bounds_of_ids.shape, device="cuda", generator=gen) * bounds_of_ids).long()
    offsets = torch.zeros(lengths.numel() + 1, dtype=torch.int64, device="cuda")
    offsets[1:] = lengths.cumsum(0)
    bounds = tuple(offsets[::batch].tolist())
    with torch.no_grad():
        read, given = tables(values, offsets, batch), tables(values, offsets, batch, bounds=bounds)
        assert torch.equal(read, given)
        tables.check_errors()
        wrong = list(bounds)
        wrong[2] -= 1
        tables(values, offsets, batch, bounds=tuple(wrong))
    with pytest.raises(JaggedBatchError, match="feature_bounds .* are not its offsets'"):
        tables.check_errors()
