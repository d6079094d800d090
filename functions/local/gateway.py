"""The local gateway: what API Gateway's HTTP API does with a request, in process.

Each request is matched against the route table, turned into the payload 2.0 event API Gateway
would send (no authorizer: each surface function resolves the request's key itself, as on AWS),
handed to the surface's Lambda handler in process and turned back into HTTP.
`functions.local.server` serves it, calling `handle` on each connection's own thread (handlers
block on the database and on long polls).

The limits are AWS's, so a user meets them here first: API Gateway takes bodies up to 10 MB and
Lambda events up to 6 MB (413 beyond either), and a function's answer over 6 MB fails as Lambda
fails it (500). `/openapi.json` and `/docs` are the gateway's own (see `apidocs`).

It acts as either front door (`POSTBOX_FRONT_DOOR`, `postbox dev --front-door`): API Gateway's HTTP
API (the default), or the surfaces' Lambda function URLs, as if every surface's URL were served on
this one port: a function URL's event (no route in it: the function finds its own, `functions.door`),
its CORS preflight answered from the URLs' configuration before any function runs, its
`x-amzn-requestid` on each answer, and no limit of API Gateway's own.

Every invocation may stream its answer (`functions.streaming`), as behind AWS's streaming doors: an
SSE read stays open and the server writes each event as it comes, for at most Lambda's 15 minutes.
"""

from __future__ import annotations

import importlib
import json
import logging
import time
from typing import Any

from functions import door, streaming
from functions.api.request_local import RequestLocalResolver
from functions.local import apidocs, requestlog
from functions.local.events import HttpResponse, http_event, json_message, read_response
from functions.local.invoke import entry_point, invoke
from functions.routes import FUNCTIONS, match
from postbox.inputs import MAX_REQUEST_BYTES

MAX_BODY_BYTES = 10 * 1024 * 1024
"""API Gateway's HTTP API payload limit."""
MAX_EVENT_BYTES = MAX_REQUEST_BYTES
"""Lambda's synchronous invocation payload (request event and response alike)."""

logger = logging.getLogger("postbox.gateway")


_NOT_FOUND = json_message(404, "Not Found")
TOO_LARGE = json_message(413, "Request Entity Too Large")
_FAILED = json_message(500, "Internal Server Error")


def _failed(rid: str) -> HttpResponse:
    """API Gateway's own 500 for a function that failed, with the request's `apigw-requestid`."""
    return HttpResponse(_FAILED.status, [*_FAILED.headers, ("apigw-requestid", rid)], _FAILED.body)


def _size(payload: Any) -> int:
    """The bytes Lambda counts: the JSON of the event or of the function's answer (measured only
    when the body alone could come near the limit; the rest of an event is small)."""
    body = payload.get("body") if isinstance(payload, dict) else payload
    if isinstance(body, str | bytes) and len(body) < MAX_EVENT_BYTES // 2:
        return len(body)
    return len(json.dumps(payload, separators=(",", ":"), default=str))


def _headers_are_latin1(response: HttpResponse) -> bool:
    try:
        for k, v in response.headers:
            k.encode("latin-1"), v.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True


class LocalGateway:
    max_body_bytes = MAX_BODY_BYTES

    def __init__(self, timeout_s: float = 30.0, request_log: bool | None = None) -> None:
        """`request_log`: one line per request on stderr (see `requestlog`); None asks the environment.
        The front door it acts as is the environment's (`POSTBOX_FRONT_DOOR`), which the functions
        it calls read too."""
        self.timeout_s = timeout_s
        self.function_url = door.is_function_url()
        if self.function_url:
            self.max_body_bytes = MAX_EVENT_BYTES  # no API Gateway: Lambda's own limit is the first
        self.request_log = requestlog.enabled() if request_log is None else request_log
        if self.request_log:
            requestlog.install()

    def preload(self) -> None:
        """Import every surface function, and open the pool's first connections,
        before the first request: a worker's first requests then cost what the later ones do, as a
        Lambda function's handler is imported in its init phase, not by the request it serves.
        Each function's resolver builds every route's middleware stack here, before this process
        serves requests from several threads at once (see `RequestLocalResolver`). Every cell's
        pool is opened: the first request to each cell finds its connections ready."""
        from postbox import cells, db

        for dotted in FUNCTIONS.values():
            entry_point(dotted)
            resolver = resolver_of(dotted)
            if resolver is not None:
                resolver.build_routes()
        for _ in cells.each():
            db.pool().wait()

    def handle(
        self, method: str, path: str, query: str, headers: list[tuple[str, str]], body: bytes,
        source_ip: str = "127.0.0.1",
    ) -> HttpResponse:
        """One request, synchronously: route, invoke, translate (and log it, when asked).
        `source_ip` is the client's address, as API Gateway puts it in `requestContext.http.sourceIp`."""
        if not self.request_log:
            return self._serve(method, path, query, headers, body, source_ip)[0]
        started = time.perf_counter()
        response, tenant_id = self._serve(method, path, query, headers, body, source_ip)
        ms = (time.perf_counter() - started) * 1000
        # A failure's line names the request's id (what its answer showed): its log lines carry it.
        rid = requestlog.request_id_of(response.headers) if response.status >= 400 else None
        requestlog.record(method, path, response.status, ms, tenant_id, rid)
        return response

    def _serve(
        self, method: str, path: str, query: str, headers: list[tuple[str, str]], body: bytes, source_ip: str
    ) -> tuple[HttpResponse, str | None]:
        """The answer, and the tenant the function found the key to be (None without one)."""
        docs = apidocs.serve(method, path)
        if docs is not None:
            return docs, None
        if self.function_url and method == "OPTIONS":
            asked = door.preflight(dict(headers))
            if asked is not None:  # the URL's CORS configuration answers it; no function runs
                return read_response(asked), None
        found = match(method, path)  # which surface's function (on function URLs: whose URL) serves it
        if found is None:
            return _NOT_FOUND, None
        if len(body) > self.max_body_bytes:
            return TOO_LARGE, None
        route, params = found
        event = http_event(method, path, query=query, headers=headers, body=body, route=route,
                           path_parameters=params, source_ip=source_ip, function_url=self.function_url)
        if _size(event) > MAX_EVENT_BYTES:
            return TOO_LARGE, None
        rid = event["requestContext"]["requestId"]
        try:
            with streaming.invocation(time.monotonic() + streaming.LAMBDA_MAX_SECONDS):
                result = invoke(FUNCTIONS[route.function], event, route.function, self.timeout_s)
        except Exception:  # an unhandled error in a function is API Gateway's 500
            logger.exception("%s failed (request %s)", route.function, rid)
            return _failed(rid), _tenant(event)
        tenant_id = _tenant(event)
        if streaming.body_of(result) is None and _size(result) > MAX_EVENT_BYTES:
            logger.error("%s answered %s %s with more than %d bytes: Lambda refuses that response (request %s)",
                         route.function, method, path, MAX_EVENT_BYTES, rid)
            return _failed(rid), tenant_id
        response = read_response(result)
        if not _headers_are_latin1(response):
            logger.error("%s answered %s %s with a header value HTTP cannot carry (not Latin-1) (request %s)",
                         route.function, method, path, rid)
            return _failed(rid), tenant_id
        response.headers.append(("x-amzn-requestid" if self.function_url else "apigw-requestid", rid))
        return response, tenant_id

    def too_large(self, method: str, path: str) -> HttpResponse:
        """The answer to a body over MAX_BODY_BYTES, which the server stopped reading into memory."""
        if self.request_log:
            requestlog.record(method, path, TOO_LARGE.status, 0.0, None)
        return TOO_LARGE


def _tenant(event: dict[str, Any]) -> str | None:
    """The tenant the function resolved the request's key to (it writes its answer into the event,
    which it was handed in process), for the request log."""
    return ((event["requestContext"].get("authorizer") or {}).get("lambda") or {}).get("tenant_id") or None


def resolver_of(dotted: str) -> RequestLocalResolver | None:
    """The resolver (`app`) of a surface function's module, which must be one that serves concurrent
    requests: Lambda gives a function one request at a time, this gateway gives it several. None for
    a function without one, which reads the event API Gateway routed to it itself (SQS's endpoint)."""
    module = importlib.import_module(dotted.rpartition(".")[0])
    if not hasattr(module, "app"):
        return None
    resolver = module.app
    if not isinstance(resolver, RequestLocalResolver):
        raise TypeError(f"{dotted}: its app is not a RequestLocalResolver, which the local gateway needs")
    return resolver


def serving_gateway(request_log: bool | None = None) -> LocalGateway:
    """The gateway of a `postbox dev` process that serves (the only one, or each worker): its
    consumer dispatches started in process, everything loaded before the first request."""
    from functions.local.runtime import start_dispatches_in_process

    start_dispatches_in_process()
    gateway = LocalGateway(request_log=request_log)
    gateway.preload()
    return gateway
