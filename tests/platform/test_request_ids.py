"""One id per request, on every surface: the `X-Request-Id` a caller sees (and work's
`meta.request_id`) is the `correlation_id` of every log line its function wrote for that request,
through the Lambda entry points and through the local gateway, with concurrent requests of one
function in one process each keeping their own."""

from __future__ import annotations

import importlib
import io
import json
import logging
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from functions import routes as route_table
from functions.local.lambda_context import LocalContext
from support.events import api_event
from support.http import GatewayServer, client

WORK = "/v1/modules/scaiqueue"
# (function, module, attr to break, request): a request whose domain call fails (a 500)
BROKEN = [
    ("queues", "postbox.queues.service", "list_queues", ("GET", "/api/v1/queues", None)),
    ("keyed-streams", "postbox.keyed_streams.service", "list_streams", ("GET", "/v1/streams", None)),
    ("partitioned", "postbox.partitioned.service", "dead_letters", ("GET", "/api/v1/dlq", None)),
    ("flows", "postbox.flows.state", "get", ("POST", "/streams/v1/state/get", {"query_id": "q", "partition_id": 1})),
    ("durable", "postbox.durable.reads", "read", ("GET", "/v1/stream/x", None)),
    ("work", "postbox.work.scopes", "list_scopes", ("GET", WORK + "/scopes", None)),
]
# (function, request): a request the surface refuses with a 404 of its own
MISSING = [
    ("queues", ("GET", "/api/v1/queues/no-such-queue")),
    ("keyed-streams", ("GET", "/v1/streams/no-such-stream")),
    ("partitioned", ("GET", "/api/v1/resources/queues/no-such-queue")),
    ("flows", ("GET", "/streams/v1/queries/no-such-query")),
    ("durable", ("GET", "/v1/stream/no-such-stream")),
    ("work", ("GET", WORK + "/scopes/no-such-scope")),
    ("console", ("GET", "/console/no-such-file.js")),
]


def _app(function: str):
    module_name, _, entry = route_table.FUNCTIONS[function].rpartition(".")
    module = importlib.import_module(module_name)
    return module, getattr(module, entry)


@pytest.fixture
def logs(monkeypatch) -> Iterator:
    """`logs(function)` starts capturing that function's Powertools JSON lines (what it prints on
    stdout); `logs.lines(function)` are those lines, parsed."""
    streams: dict[str, io.StringIO] = {}

    class Logs:
        def __call__(self, function: str) -> None:
            handler = _app(function)[0].logger.registered_handler
            streams[function] = io.StringIO()
            monkeypatch.setattr(handler, "stream", streams[function])

        def lines(self, function: str) -> list[dict]:
            return [json.loads(x) for x in streams[function].getvalue().splitlines() if x.startswith("{")]

    yield Logs()


def _boom(*_a, **_k):
    raise RuntimeError("a bug of ours")


def _rid(result: dict) -> str:
    return result["headers"]["X-Request-Id"]


@pytest.mark.parametrize(("function", "module", "attr", "request_"), BROKEN, ids=[c[0] for c in BROKEN])
def test_a_500s_id_is_the_correlation_id_of_its_log_line(tenant, monkeypatch, logs, function, module, attr,
                                                          request_):
    monkeypatch.setattr(importlib.import_module(module), attr, _boom)
    logs(function)
    method, path, payload = request_
    event = api_event(method, path, key=tenant.key, body=payload)
    result = _app(function)[1](event, LocalContext(function))
    assert result["statusCode"] == 500
    rid = _rid(result)
    gateway_id = event["requestContext"]["requestId"]
    assert rid == ("req_" + gateway_id if function == "work" else gateway_id)
    if function == "work":
        assert json.loads(result["body"])["meta"]["request_id"] == rid
    lines = logs.lines(function)
    assert [x["message"] for x in lines] == ["request failed: RuntimeError"]
    assert "a bug of ours" in lines[0]["exception"]
    assert all(x["correlation_id"] == rid and x["tenant"] == tenant.tenant_id for x in lines)


@pytest.mark.parametrize(("function", "request_"), MISSING, ids=[c[0] for c in MISSING])
def test_every_surface_answers_its_request_id(tenant, logs, function, request_):
    logs(function)
    method, path = request_
    event = api_event(method, path, key=tenant.key)
    result = _app(function)[1](event, LocalContext(function))
    assert result["statusCode"] == 404
    gateway_id = event["requestContext"]["requestId"]
    assert _rid(result) == ("req_" + gateway_id if function == "work" else gateway_id)
    if function == "work":
        assert json.loads(result["body"])["meta"]["request_id"] == _rid(result)
    assert logs.lines(function) == []  # a refusal writes no line: no more lines than before


def test_a_function_that_raises_logs_the_request_id(tenant, monkeypatch, logs):
    """The console has no error envelope: a bug fails the function (API Gateway's own 500), and its
    one line carries the id API Gateway answers in `apigw-requestid`."""
    monkeypatch.setattr(importlib.import_module("functions.api.console.app"), "_asset", _boom)
    logs("console")
    event = api_event("GET", "/console", key=tenant.key)
    with pytest.raises(RuntimeError):
        _app("console")[1](event, LocalContext("console"))
    lines = logs.lines("console")
    assert [x["message"] for x in lines] == ["handler failed"]
    assert lines[0]["correlation_id"] == event["requestContext"]["requestId"]


def test_concurrent_requests_of_one_function_keep_their_own_ids(tenant, monkeypatch, logs):
    """The local gateway calls one function from many threads at once: each line names its own request."""
    mark = threading.local()

    def boom(*_a, **_k):
        threading.Event().wait(0.002)  # let the other threads' requests interleave with this one
        raise RuntimeError(mark.value)

    monkeypatch.setattr(importlib.import_module("postbox.queues.service"), "list_queues", boom)
    logs("queues")
    _, handler = _app("queues")

    def call(n: int) -> tuple[str, str]:
        mark.value = f"marker-{n}"
        result = handler(api_event("GET", "/api/v1/queues", key=tenant.key), LocalContext("queues"))
        return mark.value, _rid(result)

    with ThreadPoolExecutor(8) as pool:
        answered = dict(pool.map(call, range(64)))
    logged = {}
    for line in logs.lines("queues"):
        marker = line["exception"].rsplit("RuntimeError: ", 1)[1].strip()
        logged[marker] = line["correlation_id"]
    assert logged == answered
    assert len(set(answered.values())) == 64


@pytest.fixture
def served(database_url):
    server = GatewayServer().start()
    yield server
    server.stop()


@pytest.mark.parametrize("function", ["queues", "work"])
def test_through_the_local_gateway_the_answer_and_the_log_share_the_id(served, tenant, monkeypatch, logs, function):
    _, module, attr, (method, path, _) = next(c for c in BROKEN if c[0] == function)
    monkeypatch.setattr(importlib.import_module(module), attr, _boom)
    logs(function)
    with client(served.url, tenant.key) as api:
        answer = api.request(method, path)
    assert answer.status_code == 500
    rid = answer.headers["x-request-id"]
    gateway_id = answer.headers["apigw-requestid"]
    assert rid == ("req_" + gateway_id if function == "work" else gateway_id)
    if function == "work":
        assert answer.json()["meta"]["request_id"] == rid
    assert [x["correlation_id"] for x in logs.lines(function)] == [rid]


def test_the_local_gateways_ids_are_shaped_as_api_gateways(served, tenant):
    with client(served.url, tenant.key) as api:
        answer = api.get("/api/v1/queues")
    assert answer.status_code == 200
    assert answer.headers["x-request-id"] == answer.headers["apigw-requestid"]
    assert len(answer.headers["x-request-id"]) == 16 and answer.headers["x-request-id"].endswith("=")


def test_no_log_line_of_a_success(tenant, logs, caplog):
    """A request that succeeds writes no line of its own (as before: the id costs no log volume)."""
    logs("queues")
    with caplog.at_level(logging.INFO, logger="postbox"):
        result = _app("queues")[1](api_event("GET", "/api/v1/queues", key=tenant.key), LocalContext("queues"))
    assert result["statusCode"] == 200 and _rid(result)
    assert logs.lines("queues") == [] and not caplog.records
