"""The route and schedule tables are the single source of truth: prove the code agrees with them."""

from __future__ import annotations

import importlib
import json
import re

import pytest

from functions.local.events import http_event
from functions.local.gateway import resolver_of
from functions.local.invoke import entry_point
from functions.local.lambda_context import LocalContext
from functions.routes import FUNCTIONS, ROUTES, match, routes_for
from functions.schedules import AGENTS

RESOLVED = sorted(f for f, dotted in FUNCTIONS.items() if resolver_of(dotted) is not None)


def _resolver_routes(function: str) -> set[tuple[str, str]]:
    module = importlib.import_module(FUNCTIONS[function].rpartition(".")[0])
    app = module.app
    app.include_lazy_routers()  # a lazily included router's routes are the function's too
    return {(r.method, r.path) for r in [*app._static_routes, *app._dynamic_routes]}


@pytest.mark.parametrize("function", RESOLVED)
def test_each_resolver_serves_exactly_its_rows(function):
    expected = {(r.method, r.resolver_path) for r in routes_for(function)}
    assert _resolver_routes(function) == expected


def test_only_the_sqs_function_reads_its_events_without_a_resolver():
    assert sorted(set(FUNCTIONS) - set(RESOLVED)) == ["sqs"]


@pytest.mark.parametrize("route", routes_for("sqs"), ids=lambda r: r.route_key)
def test_the_sqs_function_answers_each_of_its_rows_as_sqs(route):
    """Each row reaches SQS's endpoint: an unsigned request is refused in SQS's own shape (JSON's
    `__type` and `x-amzn-query-error`, or the Query protocol's `<ErrorResponse>` for a GET)."""
    params = {"account": "000000000000", "queue": "q"} if "{queue}" in route.path else None
    path = route.path.replace("{account}", "000000000000").replace("{queue}", "q")
    event = http_event(route.method, path, route=route, path_parameters=params,
                       headers={"content-type": "application/x-amz-json-1.0"},
                       body=b"{}" if route.method == "POST" else None)
    result = entry_point(FUNCTIONS["sqs"])(event, LocalContext("sqs"))
    assert 400 <= result["statusCode"] < 500
    assert result["headers"]["x-amzn-RequestId"] == event["requestContext"]["requestId"]
    if route.method == "GET":
        assert "<ErrorResponse" in result["body"] and "MissingAuthenticationToken" in result["body"]
    else:
        assert json.loads(result["body"])["__type"].endswith("#MissingRequiredParameterException")
        assert result["headers"]["x-amzn-query-error"] == "MissingParameter;Sender"


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


def test_match_routes_a_trailing_slash_as_api_gateway_does():
    route, params = match("GET", "/console/")
    assert route.path == "/console" and params == {}


def test_match_misses_unknown_paths_and_methods():
    # An unknown `/api/v1` route goes to the partitioned surface's catch-all (404 in Queen's error
    # shape, which Queen's client reads). Other paths of three or more segments reach the durable
    # surface's catch-all under a hosted-form stream (`/{account}/{stream}/{rest+}`), whose function
    # answers API Gateway's own 404 when `{stream}` is not `s.{name}`; shorter ones reach nothing.
    for method, path in (("GET", "/api/v1/nothing"), ("PUT", "/api/v1/queues"), ("GET", "/api/v1/queues/a/b/c/d"),
                         ("PATCH", "/api/v1/nothing")):
        found = match(method, path)
        assert found is not None and (found[0].function, found[0].path) == ("partitioned", "/api/v1/{path+}")
    assert match("GET", "/api/v1/pop/queue/q")[0].path == "/api/v1/pop/queue/{queue}"  # a real route wins
    assert match("GET", "/v1/nothing/else")[0].path == "/{account}/{stream}/{rest+}"
    assert match("OPTIONS", "/api/v1/nothing")[0].path == "/{account}/{stream}/{rest+}"
    assert match("GET", "/nothing") is None
    assert match("PATCH", "/acme/s.orders") is None


def _sample_path(route) -> str:
    """A request path for the row, each parameter filled with a value no static segment has."""
    return re.sub(r"\{(\w+)(\+?)\}", lambda m: f"p-{m.group(1)}" + ("/more" if m.group(2) else ""), route.path)


def _resolver_pick(function: str, method: str, path: str) -> str | None:
    """The rule the function's resolver serves a request with: the first registered route that matches."""
    module = importlib.import_module(FUNCTIONS[function].rpartition(".")[0])
    module.app.include_lazy_routers()
    for r in [*module.app._static_routes, *module.app._dynamic_routes]:
        if r.method == method and r.rule.match(path):
            return r.path
    return None


@pytest.mark.parametrize("route", [r for r in ROUTES if r.function == "durable"], ids=lambda r: r.route_key)
def test_the_durable_resolver_picks_the_row_api_gateway_picks(route):
    path = _sample_path(route)
    picked, _ = match(route.method, path)
    assert picked == route
    assert _resolver_pick("durable", route.method, path) == route.resolver_path


@pytest.mark.parametrize(("method", "path", "expected"), [
    ("GET", "/v1/stream/bootstrap", "/v1/stream/{name}"),  # static segments win over the hosted form's rows
    ("GET", "/acme/s.orders/snapshot/parts", "/{account}/{stream}/snapshot/{offset}"),
    ("POST", "/acme/s.orders/snapshot/parts", "/{account}/{stream}/{rest+}"),
    ("GET", "/acme/s.orders/incarnation/t/chunk/o/more", "/{account}/{stream}/{rest+}"),
])
def test_the_durable_resolver_agrees_where_rows_overlap(method, path, expected):
    picked, _ = match(method, path)
    assert picked.path == expected
    assert _resolver_pick("durable", method, path) == picked.resolver_path


def test_every_agent_handler_imports_and_has_a_valid_rate():
    for agent in AGENTS:
        module, _, attr = agent.handler.rpartition(".")
        assert callable(getattr(importlib.import_module(module), attr))
        assert agent.schedule_expression.startswith("rate(")
    assert len({a.name for a in AGENTS}) == len(AGENTS)
