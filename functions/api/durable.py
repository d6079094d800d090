"""The durable surface: the Durable Streams protocol at `/v1/stream/{name}` and the spec file's form
at `/{account}/s.{name}` (JSON read as NDJSON, Stream-Incarnation, snapshots, retention, bootstrap,
cacheable chunks, public streams). Parses, calls `postbox.durable`, shapes."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from typing import Any
from urllib.parse import parse_qsl, unquote

from aws_lambda_powertools.event_handler import Response

from functions.api import durable_extensions as extensions
from functions.api.common import SurfaceResolver, principal_from
from functions.api.durable_http import (
    CORS,
    MAX_BODY,
    MAX_READ,
    URSULA,
    body_of,
    error_response,
    expires_of,
    header,
    incarnation_of,
    is_true,
    offset_of,
    producer_of,
    read_body,
    sse_data,
    sse_event,
    sse_is_binary,
    stream_name_of,
    ttl_of,
    wants_ndjson,
)
from functions.observability import instrument
from postbox import config, tenancy
from postbox.durable import offsets, service, snapshots
from postbox.durable.service import CreateSpec, Scope
from postbox.errors import Forbidden, Invalid, NotFound, PostboxError, Unauthorized

logger, metrics, lambda_handler = instrument("durable")

OPEN_TENANT_ENV = "POSTBOX_DURABLE_OPEN_TENANT"
_NOT_FOUND_BODY = json.dumps({"message": "Not Found"})
_WRITES = {"POST", "PUT", "DELETE"}


def envelope(status: int, code: str, message: str, details: dict[str, Any]) -> dict[str, Any]:
    return {"error": {"code": code, "message": message or code}}


class DurableResolver(SurfaceResolver):
    """A resolver whose `<path>` parameter is greedy, as API Gateway's `{path+}` is."""

    @staticmethod
    def _compile_regex(rule: str, base_regex: str = "^{}$"):
        def group(m: re.Match) -> str:
            return f"(?P<{m.group(1)}>{'.+' if m.group(1) == 'path' else '[^/]+'})"

        return re.compile(base_regex.format(re.sub(r"<(\w+)>", group, rule)))


app = DurableResolver(envelope, validation_status=400, anonymous=True)  # public streams: no key needed
_METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS"]


@app.exception_handler(PostboxError)
def _domain_error(error: PostboxError) -> Response:
    return error_response(error)


# -- who is asking -----------------------------------------------------------------------------------

_tenants: dict[str, tuple[float, str | None]] = {}


def _tenant_id(name: str) -> str | None:
    now = time.monotonic()
    hit = _tenants.get(name)
    if hit and hit[0] > now:
        return hit[1]
    found = tenancy.tenant_id_by_name(name)
    _tenants[name] = (now + (60.0 if found else 5.0), found)
    return found


def _principal():
    return principal_from(app.current_event.request_context.authorizer.get_lambda)


def _require_writer(principal) -> None:
    if not principal.can("write"):
        raise Forbidden("This key may only read.", code="FORBIDDEN")


def _open_scope(method: str) -> Scope:
    """The caller's own streams; anonymous callers only where the deployment maps them to a tenant."""
    principal = _principal()
    if principal is None:
        open_tenant = os.environ.get(OPEN_TENANT_ENV)
        tenant_id = _tenant_id(open_tenant) if open_tenant else None
        if tenant_id is None:
            raise Unauthorized("A key is required.", code="INVALID_CREDENTIAL")
        return Scope(tenant_id, service.default_project(tenant_id))
    if method in _WRITES:
        _require_writer(principal)
    return Scope(principal.tenant_id, principal.project_id or service.default_project(principal.tenant_id))


# -- shared answers ----------------------------------------------------------------------------------

def _headers() -> dict[str, str]:
    return {k.lower(): v for k, v in (app.current_event.headers or {}).items()}


def _query() -> list[tuple[str, str]]:
    return parse_qsl(app.current_event.raw_event.get("rawQueryString") or "", keep_blank_values=True)


def _answer(status: int, headers: dict[str, str] | None = None, body: bytes | str = b"",
            content_type: str | None = None) -> Response:
    return Response(status, content_type, body, dict(headers or {}))


def _stream_name(value: str) -> str:
    """A Stream-Forked-From value: a stream's path in either form, or its bare name."""
    path = unquote(value.strip())
    for prefix in ("/v1/stream/",):
        if path.startswith(prefix):
            return path[len(prefix):]
    m = re.match(r"^/[^/]+/s\.([^/]+)$", path)
    return m.group(1) if m else path.lstrip("/")


# -- the operations, shared by both forms -----------------------------------------------------------

class Form:
    """What differs between the open protocol's form and the spec file's."""

    def __init__(self, spec: bool, scope: Scope, name: str, anonymous: bool = False) -> None:
        self.spec, self.scope, self.name, self.anonymous = spec, scope, name, anonymous

    def extra(self, stream_incarnation: str | None) -> dict[str, str]:
        out = dict(URSULA) if self.spec else {}
        if self.spec and stream_incarnation:
            out["Stream-Incarnation"] = stream_incarnation
        return out


def do_create(form: Form, headers: dict[str, str]) -> Response:
    ttl_text, expires_text = header(headers, "stream-ttl"), header(headers, "stream-expires-at")
    if ttl_text is not None and expires_text is not None:
        raise Invalid("Send Stream-TTL or Stream-Expires-At, not both.", code="INVALID_HEADER")
    content_type = header(headers, "content-type")
    if not content_type or not re.match(r"^[\w.+-]+/[\w.+-]+", content_type.strip()):
        content_type = None
    source = header(headers, "stream-forked-from")
    fork_offset_text = header(headers, "stream-fork-offset")
    sub_text = header(headers, "stream-fork-sub-offset")
    sub = 0
    if sub_text is not None:
        if source is None:
            raise Invalid("Stream-Fork-Sub-Offset needs Stream-Forked-From.", code="INVALID_HEADER")
        if not re.match(r"^(0|[1-9]\d*)$", sub_text.strip()):
            raise Invalid("Stream-Fork-Sub-Offset is a whole number.", code="INVALID_HEADER")
        sub = int(sub_text)
        if sub and fork_offset_text is None:
            raise Invalid("A sub-offset needs Stream-Fork-Offset.", code="INVALID_HEADER")
    spec = CreateSpec(
        content_type=content_type.strip() if content_type else None,
        ttl_seconds=ttl_of(ttl_text),
        expires_at=expires_of(expires_text),
        expires_at_text=expires_text.strip() if expires_text else None,
        closed=is_true(header(headers, "stream-closed")),
        source_name=_stream_name(source) if source is not None else None,
        fork_offset=offset_of(fork_offset_text.strip()) if fork_offset_text is not None else None,
        fork_sub_offset=sub,
        body=body_of(app.current_event.raw_event),
        public=is_true(header(headers, "postbox-public")),
    )
    if spec.source_name is None and sub_text is not None:
        raise Invalid("Stream-Fork-Sub-Offset needs Stream-Forked-From.", code="INVALID_HEADER")
    result = service.create(form.scope, form.name, spec)
    stream = result.stream
    out = {"Stream-Next-Offset": offsets.format_offset(stream.tail), **form.extra(stream.incarnation)}
    if result.created:
        event = app.current_event
        host = header(headers, "host") or event.request_context.domain_name
        scheme = header(headers, "x-forwarded-proto") or "http"
        out["Location"] = f"{scheme}://{host}{event.raw_event.get('rawPath', '')}"
    if stream.closed:
        out["Stream-Closed"] = "true"
    return _answer(201 if result.created else 200, out, content_type=stream.content_type)


def do_append(form: Form, headers: dict[str, str]) -> Response:
    close = is_true(header(headers, "stream-closed"))
    producer = producer_of(headers)
    body = body_of(app.current_event.raw_event)
    content_type = header(headers, "content-type")
    if not body and not close:
        raise Invalid("An append needs a body.", code="EMPTY_APPEND")
    if body and not content_type:
        raise Invalid("An append needs a Content-Type.", code="MISSING_CONTENT_TYPE")
    written = service.append(form.scope, form.name, body, content_type=content_type,
                             seq=header(headers, "stream-seq"), close=close, producer=producer,
                             incarnation=incarnation_of(headers) if form.spec else None)
    out = {"Stream-Next-Offset": offsets.format_offset(written.next_offset), **form.extra(written.incarnation)}
    if written.closed:
        out["Stream-Closed"] = "true"
    if producer is not None:
        out["Producer-Outcome"] = "duplicate" if written.duplicate else "applied"
        out["Producer-Epoch"] = str(producer.epoch)
        out["Producer-Seq"] = str(written.last_seq if written.duplicate else producer.seq)
    if written.offset is not None:
        out["Stream-Offset"] = offsets.format_offset(written.offset)
    status = 200 if (producer is not None and not written.duplicate and body) else 204
    return _answer(status, out)


def do_delete(form: Form) -> Response:
    service.delete(form.scope, form.name)
    return _answer(204, form.extra(None))


def do_head(form: Form, headers: dict[str, str]) -> Response:
    stream = service.head(form.scope, form.name)
    _check_read_access(form, stream)
    out = {
        "Stream-Next-Offset": offsets.format_offset(stream.tail),
        "Cache-Control": "no-store",
        "ETag": _etag(stream.incarnation, "-1", stream.tail, stream.closed),
        **form.extra(stream.incarnation),
    }
    if stream.closed:
        out["Stream-Closed"] = "true"
    if not form.spec:
        if stream.ttl_seconds is not None:
            out["Stream-TTL"] = str(stream.ttl_seconds)
        if stream.expires_at_text:
            out["Stream-Expires-At"] = stream.expires_at_text
    else:
        out["Ursula-Max-Request-Bytes"] = str(MAX_BODY)
        latest = snapshots.latest_offset(stream)
        if latest is not None:
            out["Stream-Snapshot-Offset"] = offsets.format_offset(latest)
    return _answer(200, out, content_type=stream.content_type)


def _check_read_access(form: Form, stream) -> None:
    if form.anonymous and not stream.public:
        raise Unauthorized("A key is required to read this stream.", code="INVALID_CREDENTIAL")


def _etag(incarnation: str, start: str, nxt: int, closed: bool) -> str:
    return f'"{incarnation}:{start}:{offsets.format_offset(nxt)}{":c" if closed else ""}"'


def do_read(form: Form, headers: dict[str, str]) -> Response:
    query = _query()
    offset_values = [v for k, v in query if k == "offset"]
    live = next((v for k, v in query if k == "live"), None)
    cursor = next((v for k, v in query if k == "cursor"), None)
    if len(offset_values) > 1:
        raise Invalid("Send one offset.", code="INVALID_QUERY")
    offset_text = offset_values[0] if offset_values else None
    if offset_text == "":
        raise Invalid("The offset is empty.", code="INVALID_OFFSET")
    now = offset_text == offsets.NOW
    start = None if offset_text in (None, offsets.START, offsets.NOW) else offset_of(offset_text)
    if live not in (None, "long-poll", "sse"):
        raise Invalid("live is long-poll or sse.", code="INVALID_QUERY")
    if live and offset_text is None:
        raise Invalid("A live read needs an offset.", code="INVALID_QUERY")
    incarnation = incarnation_of(headers) if form.spec else None
    ndjson = form.spec or wants_ndjson(headers)
    if form.anonymous:
        _check_read_access(form, service.head(form.scope, form.name))
    if live == "sse":
        return _sse(form, start, now, cursor, incarnation)
    timed_out = False
    if live == "long-poll":
        result, timed_out = service.wait_read(form.scope, form.name, start, max_bytes=MAX_READ, now=now,
                                              timeout_s=_long_poll_s(), incarnation=incarnation)
    else:
        result = service.read(form.scope, form.name, start, max_bytes=MAX_READ, now=now, incarnation=incarnation,
                              strict=form.spec)
    stream = result.stream
    out = {"Stream-Next-Offset": offsets.format_offset(result.next_offset), **form.extra(stream.incarnation)}
    if result.up_to_date:
        out["Stream-Up-To-Date"] = "true"
    if result.closed_at_tail:
        out["Stream-Closed"] = "true"
    if live == "long-poll":
        if not (result.closed_at_tail and not timed_out and not result.payloads):
            out["Stream-Cursor"] = offsets.response_cursor(cursor)
        if not result.payloads:
            return _answer(204, out)
    body, content_type = read_body(stream.content_type, result.payloads, ndjson)
    etag = _etag(stream.incarnation, offset_text or "-1", result.next_offset, result.closed_at_tail)
    out["ETag"] = etag
    if header(headers, "if-none-match") == etag:
        return _answer(304, {"ETag": etag, **form.extra(stream.incarnation)})
    return _answer(200, out, body, content_type)


def _long_poll_s() -> float:
    """POSTBOX_LONG_POLL_MS, kept inside API Gateway's 30 s integration timeout on AWS."""
    ms = config.settings().long_poll_ms
    if "AWS_LAMBDA_FUNCTION_NAME" in os.environ:
        ms = min(ms, 25_000)
    return ms / 1000.0


def _sse(form: Form, start: int | None, now: bool, cursor: str | None, incarnation: str | None) -> Response:
    """A bounded SSE window: catch-up, then wait for appends until the long-poll timeout; each data
    event is followed by a control event, and the window ends at once when the stream closes."""
    deadline = time.monotonic() + _long_poll_s()
    parts: list[str] = []
    size, waited = 0, False
    result = service.read(form.scope, form.name, start, max_bytes=MAX_READ, now=now, incarnation=incarnation)
    stream = result.stream
    binary = sse_is_binary(stream.content_type)
    while True:
        stream = result.stream
        for i, payload in enumerate(result.payloads):
            nxt = result.start + i + 1
            parts.append(sse_event("data", sse_data(stream.content_type, payload, binary)))
            parts.append(sse_event("control", _control(stream, nxt, cursor)))
            size += len(payload)
        if not result.payloads:
            parts.append(sse_event("control", _control(stream, result.next_offset, cursor)))
        if result.closed_at_tail or size >= MAX_READ or (waited and result.payloads):
            break
        position = result.next_offset
        if not result.up_to_date:
            result = service.read(form.scope, form.name, position, max_bytes=MAX_READ, incarnation=incarnation)
            continue
        left = deadline - time.monotonic()
        if left <= 0:
            break
        result, timed_out = service.wait_read(form.scope, form.name, position, max_bytes=MAX_READ, timeout_s=left,
                                              incarnation=incarnation)
        waited = True
        if timed_out:
            break
    out = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache, no-store", **form.extra(stream.incarnation)}
    if binary:
        out["Stream-SSE-Data-Encoding"] = "base64"
    return _answer(200, out, "".join(parts), "text/event-stream")


def _control(stream, nxt: int, cursor: str | None) -> str:
    data: dict[str, Any] = {"streamNextOffset": offsets.format_offset(nxt)}
    if stream.closed and nxt >= stream.tail:
        data["streamClosed"] = True
    else:
        data["streamCursor"] = offsets.response_cursor(cursor)
        if nxt >= stream.tail:
            data["upToDate"] = True
    return json.dumps(data, separators=(",", ":"))


# -- the open protocol: /v1/stream/{name} -----------------------------------------------------------

def _open(name: str):
    method = app.current_event.http_method.upper()
    if method == "OPTIONS":
        return _answer(204)
    form = Form(False, _open_scope(method), stream_name_of(unquote(name)))
    headers = _headers()
    if method == "PUT":
        return do_create(form, headers)
    if method == "POST":
        return do_append(form, headers)
    if method == "DELETE":
        return do_delete(form)
    if method == "HEAD":
        return do_head(form, headers)
    return do_read(form, headers)


for _method in _METHODS:
    app.route("/v1/stream/<name>", _method)(_open)


# -- the spec file's form: /{account}/s.{name}[/...] -------------------------------------------------

def _not_found() -> Response:
    return Response(404, "application/json", _NOT_FOUND_BODY)


def _account_form(account: str, path: str):
    method = app.current_event.http_method.upper()
    segments = path.split("/")
    if not segments[0].startswith("s.") or len(segments[0]) <= 2:
        return _not_found()
    if method == "OPTIONS":
        return _answer(204, dict(URSULA))
    _request.spec_form = True
    name, rest = stream_name_of(unquote(segments[0][2:])), [unquote(s) for s in segments[1:]]
    tenant_id = _tenant_id(unquote(account))
    principal = _principal()
    if tenant_id is None or (principal is not None and principal.tenant_id != tenant_id):
        raise NotFound("Stream not found.", code="STREAM_NOT_FOUND")
    anonymous = principal is None
    if anonymous and method not in ("GET", "HEAD"):
        raise Unauthorized("A key is required.", code="INVALID_CREDENTIAL")
    if principal is not None and method in _WRITES:
        _require_writer(principal)
    project_id = (principal.project_id if principal else None) or service.default_project(tenant_id)
    form = Form(True, Scope(tenant_id, project_id), name, anonymous)
    headers = _headers()
    if not rest:
        if method in ("PUT", "DELETE"):
            raise Forbidden("Streams are created and deleted through the management API.", code="STREAM_LIFECYCLE")
        if method == "POST":
            return do_append(form, headers)
        if method == "HEAD":
            return do_head(form, headers)
        return do_read(form, headers)
    return extensions.dispatch(form, method, rest, headers, app.current_event.raw_event)


for _method in _METHODS:
    app.route("/<account>/<path>", _method)(_account_form)


_request = threading.local()


@lambda_handler
def handler(event: dict, context: Any) -> dict:
    _request.spec_form = False
    result = app.resolve(event, context)
    headers = result.setdefault("headers", {})
    lowered = {k.lower() for k in headers}
    if _request.spec_form and result.get("statusCode") != 401:  # the server's own answers name it
        headers.update({k: v for k, v in URSULA.items() if k not in lowered})
    for k, v in CORS.items():
        if k not in lowered:
            headers[k] = v
    if "cache-control" not in lowered:
        headers["Cache-Control"] = "no-store"
    if event.get("requestContext", {}).get("http", {}).get("method") == "HEAD":
        result["body"] = ""
        result["isBase64Encoded"] = False
    return result


