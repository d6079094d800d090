"""The streaming runtime (`functions.lambda_runtime`) against a stand-in for Lambda's Runtime API: the
durable function behind a REST API route in STREAM mode or a Function URL in RESPONSE_STREAM mode
answers in the HTTP integration format, an SSE read chunk by chunk while it is open, a plain read
whole; failures are reported before an answer begins and in its trailers after; on SnapStart the
runtime waits for the restore before its first invocation."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from functions import lambda_runtime, streaming
from functions.local.events import http_event
from functions.local.runtime_api import RuntimeApi
from postbox import config

ROOT = Path(__file__).resolve().parents[2]
DURABLE = "functions.api.durable.app.handler"


def _until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "not in time"
        time.sleep(0.02)


def rest_event(method: str, path: str, query: dict[str, str], headers: dict[str, str]) -> dict:
    """A REST API's proxy event (payload 1.0) for a `{proxy+}` resource, as API Gateway sends it."""
    return {
        "resource": "/{proxy+}", "path": path, "httpMethod": method,
        "headers": headers, "multiValueHeaders": {k: [v] for k, v in headers.items()},
        "queryStringParameters": query, "multiValueQueryStringParameters": {k: [v] for k, v in query.items()},
        "pathParameters": {"proxy": path.lstrip("/")},
        "requestContext": {"requestId": f"rest-{uuid.uuid4().hex[:8]}", "stage": "prod", "apiId": "abc123",
                           "identity": {"sourceIp": "203.0.113.9", "userAgent": "test"}, "protocol": "HTTP/1.1"},
        "body": None, "isBase64Encoded": False,
    }


@pytest.fixture
def runtime_api():
    found = RuntimeApi()
    yield found
    found.close()


@pytest.fixture
def short_waits(monkeypatch):
    monkeypatch.setenv("POSTBOX_LONG_POLL_MS", "300")
    monkeypatch.setenv("POSTBOX_STREAM_HEARTBEAT_MS", "300")
    config.reset()


def _serve_in_background(runtime_api: RuntimeApi, handler) -> threading.Thread:
    api = lambda_runtime.RuntimeApi(runtime_api.address)
    t = threading.Thread(target=lambda_runtime.serve_one, args=(api, handler), daemon=True)
    t.start()
    return t


def test_an_sse_read_from_the_rest_api_streams_each_append_as_it_lands(api, runtime_api, short_waits):
    from functions.api.durable.app import handler

    path = f"/v1/stream/rt-{uuid.uuid4().hex[:8]}"
    assert api.put(path, headers={"content-type": "application/json"}).status_code == 201
    answer = runtime_api.invoke("r1", rest_event("GET", path, {"offset": "-1", "live": "sse"},
                                                 {"apikey": api.tenant.key, "Host": "abc123.execute-api"}))
    _serve_in_background(runtime_api, handler)
    _until(lambda: len(answer.chunks) >= 3)  # the prelude, the catch-up's control, a heartbeat
    assert answer.headers["lambda-runtime-function-response-mode"] == "streaming"
    assert answer.headers["content-type"] == lambda_runtime.HTTP_INTEGRATION
    prelude, body = answer.split()
    assert prelude["statusCode"] == 200 and prelude["headers"]["Content-Type"] == "text/event-stream"
    assert body.startswith(b"event: control\n") and not answer.done.is_set()
    assert api.post(path, content=b'{"n": 1}', headers={"content-type": "application/json"}).status_code == 204
    _until(lambda: b'data:[{"n":1}]' in answer.raw)
    assert not answer.done.is_set()  # still open after the append
    assert api.post(path, headers={"stream-closed": "true"}).status_code == 204
    assert answer.done.wait(10)
    assert answer.raw.rstrip().endswith(b'"streamClosed":true}') and answer.trailers == {}


def test_a_function_url_read_is_routed_as_api_gateway_would_and_answered_whole(api, runtime_api, monkeypatch):
    from functions.api.durable.app import handler

    monkeypatch.setenv("POSTBOX_FRONT_DOOR", "function-url")  # the stack's door: the function finds the route

    name = f"rt-{uuid.uuid4().hex[:8]}"
    assert api.put(f"/v1/stream/{name}", content=b'{"a": 1}', headers={"content-type": "application/json"}
                   ).status_code == 201
    from postbox import db

    with db.connection() as conn:
        account = conn.execute("SELECT name FROM tenants WHERE id = %s", (api.tenant.tenant_id,)).fetchone()[0]
    event = http_event("GET", f"/{account}/s.{name}", headers={"apikey": api.tenant.key})  # routeKey $default
    answer = runtime_api.invoke("r2", event)
    _serve_in_background(runtime_api, handler).join(10)
    assert answer.done.wait(5)
    prelude, body = answer.split()
    assert prelude["statusCode"] == 200 and body == b'{"a":1}\n'
    headers = {k.lower(): v for k, v in prelude["headers"].items()}
    assert headers["content-type"] == "application/x-ndjson"
    assert headers["ursula-protocol"] == "11"  # the hosted form's route (and its parameters) was matched


def test_an_sse_read_through_a_function_url_streams_each_append_until_the_stream_closes(api, runtime_api,
                                                                                      short_waits, monkeypatch):
    """The durable function's URL (RESPONSE_STREAM) on the function-url door: its event names no
    route, the door finds it, and the SSE read stays open past its windows, one append at a time."""
    from functions.api.durable.app import handler

    monkeypatch.setenv("POSTBOX_FRONT_DOOR", "function-url")
    path = f"/v1/stream/rt-{uuid.uuid4().hex[:8]}"
    assert api.put(path, headers={"content-type": "application/json"}).status_code == 201
    event = http_event("GET", path, query="offset=-1&live=sse", headers={"apikey": api.tenant.key},
                       function_url=True)
    answer = runtime_api.invoke("r9", event)
    _serve_in_background(runtime_api, handler)
    _until(lambda: len(answer.chunks) >= 3)  # the prelude, the catch-up's control, a heartbeat
    assert answer.headers["lambda-runtime-function-response-mode"] == "streaming"
    prelude, body = answer.split()
    assert prelude["statusCode"] == 200 and prelude["headers"]["Content-Type"] == "text/event-stream"
    for n in range(2):
        time.sleep(0.7)  # more than two long-poll windows of silence before each append
        assert api.post(path, content=b'{"n": %d}' % n, headers={"content-type": "application/json"}
                        ).status_code == 204
        _until(lambda n=n: b'data:[{"n":%d}]' % n in answer.raw)
        assert not answer.done.is_set()  # still open after the append
    assert api.post(path, headers={"stream-closed": "true"}).status_code == 204
    assert answer.done.wait(10)
    assert answer.raw.rstrip().endswith(b'"streamClosed":true}') and answer.trailers == {}


def test_an_http_api_invocation_is_answered_whole_with_a_bounded_window(api, runtime_api, short_waits):
    """The HTTP API buffers: behind it the same function answers as Lambda's own runtime would, SSE
    included (its window), so one function serves both doors."""
    from functions.api.durable.app import handler
    from functions.routes import match

    path = f"/v1/stream/rt-{uuid.uuid4().hex[:8]}"
    assert api.put(path, content=b"hi", headers={"content-type": "text/plain"}).status_code == 201
    route, params = match("GET", path)
    event = http_event("GET", path, query="offset=-1&live=sse", headers={"apikey": api.tenant.key}, route=route,
                       path_parameters=params)
    answer = runtime_api.invoke("r7", event)
    _serve_in_background(runtime_api, handler).join(15)
    assert answer.done.wait(5)
    assert "lambda-runtime-function-response-mode" not in answer.headers
    result = json.loads(answer.raw)
    assert result["statusCode"] == 200 and result["body"].startswith("event: data\ndata:hi\n")


def test_a_failure_before_the_answer_is_an_invocation_error_and_after_it_a_trailer(runtime_api):
    def broken(event, context):
        raise ValueError("no such thing")

    runtime_api.invoke("r3", {"x": 1})
    _serve_in_background(runtime_api, broken).join(10)
    headers, body = runtime_api.errors["/2018-06-01/runtime/invocation/r3/error"]
    assert headers["Lambda-Runtime-Function-Error-Type"] == "ValueError" and body["errorMessage"] == "no such thing"

    def half(event, context):
        def chunks():
            yield b"first "
            raise RuntimeError("cut")
        return {"statusCode": 200, "headers": {"content-type": "text/plain"}, "body": streaming.StreamedBody(chunks())}

    answer = runtime_api.invoke("r4", http_event("GET", "/anything"))  # a Function URL's
    _serve_in_background(runtime_api, half).join(10)
    assert answer.done.wait(5) and answer.split()[1] == b"first "
    assert answer.trailers["lambda-runtime-function-error-type"] == "RuntimeError"
    assert json.loads(base64.b64decode(answer.trailers["lambda-runtime-function-error-body"]))["errorMessage"] == "cut"


def test_a_streamed_answer_ends_before_the_invocations_deadline(api, runtime_api, short_waits):
    """Lambda cuts an invocation at its timeout: the answer ends DEADLINE_MARGIN_S before, with the
    offset to reconnect from (a deadline of 6 s here: the answer lasts about one second)."""
    from functions.api.durable.app import handler

    path = f"/v1/stream/rt-{uuid.uuid4().hex[:8]}"
    assert api.put(path, headers={"content-type": "application/json"}).status_code == 201
    answer = runtime_api.invoke("r5", rest_event("GET", path, {"offset": "-1", "live": "sse"},
                                                 {"apikey": api.tenant.key}), deadline_s=6.0)
    _serve_in_background(runtime_api, handler)
    assert answer.done.wait(8)
    last = answer.split()[1].decode().strip().rsplit("data:", 1)[1]
    assert json.loads(last)["upToDate"] is True and "streamClosed" not in json.loads(last)


def test_on_snapstart_the_runtime_waits_for_the_restore_before_its_first_invocation(api, runtime_api,
                                                                                   database_url, tmp_path):
    runtime_api.restored.clear()  # the snapshot is "being taken" until the test restores it
    env = {**os.environ, "AWS_LAMBDA_RUNTIME_API": runtime_api.address, "AWS_LAMBDA_INITIALIZATION_TYPE": "snap-start",
           "AWS_LAMBDA_FUNCTION_NAME": "postbox-test-durable", "DATABASE_URL": database_url,
           "POWERTOOLS_METRICS_DISABLED": "true", "POWERTOOLS_TRACE_DISABLED": "true",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "shared")])}
    proc = subprocess.Popen([sys.executable, "-m", "functions.lambda_runtime", DURABLE], cwd=ROOT, env=env)
    try:
        _until(lambda: runtime_api.calls[-1:] == ["GET /2018-06-01/runtime/restore/next"], 30)
        path = f"/v1/stream/rt-{uuid.uuid4().hex[:8]}"
        assert api.put(path, content=b"hi", headers={"content-type": "text/plain"}).status_code == 201
        event = http_event("GET", path, query="offset=-1", headers={"apikey": api.tenant.key})
        answer = runtime_api.invoke("r6", event)
        time.sleep(0.3)
        assert not answer.done.is_set()  # not served before the restore
        runtime_api.restored.set()
        assert answer.done.wait(20)
        assert answer.split()[1] == b"hi"
        assert runtime_api.calls[:2] == ["GET /2018-06-01/runtime/restore/next",
                                         "GET /2018-06-01/runtime/invocation/next"]
    finally:
        proc.kill()
        proc.wait(10)


def test_a_rest_api_event_reads_as_the_http_apis():
    event = lambda_runtime.http_api_event(rest_event("POST", "/v1/stream/a%20b", {"offset": "x&y"},
                                                     {"Content-Type": "text/plain", "Cookie": "a=1; b=2"}))
    assert event["version"] == "2.0" and event["rawPath"] == "/v1/stream/a%20b"
    assert event["rawQueryString"] == "offset=x%26y" and event["queryStringParameters"] == {"offset": "x&y"}
    assert event["requestContext"]["http"] == {"method": "POST", "path": "/v1/stream/a%20b", "protocol": "HTTP/1.1",
                                               "sourceIp": "203.0.113.9", "userAgent": "test"}
    assert event["headers"] == {"content-type": "text/plain"} and event["cookies"] == ["a=1", "b=2"]
    assert event["routeKey"] == "POST /v1/stream/{name}" and event["pathParameters"] == {"name": "a%20b"}


def test_the_exec_wrapper_runs_the_streaming_runtime_for_lambdas_handler(api, runtime_api, database_url):
    """What Lambda runs: the wrapper, given the runtime's own command (ignored), with _HANDLER set."""
    env = {**os.environ, "AWS_LAMBDA_RUNTIME_API": runtime_api.address, "_HANDLER": DURABLE,
           "LAMBDA_TASK_ROOT": str(ROOT), "AWS_LAMBDA_FUNCTION_NAME": "postbox-test-durable",
           "DATABASE_URL": database_url,
           "POWERTOOLS_METRICS_DISABLED": "true", "PYTHONPATH": str(ROOT / "shared"),
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    proc = subprocess.Popen([str(ROOT / "functions" / "stream-bootstrap"), "/var/runtime/bootstrap"], env=env)
    try:
        path = f"/v1/stream/rt-{uuid.uuid4().hex[:8]}"
        assert api.put(path, content=b"hi", headers={"content-type": "text/plain"}).status_code == 201
        event = http_event("GET", path, query="offset=-1", headers={"apikey": api.tenant.key})
        answer = runtime_api.invoke("r8", event)
        assert answer.done.wait(30)
        assert answer.headers["lambda-runtime-function-response-mode"] == "streaming"
        assert answer.split()[1] == b"hi"
    finally:
        proc.kill()
        proc.wait(10)


def test_the_functions_zip_carries_the_wrapper_executable(tmp_path):
    import stat
    import zipfile

    sys.path.insert(0, str(ROOT / "layers"))
    try:
        from build import build_functions
    finally:
        sys.path.remove(str(ROOT / "layers"))
    with zipfile.ZipFile(build_functions(tmp_path / "functions.zip", compile_pyc=False)) as zf:
        info = zf.getinfo("functions/stream-bootstrap")
    assert stat.S_IMODE(info.external_attr >> 16) & 0o111 == 0o111
