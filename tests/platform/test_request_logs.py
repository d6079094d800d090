"""What a request writes to CloudWatch Logs, measured through the real handlers in an interpreter set
up as Lambda's (metrics on, Lambda's JSON log level INFO): a quick successful request writes nothing
of its own but the EMF record of what it counted (one per invocation, its counts exact); its access
line (correlation id, caller's address, request, status, duration, tenant) is written when it failed,
was slow, or was drawn by the sampling rate; an error keeps its whole story (the exception and the
request). Lambda's own START/END/REPORT lines are dropped by the function's system log level (WARN),
which tests/infra checks on every function."""

from __future__ import annotations

import json

from functions.api.durable.app import handler as durable
from functions.api.keyed_streams.app import handler as keyed_streams
from functions.api.queues.app import handler as queues
from functions.api.work.app import handler as work
from functions.local.lambda_context import LocalContext
from support.events import api_event
from support.lambda_process import logged_bytes, run

BUDGET = 300  # an EMF record of a request's counts, as CloudWatch counts it
LINE_BUDGET = 420  # an access line that is also the EMF record of what the request counted
W = "/v1/modules/scaiqueue"
EVERY_LINE = {"POSTBOX_LOG_SAMPLE_RATE": "1"}


def _in_process(handler, event) -> dict:
    """Set-up requests, through the same handlers in this process."""
    result = handler(event, LocalContext("setup"))
    assert result["statusCode"] < 300, result
    return json.loads(result["body"]) if result.get("body") else {}


def _lines(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines() if line]


def _emf(record: dict, metric: str, service: str) -> None:
    """An embedded-metric-format record of `metric` in the namespace Postbox, dimension `service`."""
    (directive,) = record["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "Postbox" and directive["Dimensions"] == [["service"]]
    assert metric in [m["Name"] for m in directive["Metrics"]]
    assert record["service"] == service and isinstance(record[metric], int) and record[metric] >= 1


def _lean(tenant, answer, output: str, metric: str | None = None, service: str | None = None) -> dict | None:
    """What a quick successful request wrote when not sampled: nothing, or the EMF record of its count
    (with its tenant, for per-tenant sums); returned for further checks."""
    assert answer.get("statusCode", 500) < 400, answer
    lines = _lines(output)
    if metric is None:
        assert lines == [], output
        return None
    assert logged_bytes(output) <= BUDGET, (logged_bytes(output), output)
    (record,) = lines
    _emf(record, metric, service)
    assert record["tenant"] == tenant.tenant_id and "status" not in record
    return record


def _access(tenant, answer, output: str, metric: str | None = None, service: str | None = None) -> dict:
    """The access line a request wrote (sampled, slow or failed), checked; returned for further checks."""
    assert logged_bytes(output) <= LINE_BUDGET, (logged_bytes(output), output)
    (line,) = _lines(output)
    request_id = answer["headers"]["X-Request-Id"]
    assert (line["correlation_id"], line["tenant"], line["status"]) == (request_id, tenant.tenant_id,
                                                                        answer["statusCode"])
    assert line["ip"] == "127.0.0.1" and line["request"].split(" ")[0] in ("GET", "POST")
    assert isinstance(line["ms"], int | float) and line["ms"] >= 0
    if metric:
        _emf(line, metric, service)
    else:
        assert "_aws" not in line and "service" not in line
    return line


def test_queue_hot_paths_write_one_short_line_each(tenant, database_url, tmp_path):
    _in_process(queues, api_event("POST", "/api/v1/queues", key=tenant.key, body={"name": "lean"}))
    sent, batch, read, popped = run("functions.api.queues.app.handler", [
        api_event("POST", "/api/v1/queues/lean/send", key=tenant.key, body={"message": {"order": 1}}),
        api_event("POST", "/api/v1/queues/lean/send_batch", key=tenant.key,
                  body={"messages": [{"order": i} for i in range(10)]}),
        api_event("POST", "/api/v1/queues/lean/read", key=tenant.key, body={"qty": 5, "vt": 30}),
        api_event("POST", "/api/v1/queues/lean/pop", key=tenant.key, body={"qty": 2}),
    ], database_url, tmp_path)
    assert _lean(tenant, *sent, metric="MessagesSent", service="queues")["MessagesSent"] == 1
    assert _lean(tenant, *batch, metric="MessagesSent", service="queues")["MessagesSent"] == 10
    _lean(tenant, *read)
    _lean(tenant, *popped)
    ids = [m["msg_id"] for m in json.loads(read[0]["body"])["messages"]]
    archived, deleted = run("functions.api.queues.app.handler", [
        api_event("POST", "/api/v1/queues/lean/archive", key=tenant.key, body={"msg_ids": ids[:4]}),
        api_event("POST", "/api/v1/queues/lean/delete", key=tenant.key, body={"msg_ids": ids[4:]}),
    ], database_url, tmp_path)
    _lean(tenant, *archived)
    _lean(tenant, *deleted)


def test_keyed_stream_hot_paths_write_one_short_line_each(tenant, database_url, tmp_path):
    _in_process(keyed_streams, api_event("POST", "/v1/streams", key=tenant.key, body={"name": "lean"}))
    _in_process(keyed_streams, api_event("POST", "/v1/streams/lean/subscriptions", key=tenant.key,
                                         body={"name": "w"}))
    published, batch, consumed = run("functions.api.keyed_streams.app.handler", [
        api_event("POST", "/v1/streams/lean/messages", key=tenant.key, body={"key": "k", "payload": {"n": 1}}),
        api_event("POST", "/v1/streams/lean/messages/batch", key=tenant.key,
                  body={"messages": [{"key": f"k{i}", "payload": {"n": i}} for i in range(10)] + [{"key": "x"}]}),
        api_event("POST", "/v1/streams/lean/subscriptions/w/consume", key=tenant.key, body={"max_messages": 10}),
    ], database_url, tmp_path)
    _lean(tenant, *published, metric="MessagesPublished", service="keyed-streams")
    assert _lean(tenant, *batch, metric="MessagesPublished", service="keyed-streams")["MessagesPublished"] == 10
    _lean(tenant, *consumed, metric="MessagesDelivered", service="keyed-streams")
    receipts = [m["receipt"] for m in json.loads(consumed[0]["body"])["messages"]]
    ((acked, output),) = run("functions.api.keyed_streams.app.handler", [
        api_event("POST", "/v1/streams/lean/subscriptions/w/ack", key=tenant.key, body={"receipts": receipts}),
    ], database_url, tmp_path)
    _lean(tenant, acked, output)


def test_partitioned_and_durable_hot_paths_write_one_short_line_each(tenant, database_url, tmp_path):
    pushed, popped = run("functions.api.partitioned.app.handler", [
        api_event("POST", "/api/v1/push", key=tenant.key, body={"items": [{"queue": "lean", "payload": {"n": 1}}]}),
        api_event("GET", "/api/v1/pop/queue/lean", key=tenant.key, query="batch=1"),
    ], database_url, tmp_path)
    _lean(tenant, *pushed, metric="MessagesPushed", service="partitioned")
    _lean(tenant, *popped, metric="MessagesPopped", service="partitioned")
    _in_process(durable, api_event("PUT", "/v1/stream/lean", key=tenant.key, raw_body="[]"))
    appended, read = run("functions.api.durable.app.handler", [
        api_event("POST", "/v1/stream/lean", key=tenant.key, raw_body='[{"n": 1}]'),
        api_event("GET", "/v1/stream/lean", key=tenant.key, query="offset=-1"),
    ], database_url, tmp_path)
    _lean(tenant, *appended)
    _lean(tenant, *read)


def test_work_hot_paths_write_one_short_line_each(tenant, database_url, tmp_path):
    scope = _in_process(work, api_event("POST", f"{W}/scopes", key=tenant.key, body={"slug": "lean"}))["data"]
    base = f"{W}/scopes/{scope['id']}/queues"
    queue = _in_process(work, api_event("POST", base, key=tenant.key, body={"slug": "q"}))["data"]
    published, claimed = run("functions.api.work.app.handler", [
        api_event("POST", f"{base}/{queue['id']}/messages", key=tenant.key, body={"body": "one"}),
        api_event("POST", f"{base}/{queue['id']}/messages/claim", key=tenant.key, body={"batch_size": 5}),
    ], database_url, tmp_path)
    _lean(tenant, *published)
    _lean(tenant, *claimed)
    items = [{"id": m["id"], "claim_token": m["claim_token"]} for m in json.loads(claimed[0]["body"])["data"]]
    ((completed, output),) = run("functions.api.work.app.handler", [
        api_event("POST", f"{W}/scopes/{scope['id']}/messages/complete-batch", key=tenant.key, body={"items": items}),
    ], database_url, tmp_path)
    _lean(tenant, completed, output)


def test_a_refusal_writes_one_line_naming_the_request(tenant, database_url, tmp_path):
    """A 4xx is the caller's: one line, which also says what was asked (no stack, no body)."""
    (missing, keyless) = run("functions.api.queues.app.handler", [
        api_event("POST", "/api/v1/queues/nowhere/send", key=tenant.key, body={"message": 1}),
        api_event("GET", "/api/v1/queues"),
    ], database_url, tmp_path)
    for (answer, output), status in ((missing, 404), (keyless, 401)):
        assert answer["statusCode"] == status
        (line,) = _lines(output)
        assert line["status"] == status and line["correlation_id"] == answer["headers"]["X-Request-Id"]
        assert logged_bytes(output) <= BUDGET and line["weight"] == 1
    assert _lines(missing[1])[0]["request"] == "POST /api/v1/queues/nowhere/send"
    assert "tenant" not in _lines(keyless[1])[0] and _lines(keyless[1])[0]["request"] == "GET /api/v1/queues"


def test_an_error_keeps_its_whole_story(tenant, database_url, tmp_path):
    """A bug of ours: the error line has the exception (type, message, traceback), the request's id
    and tenant, and the request as it came, its key masked; the request's own line says 500."""
    _in_process(queues, api_event("POST", "/api/v1/queues", key=tenant.key, body={"name": "story"}))
    ((answer, output),) = run("functions.api.queues.app.handler", [
        api_event("POST", "/api/v1/queues/story/send", key=tenant.key, body={"message": {"order": 7}},
                  query="trace=1"),
    ], database_url, tmp_path, fault="postbox.queues.service:send_messages")
    assert answer["statusCode"] == 500
    lines = _lines(output)
    (error,) = [x for x in lines if x.get("level") == "ERROR" and "exception" in x]
    assert error["exception_name"] == "RuntimeError" and "an injected fault" in error["exception"]
    assert "Traceback" in error["exception"]
    assert (error["correlation_id"], error["tenant"]) == (answer["headers"]["X-Request-Id"], tenant.tenant_id)
    request = error["request"]
    assert (request["method"], request["path"], request["query"]) == ("POST", "/api/v1/queues/story/send", "trace=1")
    assert request["route"] == "POST /api/v1/queues/{name}/send"
    assert json.loads(request["body"]) == {"message": {"order": 7}}
    assert request["headers"]["apikey"] == "***" and tenant.key not in output
    (record,) = [x for x in lines if "status" in x]
    assert record["status"] == 500 and record["request"] == "POST /api/v1/queues/story/send"


def test_a_handler_that_raises_keeps_its_story_too(tenant, database_url, tmp_path):
    """A fault outside the resolver (Lambda's own error answer, API Gateway's 500): the same story."""
    ((answer, output),) = run("functions.api.work.app.handler", [
        api_event("GET", f"{W}/scopes", key=tenant.key),
    ], database_url, tmp_path, fault="postbox.work.ratelimit:check")
    assert answer == {"raised": "RuntimeError"}
    lines = _lines(output)
    (error,) = [x for x in lines if x.get("message") == "handler failed"]
    assert error["level"] == "ERROR" and "an injected fault" in error["exception"]
    assert error["correlation_id"].startswith("req_") and error["tenant"] == tenant.tenant_id
    assert (error["request"]["method"], error["request"]["path"]) == ("GET", f"{W}/scopes")
    (record,) = [x for x in lines if "status" in x]
    assert record["status"] == 500 and record["correlation_id"] == error["correlation_id"]


def test_a_sampled_request_writes_its_access_line_with_its_counts(tenant, database_url, tmp_path):
    """At a sampling rate of 1 every request writes its access line; one that counted something
    makes that line its EMF record too (one line, not two)."""
    _in_process(queues, api_event("POST", "/api/v1/queues", key=tenant.key, body={"name": "sampled"}))
    sent, read = run("functions.api.queues.app.handler", [
        api_event("POST", "/api/v1/queues/sampled/send_batch", key=tenant.key,
                  body={"messages": [{"n": i} for i in range(10)]}),
        api_event("POST", "/api/v1/queues/sampled/read", key=tenant.key, body={"qty": 1, "vt": 30}),
    ], database_url, tmp_path, env=EVERY_LINE)
    assert _access(tenant, *sent, metric="MessagesSent", service="queues")["MessagesSent"] == 10
    assert _access(tenant, *read)["request"] == "POST /api/v1/queues/sampled/read"
    scope = _in_process(work, api_event("POST", f"{W}/scopes", key=tenant.key, body={"slug": "sampled"}))["data"]
    ((listed, output),) = run("functions.api.work.app.handler", [
        api_event("GET", f"{W}/scopes/{scope['id']}/queues", key=tenant.key),
    ], database_url, tmp_path, env=EVERY_LINE)
    assert _access(tenant, listed, output)["correlation_id"].startswith("req_")


def test_a_slow_request_always_writes_its_access_line(tenant, database_url, tmp_path):
    _in_process(queues, api_event("POST", "/api/v1/queues", key=tenant.key, body={"name": "slow"}))
    ((read, output),) = run("functions.api.queues.app.handler", [
        api_event("POST", "/api/v1/queues/slow/read", key=tenant.key, body={"qty": 1, "vt": 30}),
    ], database_url, tmp_path, env={"POSTBOX_LOG_SLOW_MS": "0"})
    assert _access(tenant, read, output)["weight"] == 1


def test_sampling_keeps_the_metrics_exact(tenant, database_url, tmp_path):
    """Half the access lines are drawn, every count is kept: the records' counts add up to what was
    sent, and a sampled line stands for 1/rate requests (its weight, which per-tenant counts add up)."""
    _in_process(queues, api_event("POST", "/api/v1/queues", key=tenant.key, body={"name": "exact"}))
    sizes = [1 + i % 4 for i in range(40)]
    outputs = run("functions.api.queues.app.handler", [
        api_event("POST", "/api/v1/queues/exact/send_batch", key=tenant.key,
                  body={"messages": [{"n": j} for j in range(n)]}) for n in sizes
    ], database_url, tmp_path, env={"POSTBOX_LOG_SAMPLE_RATE": "0.5"})
    records = [line for _, output in outputs for line in _lines(output)]
    assert len(records) == len(sizes)  # one per invocation: an access line or a bare EMF record
    assert sum(r["MessagesSent"] for r in records) == sum(sizes)
    sampled = [r for r in records if "status" in r]
    assert 0 < len(sampled) < len(sizes) and all(r["weight"] == 2 for r in sampled)
    assert all(r["tenant"] == tenant.tenant_id for r in records)
