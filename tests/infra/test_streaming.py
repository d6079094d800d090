"""Streamed answers and SnapStart in the Pulumi program (under mocks): the durable function runs the
streaming runtime with Lambda's longest timeout; beside the HTTP API a REST API streams every durable
route to it; a function URL of the durable surface streams; SnapStart functions are published and
every door invokes their alias."""

from __future__ import annotations

import pytest
from stack_harness import ACCOUNT, REGION, StackRun, run_stack
from test_stack import FUNCTION, functions_by_name

from functions import routes as route_table
from infra import streaming

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:pulumi_aws")

REST = "aws:apigateway/restApi:RestApi"
INTEGRATION = "aws:apigateway/integration:Integration"
PERMISSION = "aws:lambda/permission:Permission"
ALIAS = "aws:lambda/alias:Alias"
DURABLE_ARN = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:postbox-prod-durable"


@pytest.fixture(scope="module")
def prod() -> StackRun:
    return run_stack("prod")


def test_the_durable_function_runs_the_streaming_runtime_for_up_to_15_minutes(prod: StackRun):
    fns = functions_by_name(prod)
    durable = fns["durable"]
    env = durable.inputs["environment"]["variables"]
    assert env["AWS_LAMBDA_EXEC_WRAPPER"] == "/var/task/functions/stream-bootstrap"
    assert env["POSTBOX_STREAM_MAX_SECONDS"] == "840" and durable.inputs["timeout"] == 900
    others = [f for name, f in fns.items() if name != "durable"]
    assert not [f for f in others if "AWS_LAMBDA_EXEC_WRAPPER" in f.inputs["environment"]["variables"]]
    assert all(f.inputs["timeout"] <= 300 for f in others)


def test_a_streaming_rest_api_serves_every_durable_route_beside_the_http_api(prod: StackRun):
    (api,) = prod.of_type(REST)
    assert api.inputs["endpointConfiguration"]["types"] == "REGIONAL"
    (proxy,) = prod.of_type("aws:apigateway/resource:Resource")
    assert proxy.inputs["pathPart"] == "{proxy+}" and proxy.inputs["parentId"] == "root123"
    (method,) = prod.of_type("aws:apigateway/method:Method")
    assert method.inputs["httpMethod"] == "ANY" and method.inputs["authorization"] == "NONE"
    (integration,) = prod.of_type(INTEGRATION)
    assert integration.inputs["type"] == "AWS_PROXY" and integration.inputs["integrationHttpMethod"] == "POST"
    assert integration.inputs["responseTransferMode"] == "STREAM"
    assert integration.inputs["timeoutMilliseconds"] == 900_000
    assert integration.inputs["uri"] == (f"arn:aws:apigateway:{REGION}:lambda:path/2021-11-15/functions/"
                                         f"{DURABLE_ARN}/response-streaming-invocations")
    (permission,) = [p for p in prod.of_type(PERMISSION) if p.name == "rest-invoke-durable"]
    assert permission.inputs["function"] == "postbox-prod-durable"
    assert permission.inputs["principal"] == "apigateway.amazonaws.com"
    assert permission.inputs["sourceArn"] == f"arn:aws:execute-api:{REGION}:{ACCOUNT}:rest123/*/*/*"
    (settings,) = prod.of_type("aws:apigateway/methodSettings:MethodSettings")
    assert settings.inputs["settings"]["throttlingBurstLimit"] == 500
    assert prod.exports["durable_stream_url"] == f"https://rest123.execute-api.{REGION}.amazonaws.com/live"
    # the HTTP API still routes the durable surface (buffered windows) like every other
    durable_routes = {r.route_key for r in route_table.ROUTES if r.function == "durable"}
    keys = {r.inputs["routeKey"] for r in prod.of_type("aws:apigatewayv2/route:Route")}
    assert durable_routes and durable_routes <= keys


def test_the_streaming_rest_api_can_be_left_out():
    run = run_stack("prod", {"durableStreamingApi": "false"})
    assert run.of_type(REST) == [] and run.exports["durable_stream_url"] is None


def test_on_the_function_url_door_the_durable_surfaces_url_streams_and_no_rest_api_is_made():
    run = run_stack("prod", {"frontDoor": "function-url", "snapStart": "durable"})
    urls = {u.name.removeprefix("url-"): u for u in run.of_type("aws:lambda/functionUrl:FunctionUrl")}
    assert set(urls) == set(route_table.FUNCTIONS)
    assert urls["durable"].inputs["invokeMode"] == "RESPONSE_STREAM"
    assert {u.inputs["invokeMode"] for name, u in urls.items() if name != "durable"} == {"BUFFERED"}
    assert urls["durable"].inputs["qualifier"] == "live" and "qualifier" not in urls["queues"].inputs
    perms = {p.name: p for p in run.of_type(PERMISSION)}
    assert perms["url-invoke-durable"].inputs["qualifier"] == "live"
    assert perms["url-invoke-function-durable"].inputs["qualifier"] == "live"
    assert run.of_type(REST) == [] and run.exports["durable_stream_url"] is None
    assert streaming.invoke_mode("durable") == "RESPONSE_STREAM"


def test_snapstart_publishes_the_named_surfaces_and_every_door_invokes_their_alias():
    run = run_stack("prod", {"snapStart": "durable,queues"})
    fns = functions_by_name(run)
    for name, fn in fns.items():
        on = name in ("durable", "queues")
        assert bool(fn.inputs.get("publish")) is on, name
        assert (fn.inputs.get("snapStart") or {}).get("applyOn") == ("PublishedVersions" if on else None), name
    aliases = {a.inputs["functionName"]: a for a in run.of_type(ALIAS)}
    assert set(aliases) == {"postbox-prod-durable", "postbox-prod-queues"}
    assert all(a.inputs["name"] == "live" and a.inputs["functionVersion"] == "1" for a in aliases.values())
    integrations = {i.name: i for i in run.of_type("aws:apigatewayv2/integration:Integration")}
    assert integrations["integration-queues"].inputs["integrationUri"].endswith(
        ":function:postbox-prod-queues:live/invocations")
    assert integrations["integration-work"].inputs["integrationUri"].endswith(":function:postbox-prod-work/invocations")
    perms = {p.name: p for p in run.of_type(PERMISSION)}
    assert perms["apigw-invoke-queues"].inputs["qualifier"] == "live"
    assert perms["rest-invoke-durable"].inputs["qualifier"] == "live"
    assert "qualifier" not in perms["apigw-invoke-work"].inputs
    (rest,) = run.of_type(INTEGRATION)
    assert f"/functions/{DURABLE_ARN}:live/response-streaming-invocations" in rest.inputs["uri"]


def test_snapstart_is_off_by_default_and_surfaces_turns_it_on_for_each(prod: StackRun):
    assert prod.of_type(ALIAS) == [] and not [f for f in prod.of_type(FUNCTION) if f.inputs.get("snapStart")]
    run = run_stack("prod", {"snapStart": "surfaces"})
    assert len(run.of_type(ALIAS)) == len(route_table.FUNCTIONS)


@pytest.mark.parametrize("config, message", [
    ({"snapStart": "durable,queue-retention"}, "snapStart names surface functions"),
    ({"streamMaxSeconds": "900"}, "streamMaxSeconds must be 1..895"),
])
def test_settings_that_cannot_work_are_refused(config, message):
    with pytest.raises(Exception, match=message):
        run_stack("prod", config)
