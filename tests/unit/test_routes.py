"""The route and schedule tables are the single source of truth: prove the code agrees with them."""

from __future__ import annotations

import importlib

import pytest

from functions.routes import FUNCTIONS, ROUTES, match, routes_for
from functions.schedules import AGENTS


def _resolver_routes(function: str) -> set[tuple[str, str]]:
    module = importlib.import_module(FUNCTIONS[function].rpartition(".")[0])
    app = module.app
    return {(r.method, r.path) for r in [*app._static_routes, *app._dynamic_routes]}


@pytest.mark.parametrize("function", sorted(FUNCTIONS))
def test_each_resolver_serves_exactly_its_rows(function):
    expected = {(r.method, r.resolver_path) for r in routes_for(function)}
    assert _resolver_routes(function) == expected


def test_every_route_belongs_to_a_function_and_is_unique():
    assert {r.function for r in ROUTES} <= set(FUNCTIONS)
    keys = [r.route_key for r in ROUTES]
    assert len(keys) == len(set(keys))


def test_match_extracts_path_parameters():
    route, params = match("DELETE", "/api/v1/queues/emails/messages/42")
    assert route.path == "/api/v1/queues/{name}/messages/{msg_id}"
    assert params == {"name": "emails", "msg_id": "42"}
    route, params = match("GET", "/api/v1/queues/emails/messages")
    assert route.path == "/api/v1/queues/{name}/messages" and params == {"name": "emails"}


def test_match_misses_unknown_paths_and_methods():
    # An unknown `/api/v1` route goes to the partitioned surface's catch-all (404 in Queen's error
    # shape, which Queen's client reads); elsewhere only the durable surface's greedy
    # `/{account}/{path+}` (the spec's `/{account}/s.{name}`) can catch an unknown path.
    for method, path in (("GET", "/api/v1/nothing"), ("PUT", "/api/v1/queues"), ("GET", "/api/v1/queues/a/b/c/d"),
                         ("PATCH", "/api/v1/nothing")):
        found = match(method, path)
        assert found is not None and (found[0].function, found[0].path) == ("partitioned", "/api/v1/{path+}")
    assert match("GET", "/api/v1/pop/queue/q")[0].path == "/api/v1/pop/queue/{queue}"  # a real route wins
    assert match("GET", "/v1/nothing/else")[0].path == "/{account}/{path+}"
    assert match("GET", "/nothing") is None
    assert match("OPTIONS", "/api/v1/nothing")[0].path == "/{account}/{path+}"


def test_every_agent_handler_imports_and_has_a_valid_rate():
    for agent in AGENTS:
        module, _, attr = agent.handler.rpartition(".")
        assert callable(getattr(importlib.import_module(module), attr))
        assert agent.schedule_expression.startswith("rate(")
    assert len({a.name for a in AGENTS}) == len(AGENTS)
