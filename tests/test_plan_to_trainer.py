"""A `polyrec plan` JSON drives a training run: shardings of a multi-rank run, and on any number of
ranks the batch, dense dtype and optimizer, row dtype and embedding optimizer
(polyrec.runtime.plan_apply, polyrec.runtime.parallel)."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys

import pytest
import torch

from polyrec.models import preset
from polyrec.planner.propose import make_plan
from polyrec.planner.types import PlanConstraints, model_spec_from_config, parse_fleet
from polyrec.runtime.config import TrainConfig
from polyrec.runtime.parallel import PLAN_KINDS, shardings_from_plan
from polyrec.runtime.plan_apply import apply_plan, load_plan
from polyrec.runtime.shards import make_shards

CONFIG = preset("dcnv2-small").with_capped_rows(64)
#: A plan one CPU test can run: fp16 rows, fp32 dense matmuls, Adam, a batch of 16.
SMALL = PlanConstraints(weight_dtypes=("fp16",), batch_per_gpu=16, dense_dtype="fp32", dense_optimizer="adam")


def _write(tmp_path, plan, name="plan.json"):
    path = tmp_path / name
    path.write_text(plan.to_json())
    return path


@pytest.fixture
def plan_file(tmp_path):
    config = preset("dcnv2-small")
    plan = make_plan(model_spec_from_config(config), parse_fleet("H200x2"))
    return config, plan, _write(tmp_path, plan)


def test_plan_shardings_follow_the_plan(plan_file):
    config, plan, path = plan_file
    shardings = shardings_from_plan(load_plan(path, config, world_size=2))
    assert len(shardings) == config.num_tables
    for table, sharding in zip(plan.model.tables, shardings):
        planned = plan.table_plan(table.name)
        assert sharding.kind == PLAN_KINDS[planned.sharding] and sharding.ranks == tuple(planned.ranks)
    shards = make_shards(config.table_rows, [config.embedding_dim] * config.num_tables, shardings, 2)
    assert {s.table for s in shards} == set(range(config.num_tables))  # every table placed


def test_plan_for_another_fleet_or_model_is_refused(plan_file):
    config, _, path = plan_file
    with pytest.raises(ValueError, match="this job has 4 ranks"):
        load_plan(path, config, world_size=4)
    with pytest.raises(ValueError, match="this job has 1 rank$"):
        load_plan(path, config, world_size=1)
    with pytest.raises(ValueError, match="not this run's model"):
        load_plan(path, preset("mlperf-dcnv2"), world_size=2)


def test_a_missing_or_foreign_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="plan file not found: .*nope.json"):
        load_plan(tmp_path / "nope.json", CONFIG, world_size=1)
    (tmp_path / "x.json").write_text('{"x": 1}')
    with pytest.raises(ValueError, match=r"x.json: invalid plan: plan.version"):
        load_plan(tmp_path / "x.json", CONFIG, world_size=1)
    (tmp_path / "y.json").write_text('{"x": ')
    with pytest.raises(ValueError, match=r"y.json: invalid plan: .*not valid JSON"):
        load_plan(tmp_path / "y.json", CONFIG, world_size=1)


def test_fields_left_at_their_defaults_take_the_plans(tmp_path):
    plan = make_plan(model_spec_from_config(CONFIG), parse_fleet("H200x1"), SMALL)
    cfg = apply_plan(TrainConfig(plan=_write(tmp_path, plan), steps=7), plan)
    assert (cfg.batch_size, cfg.precision, cfg.dense_optimizer, cfg.embedding_dtype, cfg.embedding_optimizer) == (
        16, "fp32", "adam", "fp16", "rowwise_adagrad")
    assert cfg.steps == 7  # what the plan does not choose is the run's


def test_a_field_set_against_the_plan_is_refused_with_both_values(tmp_path):
    plan = make_plan(model_spec_from_config(CONFIG), parse_fleet("H200x1"), SMALL)
    path = _write(tmp_path, plan)
    assert apply_plan(TrainConfig(plan=path, batch_size=16), plan).batch_size == 16  # agrees: fine
    with pytest.raises(ValueError, match=r"batch_size 32 \(the plan: 16\).*embedding_dtype 'bf16' \(the plan: 'fp16'\)"):
        apply_plan(TrainConfig(plan=path, batch_size=32, embedding_dtype="bf16"), plan)


def test_plan_rows_the_chosen_backend_cannot_store_name_the_plan(tmp_path):
    from polyrec.runtime.config import resolve

    plan = make_plan(model_spec_from_config(CONFIG), parse_fleet("H200x1"), SMALL)
    path = _write(tmp_path, plan)
    cfg = apply_plan(TrainConfig(plan=path, device="cpu", embedding_backend="torch"), plan)
    with pytest.raises(ValueError, match=f"fp16 \\(from the plan {path}\\) needs --embedding-backend polyrec"):
        resolve(cfg)


def _second_table(plan, **fields):
    """``plan`` with its second table's plan changed by ``fields``."""
    return dataclasses.replace(plan, tables=(plan.tables[0], dataclasses.replace(plan.tables[1], **fields),
                                             *plan.tables[2:]))


def test_host_memory_and_mixed_optimizers_are_refused_naming_the_tables(tmp_path):
    plan = make_plan(model_spec_from_config(CONFIG), parse_fleet("H200x1"), SMALL)
    first, second = plan.tables[0].table, plan.tables[1].table
    host = dataclasses.replace(plan, tables=(dataclasses.replace(plan.tables[0], memory="host_cached", cache_rows=8),
                                             *plan.tables[1:]))
    with pytest.raises(ValueError, match=f"tables {first} in host memory"):
        apply_plan(TrainConfig(plan=_write(tmp_path, host)), host)
    mixed = _second_table(plan, optimizer="sgd")
    with pytest.raises(ValueError, match=f"mixes embedding optimizers across tables \\(rowwise_adagrad: {first}, "
                                         f".*; sgd: {second}\\); the trainer's tables share one\\."):
        apply_plan(TrainConfig(plan=_write(tmp_path, mixed)), mixed)


def test_mixed_row_dtypes_are_taken_per_table_on_one_rank_and_on_several(tmp_path, plan_file):
    """A row dtype per table, in the model's table order: one process holds one TBE per dtype
    (``MixedRowEmbeddings``), each rank of several one per dtype its shards hold (``MixedShardTables``)."""
    plan = _second_table(make_plan(model_spec_from_config(CONFIG), parse_fleet("H200x1"), SMALL), weight_dtype="fp32")
    second = plan.tables[1].table
    cfg = apply_plan(TrainConfig(plan=_write(tmp_path, plan)), plan)
    assert cfg.embedding_dtype == ",".join("fp32" if t.name == second else "fp16" for t in plan.model.tables)
    _, two, _ = plan_file
    other = "fp16" if two.tables[1].weight_dtype == "fp32" else "fp32"
    mixed = _second_table(two, weight_dtype=other)
    cfg = apply_plan(TrainConfig(plan=_write(tmp_path, mixed, "two.json")), mixed)
    names = {t.table: t.weight_dtype for t in mixed.tables}
    assert cfg.embedding_dtype == ",".join(names[t.name] for t in mixed.model.tables)
    assert len(set(cfg.embedding_dtype.split(","))) == 2


def test_a_dense_optimizer_the_trainer_lacks_names_the_plan(tmp_path):
    """The planner prices SGD for the dense layers; the trainer runs Adagrad or Adam. Was: 'dense optimizer must
    be adagrad or adam, got 'sgd'', naming no plan."""
    plan = make_plan(model_spec_from_config(CONFIG), parse_fleet("H200x1"),
                     dataclasses.replace(SMALL, dense_optimizer="sgd"))
    path = _write(tmp_path, plan)
    with pytest.raises(ValueError, match=f"{path}: dense optimizer 'sgd' is not one the trainer runs "
                                         "\\(adagrad, adam\\)"):
        apply_plan(TrainConfig(plan=path), plan)


def test_synthetic_data_draws_the_plans_index_distribution(tmp_path):
    """Was: the plan's model.index_distribution was not read, and synthetic data drew zipf ids under a plan
    priced for uniform ones (the planner's default)."""
    plans = {d: make_plan(model_spec_from_config(CONFIG, index_distribution=d), parse_fleet("H200x1"), SMALL)
             for d in ("uniform", "zipf")}
    for distribution, plan in plans.items():
        path = _write(tmp_path, plan, f"{distribution}.json")
        for data in (f"synthetic:{distribution}", "criteo:day_0.tsv"):  # agrees, or file data (not checked)
            assert apply_plan(TrainConfig(plan=path, data=data), plan).data == data
    uniform, zipf = (TrainConfig(plan=_write(tmp_path, plans[d], f"{d}.json")) for d in ("uniform", "zipf"))
    assert apply_plan(uniform, plans["uniform"]).data == "synthetic:uniform"  # was: "synthetic", zipf ids
    assert apply_plan(zipf, plans["zipf"]).data == "synthetic"  # draws zipf already: as before
    path = _write(tmp_path, plans["uniform"])
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))}: the run sets data 'synthetic:zipf' \(the plan: "
                                         r"'synthetic:uniform', from its model.index_distribution\)"):
        apply_plan(TrainConfig(plan=path, data="synthetic:zipf"), plans["uniform"])
    skewed = dataclasses.replace(plans["zipf"], model=dataclasses.replace(plans["zipf"].model,
                                                                           index_distribution="log_uniform"))
    path = _write(tmp_path, skewed, "log_uniform.json")
    with pytest.raises(ValueError, match=f"{path}: the plan's model.index_distribution 'log_uniform' is not one "
                                         "synthetic data draws"):
        apply_plan(TrainConfig(plan=path), skewed)
    assert apply_plan(TrainConfig(plan=path, data="mlperf:day_23"), skewed).data == "mlperf:day_23"


def test_a_pipeline_overlap_on_several_ranks_is_refused(plan_file):
    """The trainer has no overlap setting: its ranks overlap DDP's all-reduce ("ddp"). Was: a plan priced with the
    all-to-alls hidden ("pipeline") trained without a word."""
    _, plan, path = plan_file
    assert plan.overlap == "ddp"
    for overlap in ("ddp", "none"):  # the trainer overlaps as much, or more: taken
        assert apply_plan(TrainConfig(plan=path), dataclasses.replace(plan, overlap=overlap)).batch_size == (
            plan.batch_per_gpu)
    piped = dataclasses.replace(plan, overlap="pipeline")
    with pytest.raises(ValueError, match=f"{path}: the plan's overlap 'pipeline' .* Re-plan with --overlap ddp"):
        apply_plan(TrainConfig(plan=path), piped)
    one = make_plan(model_spec_from_config(CONFIG), parse_fleet("H200x1"), SMALL)
    assert one.overlap == "none"  # one rank: nothing to overlap, whatever was asked
    apply_plan(TrainConfig(plan=path), dataclasses.replace(one, overlap="pipeline"))


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                    reason="fp16 rows need polyrec's TBE, on the CPU only through Triton's interpreter")
def test_the_trainer_runs_the_plan_and_resume_keeps_its_row_dtype(tmp_path):
    from polyrec.runtime.trainer import Trainer

    plan = make_plan(model_spec_from_config(CONFIG), parse_fleet("H200x1"), SMALL)
    cfg = TrainConfig(preset="dcnv2-small", row_cap=64, steps=2, device="cpu", embedding_backend="polyrec",
                      dense_backend="torch", log_every=1, plan=_write(tmp_path, plan), checkpoint_dir=tmp_path / "ck")
    trainer = Trainer(cfg, progress=False)
    assert trainer.model.embeddings.tbe.weight_dtype == torch.float16
    assert isinstance(trainer.optimizer, torch.optim.Adam) and trainer.rt.compute_dtype == torch.float32
    assert trainer.train().status == "done" and trainer.source.batch_size == 16
    assert trainer.source.distribution == plan.model.index_distribution == "uniform"  # was: zipf, the default
    resumed = Trainer(dataclasses.replace(cfg, steps=3, resume=True), progress=False)
    assert resumed.step == 2 and resumed.train().step == 3
    again = dataclasses.replace(cfg, plan=None, embedding_dtype="fp32", steps=3, resume=True)
    with pytest.raises(ValueError, match="holds embedding_dtype 'fp16'; this run has 'fp32'"):
        Trainer(again, progress=False)


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                    reason="fp16 rows need polyrec's TBE, on the CPU only through Triton's interpreter")
def test_the_trainer_runs_a_plan_of_mixed_row_dtypes_and_resumes_it(tmp_path):
    """A plan with one fp32 table among fp16 ones trains (one TBE per dtype), checkpoints and resumes; a resume
    asking for one row dtype is refused naming both."""
    from polyrec.models.mixed_embeddings import MixedRowEmbeddings
    from polyrec.runtime.trainer import Trainer

    plan = _second_table(make_plan(model_spec_from_config(CONFIG), parse_fleet("H200x1"), SMALL), weight_dtype="fp32")
    cfg = TrainConfig(preset="dcnv2-small", row_cap=64, steps=2, device="cpu", embedding_backend="polyrec",
                      dense_backend="torch", log_every=1, plan=_write(tmp_path, plan), checkpoint_dir=tmp_path / "ck")
    trainer = Trainer(cfg, progress=False)
    tables = trainer.model.embeddings
    assert isinstance(tables, MixedRowEmbeddings)
    assert [w.dtype for w in tables.table_weights()] == [
        torch.float32 if t.name == plan.tables[1].table else torch.float16 for t in plan.model.tables]
    before = [w.float().clone() for w in tables.table_weights()]
    result = trainer.train()
    assert result.status == "done" and len(result.losses) == 2 and torch.isfinite(torch.tensor(result.losses)).all()
    assert sum(not torch.equal(w.float(), b) for w, b in zip(tables.table_weights(), before)) == len(before)
    resumed = Trainer(dataclasses.replace(cfg, steps=3, resume=True), progress=False)
    for a, b in zip(resumed.model.embeddings.table_weights(), tables.table_weights()):
        assert torch.equal(a, b)
    assert resumed.step == 2 and resumed.train().step == 3
    again = dataclasses.replace(cfg, plan=None, embedding_dtype="fp16", steps=3, resume=True)
    with pytest.raises(ValueError, match=f"holds embedding_dtype '{trainer.cfg.embedding_dtype}'; this run has 'fp16'"):
        Trainer(again, progress=False)


def test_cli_reports_a_bad_plan_and_exits_2(tmp_path):
    (tmp_path / "x.json").write_text('{"x": 1}')
    proc = subprocess.run([sys.executable, "-m", "polyrec", "train", "--preset", "dcnv2-small", "--device", "cpu",
                           "--steps", "1", "--plan", str(tmp_path / "x.json")], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and "x.json: invalid plan" in proc.stderr
