"""Both front doors under Pulumi mocks (`frontDoor`): API Gateway's HTTP API in front of every
surface (the default), or each surface function's own Lambda function URL, with what API Gateway
gave kept: throttling (reserved concurrency; the plan's rate in the function), CORS, and one base
URL per stack or per surface in the outputs."""

from __future__ import annotations

import pytest
from stack_harness import REGION, StackRun, run_stack

from functions import door
from functions import routes as route_table

URL = "aws:lambda/functionUrl:FunctionUrl"
PERMISSION = "aws:lambda/permission:Permission"


@pytest.fixture(scope="module")
def urls() -> StackRun:
    return run_stack("prod", {"frontDoor": "function-url"})


def _surfaces(run: StackRun) -> dict:
    return {f.name.removeprefix("fn-"): f for f in run.of_type("aws:lambda/function:Function")
            if f.name.removeprefix("fn-") in route_table.FUNCTIONS}


def test_api_gateway_is_the_default_door_with_one_base_url(prod: StackRun):
    assert prod.exports["front_door"] == "api-gateway"
    assert not prod.of_type(URL)
    base = prod.exports["api_url"].rstrip("/")
    assert prod.exports["surface_urls"] == {name: base for name in route_table.FUNCTIONS}
    for fn in _surfaces(prod).values():
        assert fn.inputs["environment"]["variables"]["POSTBOX_FRONT_DOOR"] == "api-gateway"


def test_function_url_door_has_no_api_gateway_and_one_url_per_surface(urls: StackRun):
    assert not [r for r in urls.resources if r.typ.startswith("aws:apigatewayv2/")]
    made = {u.name.removeprefix("url-"): u for u in urls.of_type(URL)}
    assert set(made) == set(route_table.FUNCTIONS)
    functions = _surfaces(urls)
    for name, url in made.items():
        assert url.inputs["functionName"] == functions[name].inputs["name"]
        assert url.inputs["authorizationType"] == "NONE"  # the function resolves the key itself
    assert urls.exports["front_door"] == "function-url" and urls.exports["api_url"] is None
    assert urls.exports["surface_urls"] == {
        name: f"https://url-{name}-0123456789abcdef.lambda-url.{REGION}.on.aws" for name in route_table.FUNCTIONS}


def test_only_the_surfaces_may_be_called_through_their_urls(urls: StackRun):
    granted = {(p.inputs["function"], p.inputs["action"], p.inputs.get("functionUrlAuthType"),
                p.inputs.get("invokedViaFunctionUrl")) for p in urls.of_type(PERMISSION)
               if p.inputs.get("principal") == "*"}
    names = {f.inputs["name"] for f in _surfaces(urls).values()}
    assert granted == {(n, "lambda:InvokeFunctionUrl", "NONE", None) for n in names} | {
        (n, "lambda:InvokeFunction", None, True) for n in names}


def test_function_urls_answer_cors_from_the_stacks_origins():
    run = run_stack("prod", {"frontDoor": "function-url", "corsAllowOrigins": "https://app.example, https://x.example"})
    for url in run.of_type(URL):
        cors = url.inputs["cors"]
        assert cors["allowOrigins"] == ["https://app.example", "https://x.example"]
        assert cors["allowMethods"] == ["*"] and cors["maxAge"] == door.CORS_MAX_AGE_S
        assert {"apikey", "authorization", "content-type", "producer-id"} <= set(cors["allowHeaders"])
        assert {"x-request-id", "retry-after", "stream-next-offset"} <= set(cors["exposeHeaders"])
        assert len(cors["allowHeaders"]) <= 100 and len(cors["exposeHeaders"]) <= 100  # Lambda's limits
    for fn in _surfaces(run).values():
        assert fn.inputs["environment"]["variables"]["POSTBOX_CORS_ORIGINS"] == "https://app.example,https://x.example"


def test_function_url_door_throttles_with_reserved_concurrency_and_tells_the_functions(urls: StackRun):
    for fn in _surfaces(urls).values():
        assert fn.inputs["reservedConcurrentExecutions"] == 50
        env = fn.inputs["environment"]["variables"]
        assert env["POSTBOX_FRONT_DOOR"] == "function-url"
        assert (env["POSTBOX_LOG_SAMPLE_RATE"], env["POSTBOX_LOG_SLOW_MS"]) == ("0.01", "1000")
    run = run_stack("prod", {"frontDoor": "function-url", "apiReservedConcurrency": 7, "logSampleRate": 0.25,
                             "logSlowMs": 300})
    for fn in _surfaces(run).values():
        assert fn.inputs["reservedConcurrentExecutions"] == 7
        env = fn.inputs["environment"]["variables"]
        assert (env["POSTBOX_LOG_SAMPLE_RATE"], env["POSTBOX_LOG_SLOW_MS"]) == ("0.25", "300")


def test_function_url_door_alarms_and_dashboard_without_api_gateway(urls: StackRun):
    alarms = {a.name for a in urls.of_type("aws:cloudwatch/metricAlarm:MetricAlarm")}
    assert "api-5xx" not in alarms and {f"errors-{n}" for n in route_table.FUNCTIONS} <= alarms
    (board,) = urls.of_type("aws:cloudwatch/dashboard:Dashboard")
    assert "AWS/ApiGateway" not in board.inputs["dashboardBody"]


def test_function_url_door_lets_a_surface_run_past_api_gateways_30_seconds():
    run = run_stack("prod", {"frontDoor": "function-url", "apiTimeoutSeconds": 120})
    # (the durable function's is Lambda's longest, for its streamed answers: test_streaming.py)
    assert {name: fn.inputs["timeout"] for name, fn in _surfaces(run).items()} == {
        name: 900 if name == "durable" else 120 for name in _surfaces(run)}
    with pytest.raises(Exception, match="apiTimeoutSeconds must be 1..30"):
        run_stack("prod", {"apiTimeoutSeconds": 120})


@pytest.mark.parametrize("config, message", [
    ({"frontDoor": "cloudfront"}, "frontDoor must be one of"),
    ({"logSampleRate": 1.5}, "logSampleRate must be 0..1"),
    ({"logSlowMs": -1}, "logSlowMs must not be negative"),
])
def test_bad_door_settings_fail_the_preview(config, message):
    with pytest.raises(Exception, match=message):
        run_stack("prod", config)
