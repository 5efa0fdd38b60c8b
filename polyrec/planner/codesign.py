"""Co-design: the largest model (parameters) that meets a throughput target and fits a fleet.

The design space scales a base model along five axes: rows of the hashed tables (hash sizes),
embedding dim, DCN-v2 rank and depth, and MLP widths. The search is greedy growth: start from the
smallest design, and at each round take the one-step growth that adds the most parameters while the
plan still fits and meets the target; stop when no growth does. Rows grow until memory binds (the
parameters are mostly in the tables), then the dense axes grow until compute binds, so the answer
differs by accelerator: more rows where HBM is larger, wider or deeper dense layers where matmul
rates are higher.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from polyrec.planner.dense import dense_params
from polyrec.planner.propose import plan_if_fits
from polyrec.planner.types import DenseSpec, Fleet, ModelSpec, Plan, PlanConstraints, TableSpec

#: Rows multipliers of the hashed tables (steps of about sqrt(2)).
ROW_SCALES: tuple[float, ...] = (0.25, 0.35, 0.5, 0.7, 1.0, 1.4, 2.0, 2.8, 4.0, 5.6, 8.0)
#: Tables with at least this many rows are hashed (their size is a design choice); smaller ones are
#: the true cardinality of their feature and keep it (estimate; Criteo's small features have < 100k values).
HASHED_MIN_ROWS = 100_000
EMBEDDING_DIMS: tuple[int, ...] = (32, 64, 128, 256)
DCN_RANKS: tuple[int, ...] = (128, 256, 512, 1024)
DCN_LAYERS: tuple[int, ...] = (1, 2, 3, 4)
MLP_SCALES: tuple[float, ...] = (0.5, 1.0, 2.0)
#: MLP widths are rounded to a multiple of this (tile-friendly GEMM sizes).
WIDTH_QUANTUM = 64
#: Batch per GPU of the co-design plans when the constraints fix none (MLPerf's per-step global batch).
CODESIGN_BATCH = 65536


@dataclass(frozen=True, kw_only=True, slots=True)
class Design:
    """Indices into the axes above."""

    rows: int
    dim: int
    rank: int
    layers: int
    mlp: int

    def grown(self) -> list[Design]:
        limits = {"rows": len(ROW_SCALES), "dim": len(EMBEDDING_DIMS), "rank": len(DCN_RANKS),
                  "layers": len(DCN_LAYERS), "mlp": len(MLP_SCALES)}
        out = []
        for axis, limit in limits.items():
            if getattr(self, axis) + 1 < limit:
                out.append(dataclasses.replace(self, **{axis: getattr(self, axis) + 1}))
        return out


@dataclass(kw_only=True, slots=True)
class CodesignResult:
    """The chosen design on one fleet (None when even the smallest design misses the target)."""

    fleet: Fleet
    target_samples_per_s: float
    model: ModelSpec | None
    plan: Plan | None
    params: int
    reason: str  # why the search stopped

    @property
    def fits(self) -> bool:
        """Whether a design fits the fleet and meets the target (``"fits"`` in ``polyrec plan --codesign --json``;
        ``polyrec plan`` exits 1 where one fleet has none, as where a plan does not fit)."""
        return self.model is not None


def _width(w: int, scale: float) -> int:
    return max(WIDTH_QUANTUM, round(w * scale / WIDTH_QUANTUM) * WIDTH_QUANTUM)


def apply_design(base: ModelSpec, d: Design) -> ModelSpec:
    """The base model with the design's dimensions."""
    dim, scale = EMBEDDING_DIMS[d.dim], MLP_SCALES[d.mlp]
    tables = tuple(TableSpec(name=t.name, rows=max(1, round(t.rows * ROW_SCALES[d.rows])) if t.rows >= HASHED_MIN_ROWS
                             else t.rows, dim=dim, pooling=t.pooling) for t in base.tables)
    b = base.dense
    dcn = b.interaction == "dcnv2"
    dense = DenseSpec(num_dense=b.num_dense, bottom_mlp=(*(_width(w, scale) for w in b.bottom_mlp[:-1]), dim),
                      top_mlp=(*(_width(w, scale) for w in b.top_mlp[:-1]), 1), interaction=b.interaction,
                      dcn_layers=DCN_LAYERS[d.layers] if dcn else 0, dcn_rank=DCN_RANKS[d.rank] if dcn else 0)
    return ModelSpec(name=f"{base.name}-codesign", tables=tables, dense=dense, index_distribution=base.index_distribution)


def parameters(model: ModelSpec) -> int:
    return sum(t.rows * t.dim for t in model.tables) + dense_params(model)


def _evaluate(base: ModelSpec, d: Design, fleet: Fleet, c: PlanConstraints, target: float) -> tuple[ModelSpec, Plan] | None:
    model = apply_design(base, d)
    plan = plan_if_fits(model, fleet, c)
    return (model, plan) if plan is not None and plan.samples_per_s >= target else None


def _no_design_reason(smallest: ModelSpec, plan: Plan | None, fleet: Fleet, c: PlanConstraints, target: float) -> str:
    """Why the smallest design, ``smallest`` planned as ``plan`` (None: it does not fit), is no design for ``fleet``:
    that it does not fit at the batch, or the samples/s it reaches (it said "misses the target or does not fit",
    neither which nor by how much)."""
    size = f"{parameters(smallest) / 1e9:.2f}B parameters"
    if plan is None:
        return f"even the smallest design ({size}) does not fit {fleet.text} at batch {c.batch_per_gpu:,} per GPU"
    return (f"even the smallest design misses the target: {plan.samples_per_s:,.0f} samples/s on {fleet.text} "
            f"({size}), below {target:,.0f}")


def codesign(base: ModelSpec, fleet: Fleet, target_samples_per_s: float,
             constraints: PlanConstraints | None = None) -> CodesignResult:
    """Greedy growth from the smallest design (see the module docstring), at the constraints' batch per GPU,
    else CODESIGN_BATCH within their ``max_batch_per_gpu``."""
    if not math.isfinite(target_samples_per_s) or target_samples_per_s < 0:
        raise ValueError(f"codesign: target_samples_per_s must be a finite number of samples/s, 0 or more, "
                         f"got {target_samples_per_s}")
    given = constraints or PlanConstraints()
    c = dataclasses.replace(given, batch_per_gpu=given.batch_per_gpu or min(CODESIGN_BATCH, given.max_batch_per_gpu))
    dcn = base.dense.interaction == "dcnv2"
    current = Design(rows=0, dim=0, rank=0, layers=0, mlp=0)
    smallest = apply_design(base, current)
    first = plan_if_fits(smallest, fleet, c)
    if first is None or first.samples_per_s < target_samples_per_s:
        return CodesignResult(fleet=fleet, target_samples_per_s=target_samples_per_s, model=None, plan=None, params=0,
                              reason=_no_design_reason(smallest, first, fleet, c, target_samples_per_s))
    found = smallest, first
    seen = {current}
    while True:
        options = [g for g in current.grown() if g not in seen and (dcn or (g.rank == 0 and g.layers == 0))]
        seen.update(options)
        ranked = sorted(options, key=lambda g: -parameters(apply_design(base, g)))
        step = None
        for g in ranked:
            step = _evaluate(base, g, fleet, c, target_samples_per_s)
            if step is not None:
                current, found = g, step
                break
        if step is None:
            break
    model, plan = found
    return CodesignResult(fleet=fleet, target_samples_per_s=target_samples_per_s, model=model, plan=plan,
                          params=parameters(model), reason="no one-step growth fits and meets the target")
