"""Co-design planner: model spec + fleet -> Plan (placement, sharding, precision, batch, kernel configs,
predicted step time and memory); co-design search over model dimensions; fleet what-if reports."""

from polyrec.planner.propose import NoFitError, make_plan
from polyrec.planner.serialize import PlanFormatError
from polyrec.planner.types import (
    Fleet,
    FleetError,
    ModelSpec,
    Plan,
    PlanConstraints,
    model_config_fields,
    model_spec_from_config,
    parse_fleet,
)

__all__ = ["Fleet", "FleetError", "ModelSpec", "NoFitError", "Plan", "PlanConstraints", "PlanFormatError",
           "make_plan", "model_config_fields", "model_spec_from_config", "parse_fleet"]
