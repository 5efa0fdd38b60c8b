"""How ``polyrec plan`` prints a plan: its model's label, the step, tables, memory and origins tables."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from polyrec.planner.types import ModelSpec, Plan


def is_one_hot(spec: ModelSpec) -> bool:
    """Whether every feature of ``spec`` is one lookup per sample (``--one-hot``, or a one-hot preset)."""
    return all(t.pooling == 1 for t in spec.tables)


def row_cap_of(spec: ModelSpec) -> int | None:
    """The ``--row-cap`` that cut ``spec``'s tables from its preset's (None: the preset's rows, or no preset's)."""
    from polyrec.models.config import PRESETS, preset

    return preset(spec.name).cap_cutting_to(tuple(t.rows for t in spec.tables)) if spec.name in PRESETS else None


def lookups_differ(spec: ModelSpec) -> bool:
    """Whether ``spec`` prices other lookups per sample than its preset's (``--data``: a multi-hot day's widths)."""
    from polyrec.models.config import PRESETS, preset

    return spec.name in PRESETS and tuple(t.pooling for t in spec.tables) != preset(spec.name).multi_hot


def model_label(spec: ModelSpec) -> str:
    """The model's name as titles print it: "(one-hot)" after it where ``is_one_hot``, "(rows <= N)" where
    ``--row-cap N`` cut its tables, so that a plan or report says which lookups per sample and which tables it
    priced (the preset's otherwise)."""
    lookups = "one-hot" if is_one_hot(spec) else "its data's lookups" if lookups_differ(spec) else None
    notes = ([lookups] if lookups else []) + ([f"rows <= {cap}"] if (cap := row_cap_of(spec)) else [])
    return f"{spec.name} ({', '.join(notes)})" if notes else spec.name


def per_second(rate: float) -> str:
    """A rate in the unit that keeps three significant digits in view: 3.41M, 512k, 950."""
    for scale, unit in ((1e6, "M"), (1e3, "k")):
        if rate >= scale:
            return f"{rate / scale:.3g}{unit}"
    return f"{rate:.3g}"


def plan_headline(plan: Plan) -> str:
    """The plan in one line: model, fleet, samples/s, batch, dense dtype and step. Printed above the tables, not as
    the step table's title, which rich wraps to that narrow table's width."""
    return (f"{model_label(plan.model)} on {plan.fleet.text}: {per_second(plan.samples_per_s)} samples/s predicted "
            f"(batch {plan.batch_per_gpu}/GPU, {plan.dense_dtype} dense, step {plan.step.total_ms:.2f} ms)")


def plan_table(plan: Plan) -> Table:
    s = plan.step
    t = Table(title="step")
    t.add_column("step term")
    t.add_column("ms", justify="right")
    for label, value in (("embedding fwd", s.embedding_fwd_ms), ("embedding bwd + update", s.embedding_bwd_ms),
                         ("dense fwd", s.dense_fwd_ms), ("dense bwd", s.dense_bwd_ms),
                         ("all-to-all", s.all_to_all_ms), ("all-reduce", s.all_reduce_ms),
                         ("dense optimizer", s.optimizer_ms), ("other", s.other_ms),
                         ("overlap (hidden)", -s.overlap_ms or 0.0),
                         ("CPU issue beyond GPU", s.host_excess_ms),
                         ("total", s.total_ms)):
        t.add_row(label, f"{value:.3f}")
    return t


def ranks_text(ranks: tuple[int, ...]) -> str:
    """``first..last`` for a run of more than 4 consecutive ranks (row-wise over many GPUs), else each rank
    (a column-wise table's ranks are in no order)."""
    run = ranks == tuple(range(ranks[0], ranks[0] + len(ranks)))
    return f"{ranks[0]}..{ranks[-1]}" if run and len(ranks) > 4 else ",".join(map(str, ranks))


def tables_table(plan: Plan) -> Table:
    t = Table(title="tables")
    for col in ("table", "rows", "sharding", "ranks", "memory", "dtype", "optimizer", "fwd ms", "bwd ms"):
        t.add_column(col)
    for tp in plan.tables:
        ranks = ranks_text(tp.ranks)
        memory = tp.memory + (f" ({tp.cache_rows:,} cached)" if tp.memory == "host_cached" else "")
        t.add_row(tp.table, f"{plan.model.table(tp.table).rows:,}", tp.sharding, ranks, memory, tp.weight_dtype,
                  tp.optimizer, f"{tp.fwd_ms:.3f}", f"{tp.bwd_ms:.3f}")
    return t


#: Ranks the memory table shows, the fullest first (the JSON has every rank's).
MEMORY_ROWS = 4


def memory_table(plan: Plan) -> Table:
    """The MEMORY_ROWS ranks whose use is the largest part of their capacity: on a fleet of mixed kinds (H100x4,H200x4)
    the most bytes are on the larger GPUs, and the ranks nearest to full were left out."""
    ranks = len(plan.memory)
    shown = f": the {MEMORY_ROWS} fullest of {ranks} ranks" if ranks > MEMORY_ROWS else ""
    t = Table(title=f"memory per GPU (GB){shown}")
    for col in ("rank", "device", "weights", "opt state", "activations", "workspace", "reserve", "used", "capacity"):
        t.add_column(col)
    fullest = sorted(plan.memory, key=lambda m: -m.used / m.capacity)[:MEMORY_ROWS]
    for m in fullest:
        t.add_row(str(m.rank), m.device, *(f"{v / 1e9:.2f}" for v in (m.weights, m.optimizer_state, m.activations,
                                                                        m.workspace, m.reserve, m.used, m.capacity)))
    return t


def origins_table(plan: Plan) -> Table:
    t = Table(title="where the numbers came from")
    t.add_column("number")
    t.add_column("origin")
    for key, origin in plan.origins.items():
        t.add_row(key, origin)
    return t


def print_plan(plan: Plan, console: Console) -> None:
    """The plan's headline and four tables, then its notes."""
    console.print(plan_headline(plan), style="bold", highlight=False, markup=False)
    for table in (plan_table(plan), tables_table(plan), memory_table(plan), origins_table(plan)):
        console.print(table)
    for note in plan.notes:
        console.print(f"note: {note}")
