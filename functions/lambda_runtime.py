"""A Lambda runtime interface client that streams answers, for a function behind a streaming door (a
Function URL in RESPONSE_STREAM mode, a REST API route in STREAM mode): Python's managed runtime
answers only whole, buffered responses, so such a function runs this loop instead
(`python -m functions.lambda_runtime <module.handler>`, started by the `stream-bootstrap` wrapper).

Each invocation is served as the managed runtime would (the same handler, event and context). One
that came through a streaming door (a REST API's event, or a Function URL's: no route of API
Gateway's HTTP API) is answered on the Runtime API's streaming mode in the HTTP integration format:
a JSON prelude (status, headers, cookies), eight NUL bytes, then the body. Any other (the HTTP API,
which buffers) is answered whole, as the managed runtime answers it, so one function can sit
behind both doors. A body that is a `functions.streaming.StreamedBody`
(an open SSE read) is written chunk by chunk as the handler produces it, until it ends or the
invocation's deadline is near; a failure once the answer has begun is reported in the stream's
trailers. A REST API's event (payload 1.0) is read as the HTTP API's payload 2.0 that the resolvers
know, with the route and path parameters API Gateway would have matched (a Function URL's event is
2.0 already, and `functions.door` finds its route).

SnapStart: when Lambda initialises the function for a snapshot (AWS_LAMBDA_INITIALIZATION_TYPE
`snap-start`), the hooks registered with `snapshot_restore_py` run before the snapshot and after
each restore, as the managed runtime runs them (see `functions.snapstart`).

Chosen over the Lambda Web Adapter, which would put a Rust extension and an HTTP server of our own
in front of the same handler (two more hops per request, and a readiness check in every cold
start): this loop is the standard library's http.client and adds about 10 ms of import.
"""

from __future__ import annotations

import base64
import http.client
import importlib
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from typing import Any
from urllib.parse import urlencode

from functions import streaming

API_VERSION = "/2018-06-01/runtime"
HTTP_INTEGRATION = "application/vnd.awslambda.http-integration-response"
DELIMITER = b"\0" * 8
DEADLINE_MARGIN_S = 5.0  # a streamed answer ends this long before Lambda would cut the invocation
ERROR_TYPE = "Lambda-Runtime-Function-Error-Type"
ERROR_BODY = "Lambda-Runtime-Function-Error-Body"


class Context:
    """The Lambda context object a handler is given (what Powertools and our code read of it)."""

    def __init__(self, headers: http.client.HTTPMessage) -> None:
        self.aws_request_id = headers["Lambda-Runtime-Aws-Request-Id"]
        self.invoked_function_arn = headers.get("Lambda-Runtime-Invoked-Function-Arn", "")
        self.function_name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "")
        self.function_version = os.environ.get("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        self.memory_limit_in_mb = int(os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128"))
        self.log_group_name = os.environ.get("AWS_LAMBDA_LOG_GROUP_NAME", "")
        self.log_stream_name = os.environ.get("AWS_LAMBDA_LOG_STREAM_NAME", "")
        deadline_ms = int(headers.get("Lambda-Runtime-Deadline-Ms", "0"))
        # Lambda gives the deadline in wall-clock milliseconds: kept as a monotonic instant.
        self.deadline = time.monotonic() + max(0.0, deadline_ms / 1000 - time.time())

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.deadline - time.monotonic()) * 1000))


# ---- the event --------------------------------------------------------------------------------------


def streams(event: Any) -> bool:
    """Whether an invocation came through a streaming door: a REST API's event (payload 1.0; our REST
    API routes stream), or a Function URL's (payload 2.0 without a route: API Gateway's HTTP API
    always names the route it matched)."""
    return isinstance(event, dict) and ("httpMethod" in event or event.get("routeKey") == "$default")


def http_api_event(event: Any) -> Any:
    """A REST API's payload 1.0 event as the payload 2.0 the resolvers read, with the route and path
    parameters of our route table, as API Gateway's HTTP API would have matched them. Any other
    event as it is (a Function URL's: `functions.door` finds its route)."""
    if not isinstance(event, dict) or "httpMethod" not in event:
        return event
    from functions.routes import match

    event = _from_rest_api(event)
    found = match(event["requestContext"]["http"]["method"], event["rawPath"])
    if found is not None:
        route, params = found
        event["routeKey"] = event["requestContext"]["routeKey"] = route.route_key
        if params:
            event["pathParameters"] = params
    return event


def _from_rest_api(event: dict) -> dict:
    context = event.get("requestContext") or {}
    headers = {k.lower(): v for k, v in (event.get("headers") or {}).items()}
    for k, values in (event.get("multiValueHeaders") or {}).items():
        if len(values) > 1:
            headers[k.lower()] = ",".join(values)
    cookies = [c.strip() for c in headers.pop("cookie", "").split(";") if c.strip()]
    multi = event.get("multiValueQueryStringParameters") or {}
    query = [(k, v) for k, values in multi.items() for v in values]
    identity = context.get("identity") or {}
    out = {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": event.get("path") or "/",
        "rawQueryString": urlencode(query),
        "headers": headers,
        "requestContext": {
            "accountId": context.get("accountId", ""),
            "apiId": context.get("apiId", ""),
            "domainName": context.get("domainName", headers.get("host", "")),
            "http": {"method": event["httpMethod"].upper(), "path": event.get("path") or "/",
                     "protocol": context.get("protocol", "HTTP/1.1"), "sourceIp": identity.get("sourceIp", ""),
                     "userAgent": identity.get("userAgent") or headers.get("user-agent", "")},
            "requestId": context.get("requestId", ""),
            "routeKey": "$default",
            "stage": "$default",  # a REST API's `path` has no stage in it, unlike an HTTP API's rawPath
            "timeEpoch": context.get("requestTimeEpoch", int(time.time() * 1000)),
        },
        "isBase64Encoded": bool(event.get("isBase64Encoded")),
    }
    if event.get("body") is not None:
        out["body"] = event["body"]
    if query:
        out["queryStringParameters"] = {k: ",".join(v for kk, v in query if kk == k) for k, _ in query}
    if cookies:
        out["cookies"] = cookies
    return out


# ---- the answer -------------------------------------------------------------------------------------


def prelude(result: Any) -> bytes:
    """The HTTP integration's prelude of a handler's answer: its status, headers and cookies as JSON,
    then the delimiter."""
    if not isinstance(result, dict) or "statusCode" not in result:
        result = {"statusCode": 200, "headers": {"content-type": "application/json"}}
    headers = {str(k): str(v) for k, v in (result.get("headers") or {}).items()}
    for k, values in (result.get("multiValueHeaders") or {}).items():
        headers[str(k)] = ",".join(str(v) for v in values)
    meta = {"statusCode": int(result["statusCode"]), "headers": headers, "cookies": list(result.get("cookies") or [])}
    return json.dumps(meta, separators=(",", ":")).encode() + DELIMITER


def body_chunks(result: Any) -> Iterator[bytes]:
    """The body of a handler's answer, chunk by chunk: a StreamedBody as it comes, anything else whole."""
    streamed = streaming.body_of(result)
    if streamed is not None:
        yield from streamed
        return
    if not isinstance(result, dict) or "statusCode" not in result:
        yield json.dumps(result).encode()
        return
    body = result.get("body") or ""
    yield base64.b64decode(body) if result.get("isBase64Encoded") else body.encode()


# ---- the Runtime API --------------------------------------------------------------------------------


class RuntimeApi:
    """The calls this runtime makes to Lambda's Runtime API (AWS_LAMBDA_RUNTIME_API)."""

    def __init__(self, address: str) -> None:
        self.address = address

    def _call(self, method: str, path: str, body: bytes | None = None,
              headers: dict[str, str] | None = None) -> tuple[http.client.HTTPResponse, bytes]:
        conn = http.client.HTTPConnection(self.address)
        try:
            conn.request(method, API_VERSION + path, body=body, headers=headers or {})
            response = conn.getresponse()
            return response, response.read()
        finally:
            conn.close()

    def next(self) -> tuple[http.client.HTTPMessage, bytes]:
        response, body = self._call("GET", "/invocation/next")
        return response.headers, body

    def respond(self, request_id: str, body: bytes) -> None:
        """Answer an invocation whole (the buffered mode): `body` is the handler's result as JSON."""
        self._call("POST", f"/invocation/{request_id}/response", body)

    def error(self, path: str, error: BaseException) -> None:
        """Report a failure (`/invocation/{id}/error`, `/init/error`, `/restore/error`)."""
        body = json.dumps(error_body(error)).encode()
        self._call("POST", path, body, {ERROR_TYPE: error_body(error)["errorType"]})

    def restore_next(self) -> None:
        """Tell Lambda the snapshot may be taken; returns when this environment is restored from it."""
        self._call("GET", "/restore/next")

    def stream(self, request_id: str, chunks: Iterator[bytes]) -> None:
        """Answer an invocation in streaming mode, writing each chunk as it comes; a failure on the
        way ends the answer with the error in its trailers."""
        conn = http.client.HTTPConnection(self.address)
        try:
            conn.putrequest("POST", f"{API_VERSION}/invocation/{request_id}/response", skip_accept_encoding=True)
            conn.putheader("Lambda-Runtime-Function-Response-Mode", "streaming")
            conn.putheader("Content-Type", HTTP_INTEGRATION)
            conn.putheader("Transfer-Encoding", "chunked")
            conn.putheader("Trailer", f"{ERROR_TYPE}, {ERROR_BODY}")
            conn.endheaders()
            trailers = b""
            try:
                for chunk in chunks:
                    if chunk:
                        conn.send(b"%x\r\n%b\r\n" % (len(chunk), chunk))
            except OSError:
                raise  # Lambda's end is gone: nothing more can be said
            except Exception as error:  # the handler failed mid-answer
                report = error_body(error)
                encoded = base64.b64encode(json.dumps(report).encode()).decode()
                trailers = f"{ERROR_TYPE}: {report['errorType']}\r\n{ERROR_BODY}: {encoded}\r\n".encode()
                _log_failure(error)
            conn.send(b"0\r\n" + trailers + b"\r\n")
            conn.getresponse().read()
        finally:
            conn.close()


def error_body(error: BaseException) -> dict[str, Any]:
    return {"errorMessage": str(error), "errorType": type(error).__name__,
            "stackTrace": traceback.format_exception(error)[-8:]}


def _log_failure(error: BaseException) -> None:
    print(json.dumps({"level": "ERROR", "message": "handler failed", **error_body(error)}), file=sys.stderr, flush=True)


# ---- the loop ---------------------------------------------------------------------------------------


def load(handler: str) -> Callable[[Any, Any], Any]:
    module, _, attr = handler.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def serve_one(api: RuntimeApi, handler: Callable[[Any, Any], Any]) -> None:
    """Take the next invocation and answer it."""
    headers, body = api.next()
    context = Context(headers)
    request_id = context.aws_request_id
    os.environ["_X_AMZN_TRACE_ID"] = headers.get("Lambda-Runtime-Trace-Id", "")
    deadline = context.deadline - DEADLINE_MARGIN_S
    try:
        event = json.loads(body)
        streamed = streams(event)
        with streaming.invocation(deadline) if streamed else nullcontext():
            result = handler(http_api_event(event) if streamed else event, context)
        whole = None if streamed else json.dumps(result).encode()
    except Exception as error:
        _log_failure(error)
        api.error(f"/invocation/{request_id}/error", error)
        return
    if whole is None:
        api.stream(request_id, _with_prelude(result))
    else:
        api.respond(request_id, whole)


def _with_prelude(result: Any) -> Iterator[bytes]:
    yield prelude(result)
    yield from body_chunks(result)


def run(handler_name: str, api: RuntimeApi) -> None:
    """Initialise (import the handler; on SnapStart, snapshot and restore), then serve forever."""
    try:
        handler = load(handler_name)
    except Exception as error:
        _log_failure(error)
        api.error("/init/error", error)
        raise SystemExit(1) from error
    if os.environ.get("AWS_LAMBDA_INITIALIZATION_TYPE") == "snap-start":
        from functions import snapstart

        snapstart.snapshot_and_restore(api)
    while True:
        serve_one(api, handler)


if __name__ == "__main__":
    run(sys.argv[1] if len(sys.argv) > 1 else os.environ["_HANDLER"], RuntimeApi(os.environ["AWS_LAMBDA_RUNTIME_API"]))
