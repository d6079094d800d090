"""Each function's memory comes from the memory table (functions/sizes.py) unless a stack's config sets
a kind of function's size as a whole; every size is one the cost model priced."""

from __future__ import annotations

from stack_harness import run_stack

from functions import routes as route_table
from functions import schedules as agent_table
from functions import sizes

FUNCTION = "aws:lambda/function:Function"


def _memory(config: dict | None = None) -> dict[str, int]:
    run = run_stack("staging", config)
    return {r.inputs["environment"]["variables"]["POWERTOOLS_SERVICE_NAME"]: r.inputs["memorySize"]
            for r in run.of_type(FUNCTION)}


def test_every_function_gets_its_size_from_the_table():
    memory = _memory()
    assert {n: memory[n] for n in route_table.FUNCTIONS} == {n: sizes.surface_mb(n) for n in route_table.FUNCTIONS}
    assert {a.name: memory[a.name] for a in agent_table.AGENTS} == {a.name: sizes.agent_mb(a.name)
                                                                   for a in agent_table.AGENTS}
    assert memory["migrate"] == sizes.MIGRATE_MB


def test_the_table_names_only_functions_that_exist_with_sizes_the_model_priced():
    assert set(sizes.SURFACE_MB) == set(route_table.FUNCTIONS)
    assert set(sizes.AGENT_MB) <= {a.name for a in agent_table.AGENTS}
    chosen = [*sizes.SURFACE_MB.values(), *sizes.AGENT_MB.values(), sizes.AGENT_DEFAULT_MB, sizes.MIGRATE_MB,
              sizes.SURFACE_DEFAULT_MB]
    assert set(chosen) <= set(sizes.SIZES_MB)


def test_config_sets_a_kind_of_function_as_a_whole():
    memory = _memory({"agentMemoryMb": 1024, "migrateMemoryMb": 256})
    assert {memory[a.name] for a in agent_table.AGENTS} == {1024}
    assert memory["migrate"] == 256
    assert {n: memory[n] for n in route_table.FUNCTIONS} == {n: sizes.surface_mb(n) for n in route_table.FUNCTIONS}
