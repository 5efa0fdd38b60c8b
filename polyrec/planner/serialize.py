"""Plan <-> JSON: a versioned document, decoded field by field against the dataclass annotations.

Every error names the path of the offending field (``plan.tables[3].weight_dtype``) and what was
expected, so a hand-edited or truncated plan fails with a message a user can act on.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from typing import Any

from polyrec.planner.types import (
    DENSE_DTYPE_BYTES,
    DENSE_STATE_PER_PARAM,
    INDEX_DISTRIBUTIONS,
    INTERACTIONS,
    MEMORY_KINDS,
    OPTIMIZERS,
    OVERLAP_MODES,
    PLAN_VERSION,
    SHARDINGS,
    WEIGHT_BYTES,
    Fleet,
    ModelSpec,
    Plan,
)

#: Allowed values of string fields, by "<class>.<field>".
CHOICES: dict[str, tuple[str, ...]] = {
    "TablePlan.sharding": SHARDINGS,
    "TablePlan.memory": MEMORY_KINDS,
    "TablePlan.weight_dtype": tuple(WEIGHT_BYTES),
    "TablePlan.optimizer": OPTIMIZERS,
    "Plan.overlap": OVERLAP_MODES,
    "Plan.dense_dtype": tuple(DENSE_DTYPE_BYTES),
    "Plan.dense_optimizer": tuple(DENSE_STATE_PER_PARAM),
    "DenseSpec.interaction": INTERACTIONS,
    "ModelSpec.index_distribution": INDEX_DISTRIBUTIONS,
}


class PlanFormatError(ValueError):
    """A plan document that is not a valid plan; the message names the field."""

    def __init__(self, where: str, message: str):
        super().__init__(f"invalid plan: {where}: {message}")
        self.where = where


def _encode(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return {f.name: _encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _encode(v) for k, v in value.items()}
    return value


def plan_to_json(plan: Plan, *, indent: int | None = 1) -> str:
    """The plan as JSON, led by ``"fits": true`` (``Plan.fits``), as ``no_fit_to_json``'s answer is by ``"fits":
    false``: a script reads ``fits`` from either answer."""
    return json.dumps({"fits": plan.fits} | _encode(plan), indent=indent)


def no_fit_to_json(model: ModelSpec, fleet: Fleet, reason: str, *, indent: int | None = 1) -> str:
    """The answer where nothing fits: ``"fits": false``, the ``model`` and ``fleet`` as a plan writes them, and
    the ``reason`` (``no_fit.no_fit_message``: what runs out, and the fleets or batch that would fit). Not a
    plan: ``plan_from_json`` refuses it, naming ``fits``."""
    return json.dumps({"fits": False, "model": _encode(model), "fleet": _encode(fleet), "reason": reason},
                      indent=indent)


def _type_name(hint: Any) -> str:
    return getattr(hint, "__name__", str(hint))


def _decode(hint: Any, value: Any, where: str) -> Any:
    """Check ``value`` against the type ``hint`` and convert lists to tuples, dicts to dataclasses."""
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        return _decode(next(o for o in options if o is not type(None)), value, where)
    if dataclasses.is_dataclass(hint):
        return _decode_dataclass(hint, value, where)
    if origin is tuple:
        if not isinstance(value, list):
            raise PlanFormatError(where, f"expected a list, got {type(value).__name__}")
        item = typing.get_args(hint)[0]
        return tuple(_decode(item, v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise PlanFormatError(where, f"expected an object, got {type(value).__name__}")
        item = typing.get_args(hint)[1]
        return {k: _decode(item, v, f"{where}.{k}") for k, v in value.items()}
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise PlanFormatError(where, f"expected a number, got {value!r}")
        if not math.isfinite(value):  # json reads NaN and Infinity
            raise PlanFormatError(where, f"expected a finite number, got {value!r}")
        return float(value)
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise PlanFormatError(where, f"expected an integer, got {value!r}")
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise PlanFormatError(where, f"expected true or false, got {value!r}")
        return value
    if not isinstance(value, hint):
        raise PlanFormatError(where, f"expected {_type_name(hint)}, got {value!r}")
    return value


def _decode_dataclass(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise PlanFormatError(where, f"expected an object ({cls.__name__}), got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise PlanFormatError(f"{where}.{unknown[0]}", f"unknown field (fields of {cls.__name__}: {', '.join(fields)})")
    kwargs = {}
    for name, f in fields.items():
        path = f"{where}.{name}"
        if name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise PlanFormatError(path, "missing")
            continue
        value = _decode(hints[name], data[name], path)
        choices = CHOICES.get(f"{cls.__name__}.{name}")
        if choices is not None and value not in choices:
            raise PlanFormatError(path, f"must be one of {', '.join(choices)}, got {value!r}")
        kwargs[name] = value
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as err:
        raise PlanFormatError(where, str(err)) from err


def _check_consistency(plan: Plan) -> None:
    """Cross-field checks: every table planned once, ranks inside the fleet, batch positive."""
    world = plan.fleet.world_size
    names = [t.name for t in plan.model.tables]
    planned = [t.table for t in plan.tables]
    for i, tp in enumerate(plan.tables):
        where = f"plan.tables[{i}]"
        if tp.table not in names:
            raise PlanFormatError(f"{where}.table", f"{tp.table!r} is not a table of model {plan.model.name!r}")
        if not tp.ranks or any(not 0 <= r < world for r in tp.ranks):
            raise PlanFormatError(f"{where}.ranks", f"must be a non-empty list of ranks in [0, {world}), got {tp.ranks}")
        if tp.sharding == "table_wise" and len(tp.ranks) != 1:
            raise PlanFormatError(f"{where}.ranks", f"a table_wise table lives on one rank, got {tp.ranks}")
        dim = plan.model.table(tp.table).dim
        if tp.sharding == "column_wise" and dim % len(tp.ranks):
            raise PlanFormatError(f"{where}.ranks", f"dim {dim} does not split into {len(tp.ranks)} equal column "
                                                    f"shards, got {tp.ranks}")
        if tp.memory == "host_cached" and tp.cache_rows < 1:
            raise PlanFormatError(f"{where}.cache_rows", "a host_cached table needs cache_rows >= 1")
    missing = sorted(set(names) - set(planned), key=names.index)
    if missing:
        raise PlanFormatError("plan.tables", f"no entry for table(s) {', '.join(missing)}")
    if len(set(planned)) != len(planned):
        raise PlanFormatError("plan.tables", "a table is planned twice")
    if plan.batch_per_gpu < 1:
        raise PlanFormatError("plan.batch_per_gpu", f"must be >= 1, got {plan.batch_per_gpu}")
    _check_memory(plan)


def _check_memory(plan: Plan) -> None:
    """One memory entry per rank of the fleet, in rank order, of that rank's device, bytes not negative
    (``Plan.fits`` reads them: a hand-edited list could make it say anything)."""
    devices = plan.fleet.rank_devices()
    ranks = [m.rank for m in plan.memory]
    if ranks != list(range(len(devices))):
        raise PlanFormatError("plan.memory", f"must hold one entry per rank 0..{len(devices) - 1} in order, "
                                             f"got ranks {ranks}")
    for m in plan.memory:
        where = f"plan.memory[{m.rank}]"
        if m.device != devices[m.rank]:
            raise PlanFormatError(f"{where}.device", f"rank {m.rank} is a {devices[m.rank]} in the fleet, got {m.device!r}")
        for name in ("weights", "optimizer_state", "activations", "workspace", "reserve", "capacity", "host_bytes"):
            if getattr(m, name) < 0:
                raise PlanFormatError(f"{where}.{name}", f"must be >= 0, got {getattr(m, name)}")


def plan_from_json(text: str) -> Plan:
    """Parse and validate a plan document written by :func:`plan_to_json`."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise PlanFormatError("<document>", f"not valid JSON: {err}") from err
    if not isinstance(data, dict):
        raise PlanFormatError("plan", "expected a JSON object")
    fits = data.pop("fits", True)  # a plan written before plans carried it has none
    if fits is False:  # polyrec plan --json's answer where nothing fits (no_fit_to_json)
        raise PlanFormatError("plan.fits", "false: polyrec plan's answer where the model does not fit, not a plan "
                                           "(its \"reason\" says why)")
    if fits is not True:
        raise PlanFormatError("plan.fits", f"expected true or false, got {fits!r}")
    if data.get("version") != PLAN_VERSION:
        raise PlanFormatError("plan.version", f"this polyrec reads plan version {PLAN_VERSION}, "
                                              f"got {data.get('version')!r}")
    plan = _decode_dataclass(Plan, data, "plan")
    _check_consistency(plan)
    if not plan.fits:  # the planner writes none such: its memory would contradict its "fits"
        over = next(m for m in plan.memory if not m.fits)
        raise PlanFormatError("plan.fits", f"plan.memory[{over.rank}] needs {over.used + over.reserve:,} bytes with "
                                           f"the reserve, of its {over.capacity:,}: not a plan that fits")
    return plan
