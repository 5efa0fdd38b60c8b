"""What ``polyrec train --plan plan.json`` takes from a ``polyrec plan`` answer, and what it refuses.

A plan chooses, for one model (a preset: ``polyrec plan --model``) on one fleet: the batch per GPU, the dense
layers' matmul dtype and optimizer, and per table its sharding (ranks), memory, row dtype and optimizer; it was
priced for an index distribution and an overlap mode. The trainer takes all of them: the preset first
(``plan_preset``: the model is built from it), the shardings where the embeddings are built
(``parallel.sharded_embeddings``), the rest as ``TrainConfig`` fields here, the index distribution as
synthetic data's (``data``: ``synthetic`` draws zipf ids, ``synthetic:uniform`` uniform ones; file data's ids
are the file's, not checked). A field the user set to something other than its default and other than the
plan's value is a conflict, reported with both values (edit the plan, or drop ``--plan``); a field left at its
default takes the plan's value.

Refused, with the tables named: host-memory placement (the trainer keeps every table in HBM) and several
optimizers across tables (the trainer's tables share one); several row dtypes are taken, one per table (one TBE
per dtype: ``polyrec.models.mixed_embeddings``, and on several ranks ``polyrec.runtime.mixed_shards``). Refused too:
with synthetic data, an index distribution it does not draw (log_uniform); on several ranks, overlap
"pipeline" (the trainer has no overlap setting: its ranks overlap as "ddp" prices, and one rank has
nothing to overlap); and a plan for another model (its table rows, embedding dim or dense half: a co-designed
plan may change any of them) or another number of ranks; where the rows alone differ, the error says which row
cap makes them agree (``polyrec plan --row-cap`` cuts a plan's tables as ``polyrec train --row-cap`` a run's).
A plan priced for other lookups per sample than the data makes (``polyrec plan --one-hot`` or not) is taken with
a warning that says which plan would price them (``check_data_model``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from polyrec.data.synthetic import DISTRIBUTIONS
from polyrec.models import PRESETS, ModelConfig, preset
from polyrec.planner.types import TRAINABLE_DENSE_DTYPES, DenseSpec, ModelSpec, Plan, model_spec_from_config
from polyrec.runtime.config import DENSE_OPTIMIZERS, TrainConfig, row_dtype_spec

#: How a difference of the tables' lookups per sample (the planner's pooling) is named.
LOOKUPS = "lookups per sample"
#: How a difference of the tables' rows is named.
ROWS = "rows"
#: Where in the plan a TrainConfig field's value comes from, where the names differ enough to need saying.
PLAN_SOURCES = {"data": "model.index_distribution", "preset": "model.name"}


def read_plan(path: Path) -> Plan:
    """The plan at ``path``; errors name the file."""
    try:
        return Plan.from_json(Path(path).read_text())
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"plan file not found: {path}") from exc
    except ValueError as exc:  # the plan reader names the field, or says it is not JSON
        raise ValueError(f"{path}: {exc}") from exc


def plan_preset(cfg: TrainConfig, plan: Plan, typed: frozenset[str] = frozenset()) -> TrainConfig:
    """``cfg`` with the preset its ``plan`` was made for (``polyrec plan --model`` names it: the plan's model.name)
    where the run leaves ``preset`` at its default; one set to another preset (``typed``: the fields the user gave,
    at their default or not) is refused, naming both. A plan of a model that is no preset leaves ``cfg`` as it is
    (``check_plan`` compares the models)."""
    planned = plan.model.name
    if planned not in PRESETS or cfg.preset == planned:
        return cfg
    if _set_by_run(cfg, "preset", typed):
        raise _refusal(cfg.plan, [_clash("preset", cfg.preset, planned)])
    return dataclasses.replace(cfg, preset=planned)


def _set_by_run(cfg: TrainConfig, name: str, typed: frozenset[str]) -> bool:
    """Whether the run sets field ``name``: away from its default, or typed at it (``polyrec train --preset
    dcnv2-small``, which the plan's value overrode in silence when a default counted as left out). ``--data
    synthetic`` names no distribution: the plan's is taken."""
    if name == "data" and cfg.data == "synthetic":
        return False
    return name in typed or getattr(cfg, name) != getattr(TrainConfig(), name)


def load_plan(path: Path, config: ModelConfig, world_size: int) -> Plan:
    """The plan at ``path``, checked against this run's model and number of ranks."""
    return check_plan(path, read_plan(path), config, world_size)


def check_plan(path: Path, plan: Plan, config: ModelConfig, world_size: int, row_cap: int | None = None) -> Plan:
    """``plan`` (read from ``path``), checked against this run's model (``config``: its tables cut to ``row_cap``
    rows, ``--row-cap``) and number of ranks. The lookups per sample are not compared here: the data sets them
    (file data is one-hot), ``check_data_model`` compares them."""
    if plan.fleet.world_size != world_size:
        raise ValueError(f"{path}: plan is for {plan.fleet.world_size} GPUs ({plan.fleet.text}), "
                         f"this job has {world_size} rank{'s' if world_size > 1 else ''}")
    differ = [d for d in _model_differences(plan.model, config) if not d.startswith(LOOKUPS)]
    if differ:
        rows_only = all(d.startswith(ROWS) for d in differ)
        raise ValueError(f"{path}: plan's model is not this run's model '{config.name}': " + "; ".join(differ)
                         + (_rows_advice(plan.model, config, row_cap) if rows_only else ""))
    return plan


def _rows_advice(planned: ModelSpec, config: ModelConfig, row_cap: int | None) -> str:
    """How a plan and a run whose models differ in table rows alone come to agree: a run cut by ``row_cap`` takes a
    plan cut the same way (``polyrec plan --row-cap``); an uncut run, a plan whose tables are the run's cut to its
    largest, that cut (empty: neither, the plan is of other rows)."""
    if row_cap is not None:
        return (f"; this run cuts its tables to {row_cap} rows (--row-cap): plan them with "
                f"`polyrec plan --model {config.name} --row-cap {row_cap}`")
    cap = config.cap_cutting_to(tuple(t.rows for t in planned.tables))
    if cap is None:
        return ""
    return (f"; the plan's tables are this model's cut to {cap} rows (`polyrec plan --row-cap {cap}`): train with "
            f"--row-cap {cap}, or plan without --row-cap")


def check_data_model(path: Path, plan: Plan, adapted: ModelConfig, row_cap: int | None, data: str) -> str | None:
    """The plan against the model this run's data shaped (``DataSource.adapt``; ``check_plan`` checked the
    preset's, lookups per sample aside; ``row_cap``: the run's ``--row-cap``). Criteo TSV and MLPerf binary records
    make every feature one lookup per sample (``polyrec plan --one-hot`` prices that), MLPerf's multi-hot days their
    arrays' widths, synthetic data the preset's: where the plan priced others, its choices still apply, its step
    time and memory do not, which the returned note says (None: the model is the plan's). Data that builds other
    tables (MovieLens) or another dense half is refused: no choice of the plan was made for it."""
    differ = _model_differences(plan.model, adapted)
    if not differ:
        return None
    if not all(d.startswith(LOOKUPS) for d in differ):
        raise ValueError(f"{path}: this run's data builds another model than the plan's ("
                         + "; ".join(differ) + "): train without --plan, or plan that model")
    return (f"{path}: the plan was priced for other lookups per sample than this run's data makes ("
            + "; ".join(differ) + "): its choices are taken, its predicted step time and memory are not this run's; "
            + _replan(adapted, row_cap, data))


def _replan(adapted: ModelConfig, row_cap: int | None, data: str) -> str:
    """Which ``polyrec plan`` prices the lookups per sample of the model this run's ``data`` shaped, its tables cut
    as the run's (``--row-cap``, which ``check_plan`` would otherwise refuse)."""
    cap = f" --row-cap {row_cap}" if row_cap is not None else ""
    if set(adapted.multi_hot) == {1}:
        return f"for them, re-plan with `polyrec plan --model {adapted.name} --one-hot{cap}`"
    if adapted.name in PRESETS and preset(adapted.name).multi_hot == tuple(adapted.multi_hot):
        return (f"for them, re-plan with `polyrec plan --model {adapted.name}{cap}` (without --one-hot: the "
                "preset's lookups per sample)")
    return (f"for them, re-plan with `polyrec plan --model {adapted.name} --data {data}{cap}` (its data's lookups "
            "per sample)")


def _model_differences(planned: ModelSpec, config: ModelConfig) -> list[str]:
    """What the run would build differently from the plan's model: table rows, lookups per sample (the
    planner's pooling), embedding dims, the dense half's fields, each with both values (empty: the same model)."""
    rows = tuple(t.rows for t in planned.tables)
    differ = []
    if len(rows) != config.num_tables:
        differ.append(f"tables: the plan's {len(rows)}, the run's {config.num_tables}")
    else:
        differ += _first_table_difference(ROWS, rows, config.table_rows)
        differ += _first_table_difference(LOOKUPS, [t.pooling for t in planned.tables],
                                          config.multi_hot)
    dims = sorted({t.dim for t in planned.tables})
    if dims != [config.embedding_dim]:
        differ.append(f"embedding dim: the plan's {', '.join(map(str, dims))}, the run's {config.embedding_dim}")
    ours = model_spec_from_config(config).dense
    for field in dataclasses.fields(DenseSpec):
        theirs, mine = getattr(planned.dense, field.name), getattr(ours, field.name)
        if (tuple(theirs) if isinstance(mine, tuple) else theirs) != mine:
            differ.append(f"{field.name}: the plan's {theirs}, the run's {mine}")
    return differ


def _first_table_difference(what: str, planned: Sequence[float], run: Sequence[int]) -> list[str]:
    """The first table whose ``what`` differs between the plan's ``planned`` and the run's ``run`` values, with
    both, a whole number of the plan's without its ".0" (empty: none differs)."""
    t = next((t for t, (a, b) in enumerate(zip(planned, run)) if a != b), None)
    if t is None:
        return []
    ours = int(planned[t]) if float(planned[t]).is_integer() else planned[t]
    return [f"{what} of table {t} (the first that differs): the plan's {ours}, the run's {run[t]}"]


def _one(path: Path, what: str, by_table: dict[str, str]) -> str:
    """The one value every table of the plan shares, or an error naming the tables of each value (the trainer's
    tables share one)."""
    values = sorted(set(by_table.values()))
    if len(values) != 1:
        groups = "; ".join(f"{v}: {', '.join(t for t, x in by_table.items() if x == v)}" for v in values)
        raise ValueError(f"{path}: the plan mixes {what} across tables ({groups}); the trainer's tables share "
                         f"one. Re-plan allowing one (polyrec plan --optimizers)")
    return values[0]


def _row_dtypes(plan: Plan, path: Path) -> str:
    """The plan's row dtypes as ``TrainConfig.embedding_dtype`` takes them: one name where every table has it,
    else one per table in the model's order (one TBE per dtype: ``polyrec.models.mixed_embeddings`` on one
    process, ``polyrec.runtime.mixed_shards`` on each rank that holds several)."""
    try:
        names = [plan.table_plan(t.name).weight_dtype for t in plan.model.tables]
    except KeyError as exc:
        raise ValueError(f"{path}: {exc.args[0]}") from None
    return row_dtype_spec(names)


def plan_fields(plan: Plan, path: Path) -> dict[str, object]:
    """The TrainConfig fields the plan sets."""
    host = [t.table for t in plan.tables if t.memory != "hbm"]
    if host:
        raise ValueError(f"{path}: the plan keeps tables {', '.join(host)} in host memory with an HBM cache; the "
                         f"trainer keeps every table in HBM. Re-plan with --no-host-cache or on a larger fleet")
    if plan.dense_optimizer not in DENSE_OPTIMIZERS:
        raise ValueError(f"{path}: dense optimizer {plan.dense_optimizer!r} is not one the trainer runs "
                         f"({', '.join(DENSE_OPTIMIZERS)})")
    if plan.dense_dtype not in TRAINABLE_DENSE_DTYPES:
        raise ValueError(f"{path}: dense dtype {plan.dense_dtype!r} is not one the trainer runs "
                         f"({', '.join(TRAINABLE_DENSE_DTYPES)})")
    if plan.overlap == "pipeline" and plan.fleet.world_size > 1:
        raise ValueError(f"{path}: the plan's overlap 'pipeline' hides the embedding all-to-alls under the dense "
                         "compute; the trainer's ranks overlap DDP's all-reduce only ('ddp'). Re-plan with "
                         "--overlap ddp")
    return {"batch_size": plan.batch_per_gpu,
            "precision": plan.dense_dtype,
            "dense_optimizer": plan.dense_optimizer,
            "embedding_dtype": _row_dtypes(plan, path),
            "embedding_optimizer": _one(path, "embedding optimizers", {t.table: t.optimizer for t in plan.tables})}


def plan_data(plan: Plan, data: str, path: Path) -> str:
    """The data spec the plan sets for a run of ``data``: synthetic data of the plan's index distribution
    (``data`` itself where it draws that one, else ``synthetic:<distribution>``); file data as it is (its ids
    are the file's)."""
    kind, _, drawn = data.partition(":")
    wanted = plan.model.index_distribution
    if kind != "synthetic" or (drawn or DISTRIBUTIONS[0]) == wanted:
        return data
    if wanted not in DISTRIBUTIONS:
        raise ValueError(f"{path}: the plan's model.index_distribution {wanted!r} is not one synthetic data draws "
                         f"({', '.join(DISTRIBUTIONS)}). Re-plan with --distribution "
                         f"{' or '.join(DISTRIBUTIONS)}, or train on file data")
    return f"synthetic:{wanted}"


def _clash(name: str, ours: object, planned: object) -> str:
    """One field the run sets against the plan: both values, and where the plan's comes from."""
    source = f", from its {PLAN_SOURCES[name]}" if name in PLAN_SOURCES else ""
    return f"{name} {ours!r} (the plan: {planned!r}{source})"


def _refusal(path: Path, clashes: list[str]) -> ValueError:
    """The error of fields the run sets against the plan."""
    return ValueError(f"{path}: the run sets " + "; ".join(clashes) + ". Leave them out to take the plan's, or "
                      "edit the plan")


def apply_plan(cfg: TrainConfig, plan: Plan, typed: frozenset[str] = frozenset()) -> TrainConfig:
    """``cfg`` with the plan's choices; a field the run sets (``_set_by_run``; ``typed``: the fields the user gave)
    to another value than the plan's is refused, naming both."""
    fields = plan_fields(plan, Path(cfg.plan)) | {"data": plan_data(plan, cfg.data, Path(cfg.plan))}
    clashes = [_clash(name, getattr(cfg, name), value) for name, value in fields.items()
               if getattr(cfg, name) != value and _set_by_run(cfg, name, typed)]
    if clashes:
        raise _refusal(cfg.plan, clashes)
    return dataclasses.replace(cfg, **fields)
