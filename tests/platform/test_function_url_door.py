"""The front door a surface function keeps itself on a Lambda function URL (`frontDoor: function-url`):
the events a function URL sends (no route in them), answered as API Gateway answered: the route
table's 404, the payload's 413, the plan's request rate's 429, CORS for browsers, and the access
line the function writes in API Gateway's place."""

from __future__ import annotations

import json

import pytest

from functions import door, request_record
from functions.api.durable.app import handler as durable
from functions.api.queues.app import handler as queues
from functions.api.sqs.app import handler as sqs
from functions.local.lambda_context import LocalContext
from postbox import db
from support.events import api_event, url_event
from support.tenants import new_tenant


@pytest.fixture
def function_url(monkeypatch):
    monkeypatch.setenv("POSTBOX_FRONT_DOOR", "function-url")


def _call(handler, event) -> dict:
    return handler(event, LocalContext("door-test"))


def _message(answer: dict) -> str:
    return json.loads(answer["body"])["message"]


def test_a_routed_request_reaches_its_handler_with_the_route_filled_in(function_url, tenant):
    created = _call(queues, url_event("POST", "/api/v1/queues", key=tenant.key, body={"name": "door"}))
    assert created["statusCode"] == 201, created
    event = url_event("POST", "/api/v1/queues/door/send", key=tenant.key, body={"message": {"n": 1}})
    assert event["routeKey"] == "$default" and "pathParameters" not in event
    sent = _call(queues, event)
    assert sent["statusCode"] == 201 and json.loads(sent["body"])["msg_id"]
    assert event["routeKey"] == "POST /api/v1/queues/{name}/send"
    assert event["pathParameters"] == {"name": "door"}


def test_a_path_no_route_sends_to_this_function_is_api_gateways_404(function_url, tenant):
    for method, path in (("GET", "/nowhere"), ("POST", "/v1/stream/elsewhere"), ("PATCH", "/api/v1/queues")):
        answer = _call(queues, url_event(method, path, key=tenant.key, body={}))
        assert answer["statusCode"] == 404 and _message(answer) == "Not Found", (method, path, answer)


def test_a_body_over_lambdas_payload_is_api_gateways_413(function_url, tenant):
    big = "x" * (door.MAX_EVENT_BODY_BYTES + 1)
    answer = _call(durable, url_event("POST", "/v1/stream/big", key=tenant.key, raw_body=big,
                                      headers={"content-type": "text/plain"}))
    assert answer["statusCode"] == 413 and _message(answer) == "Request Entity Too Large"
    fits = _call(durable, url_event("PUT", "/v1/stream/small", key=tenant.key, raw_body="hello",
                                    headers={"content-type": "text/plain"}))
    assert fits["statusCode"] == 201, fits


def test_a_tenant_over_its_plans_request_rate_is_api_gateways_429(function_url, database_url):
    with db.connection() as conn:
        conn.execute("INSERT INTO plans (name, max_queues, messages_month, max_message_bytes, storage_bytes,"
                     " retention_days, requests_minute) VALUES ('door-rate', 10, 1000, 1024, 1000000, 1, 3)"
                     " ON CONFLICT (name) DO NOTHING")
    slow, other = new_tenant(plan="door-rate"), new_tenant(plan="door-rate")
    answers = [_call(queues, url_event("GET", "/api/v1/queues", key=slow.key)) for _ in range(4)]
    assert [a["statusCode"] for a in answers] == [200, 200, 200, 429]
    assert _message(answers[3]) == "Too Many Requests" and int(answers[3]["headers"]["Retry-After"]) >= 1
    assert _call(queues, url_event("GET", "/api/v1/queues", key=other.key))["statusCode"] == 200  # per tenant


def test_behind_api_gateway_the_function_leaves_routes_sizes_and_rates_to_it(tenant, database_url):
    """The default door: the function's own resolver answers a path it does not serve, in its envelope."""
    answer = _call(queues, url_event("GET", "/nowhere", key=tenant.key))
    assert answer["statusCode"] == 404 and "message" not in json.loads(answer["body"])
    assert "Access-Control-Allow-Origin" not in answer["headers"]


def test_cors_headers_for_an_allowed_origin_and_a_preflight_as_the_url_answers_it(function_url, tenant,
                                                                                  monkeypatch):
    answer = _call(queues, url_event("GET", "/api/v1/queues", key=tenant.key,
                                     headers={"origin": "https://app.example"}))
    assert answer["statusCode"] == 200
    assert answer["headers"]["Access-Control-Allow-Origin"] == "*"
    assert "x-request-id" in answer["headers"]["Access-Control-Expose-Headers"]
    assert "Access-Control-Allow-Origin" not in _call(queues, url_event("GET", "/api/v1/queues",
                                                                        key=tenant.key))["headers"]
    monkeypatch.setenv("POSTBOX_CORS_ORIGINS", "https://app.example, https://admin.example")
    mine = _call(queues, url_event("GET", "/api/v1/queues", key=tenant.key, headers={"origin": "https://app.example"}))
    assert mine["headers"]["Access-Control-Allow-Origin"] == "https://app.example"
    assert mine["headers"]["Vary"] == "Origin"
    theirs = _call(queues, url_event("GET", "/api/v1/queues", key=tenant.key, headers={"origin": "https://evil.example"}))
    assert "Access-Control-Allow-Origin" not in theirs["headers"]
    asked = door.preflight({"Origin": "https://admin.example", "Access-Control-Request-Method": "post",
                            "Access-Control-Request-Headers": "apikey, content-type"})
    assert asked["statusCode"] == 200 and asked["headers"]["Access-Control-Allow-Origin"] == "https://admin.example"
    assert asked["headers"]["Access-Control-Allow-Methods"] == "POST"
    assert {"apikey", "content-type"} <= set(asked["headers"]["Access-Control-Allow-Headers"].split(", "))
    assert "Access-Control-Allow-Origin" not in door.preflight({"Origin": "https://evil.example",
                                                                "Access-Control-Request-Method": "GET"})["headers"]
    assert door.preflight({"Origin": "https://app.example"}) is None  # no method asked: not a preflight


def test_durable_keeps_its_own_cors_headers(function_url, tenant):
    answer = _call(durable, url_event("PUT", "/v1/stream/cors", key=tenant.key, raw_body="a",
                                      headers={"content-type": "text/plain", "origin": "https://app.example"}))
    assert answer["statusCode"] == 201
    exposed = [v for k, v in answer["headers"].items() if k.lower() == "access-control-expose-headers"]
    assert len(exposed) == 1 and "Stream-Next-Offset" in exposed[0]


def test_sqs_endpoint_is_routed_by_the_door_too(function_url, database_url):
    assert _call(sqs, url_event("POST", "/api/v1/queues", body={}))["statusCode"] == 404
    unsigned = _call(sqs, url_event("POST", "/sqs", raw_body="{}", headers={"x-amz-target": "AmazonSQS.ListQueues"}))
    assert unsigned["statusCode"] not in (404, 500)  # the SQS face's own refusal of an unsigned request


def test_the_function_writes_the_access_line_of_a_refused_request(function_url, tenant, monkeypatch, capsys):
    """API Gateway logged the requests it refused itself; on a function URL the function does."""
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    monkeypatch.setattr(request_record, "SAMPLE_RATE", 0.0)
    from functions.observability import instrument

    _, _, wrap = instrument("queues")
    handler = wrap(lambda event, context: {"statusCode": 200, "body": "{}"})
    answer = handler(url_event("GET", "/elsewhere", key=tenant.key, source_ip="203.0.113.9"), LocalContext("q"))
    assert answer["statusCode"] == 404
    (line,) = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x]
    assert (line["status"], line["ip"], line["request"]) == (404, "203.0.113.9", "GET /elsewhere")
    assert line["correlation_id"] == answer["headers"]["X-Request-Id"]


def test_api_gateway_events_still_pass_through_the_door_unchanged(function_url, tenant):
    """An event API Gateway routed (its route already in it) is admitted the same."""
    answer = _call(queues, api_event("GET", "/api/v1/queues", key=tenant.key))
    assert answer["statusCode"] == 200


@pytest.mark.parametrize(("front_door", "longest_s"), [("api-gateway", 25.0), ("function-url", 40.0)])
def test_a_long_poll_waits_past_api_gateways_bound_only_behind_function_urls(monkeypatch, front_door, longest_s):
    """On AWS behind API Gateway a wait ends inside the HTTP API's 30 s; behind function URLs the
    stack's longPollMs (kept below the function's timeout) is the bound, however long."""
    from postbox import config, wakeup

    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "postbox-test-queues")
    monkeypatch.setenv("POSTBOX_LONG_POLL_MS", "40000")
    monkeypatch.setenv("POSTBOX_FRONT_DOOR", front_door)
    config.reset()
    try:
        assert wakeup.max_wait_seconds() == longest_s
    finally:
        monkeypatch.undo()
        config.reset()
