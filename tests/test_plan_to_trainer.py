"""A `polyrec plan` JSON drives the sharding of a multi-rank run (polyrec.runtime.parallel)."""

from __future__ import annotations

import pytest

from polyrec.models import preset
from polyrec.planner.propose import make_plan
from polyrec.planner.types import model_spec_from_config, parse_fleet
from polyrec.runtime.parallel import PLAN_KINDS, shardings_from_plan
from polyrec.runtime.sharding import make_shards


@pytest.fixture
def plan_file(tmp_path):
    config = preset("dcnv2-small")
    plan = make_plan(model_spec_from_config(config), parse_fleet("H200x2"))
    path = tmp_path / "plan.json"
    path.write_text(plan.to_json())
    return config, plan, path


def test_plan_shardings_follow_the_plan(plan_file):
    config, plan, path = plan_file
    shardings = shardings_from_plan(path, config, world_size=2)
    assert len(shardings) == config.num_tables
    for table, sharding in zip(plan.model.tables, shardings):
        planned = plan.table_plan(table.name)
        assert sharding.kind == PLAN_KINDS[planned.sharding] and sharding.ranks == tuple(planned.ranks)
    shards = make_shards(config.table_rows, [config.embedding_dim] * config.num_tables, shardings, 2)
    assert {s.table for s in shards} == set(range(config.num_tables))  # every table placed


def test_plan_for_another_fleet_or_model_is_refused(plan_file):
    config, _, path = plan_file
    with pytest.raises(ValueError, match="this job has 4 ranks"):
        shardings_from_plan(path, config, world_size=4)
    with pytest.raises(ValueError, match="not this run's model"):
        shardings_from_plan(path, preset("mlperf-dcnv2"), world_size=2)
