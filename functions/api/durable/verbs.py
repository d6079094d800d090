"""The stream verbs both forms answer (create, append, delete, HEAD, reads, long-poll and SSE):
each parses its headers and query into domain values, calls `postbox.durable`, and shapes the
answer. What differs between the forms is in `Form`."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any, NamedTuple
from urllib.parse import quote, unquote

from aws_lambda_powertools.event_handler import Response

from functions import streaming
from functions.api.durable.resolver import app, principal, query
from functions.api.durable.wire import (
    MAX_BODY,
    MAX_READ,
    body_of,
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
    ttl_of,
    wants_ndjson,
    whole_number,
)
from postbox import config, wait_slots, wakeup
from postbox.durable import catalog, lifecycle, live, offsets, reads, snapshots, writes
from postbox.durable.access import Access
from postbox.durable.model import CreateSpec, Read, Scope
from postbox.errors import Invalid, PostboxError

_URL_SAFE = "/%:@!$&'()*+,;=-._~"  # what a path keeps as is; anything else is percent-encoded


class Form(NamedTuple):
    """A request's stream and what its form changes: the hosted form reads JSON as NDJSON, answers
    with `Stream-Incarnation`, honours it on requests, and is strict about offsets past the tail."""

    hosted: bool
    access: Access
    name: str

    @property
    def scope(self) -> Scope:
        return self.access.scope

    def extra(self, incarnation: str | None) -> dict[str, str]:
        return {"Stream-Incarnation": incarnation} if self.hosted and incarnation else {}


def answer(status: int, headers: dict[str, str] | None = None, body: bytes | str = b"",
           content_type: str | None = None) -> Response:
    return Response(status, content_type, body, dict(headers or {}))


def _source_name(value: str) -> str:
    """A Stream-Forked-From value: a stream's path in either form, or its bare name."""
    path = unquote(value.strip())
    if path.startswith("/v1/stream/"):
        return path[len("/v1/stream/"):]
    m = re.match(r"^/[^/]+/s\.([^/]+)$", path)
    return m.group(1) if m else path.lstrip("/")


def create(form: Form, headers: dict[str, str]) -> Response:
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
        parsed = whole_number(sub_text)
        if parsed is None:
            raise Invalid("Stream-Fork-Sub-Offset is a whole number below 2^53.", code="INVALID_HEADER")
        sub = parsed
        if sub and fork_offset_text is None:
            raise Invalid("A sub-offset needs Stream-Fork-Offset.", code="INVALID_HEADER")
    spec = CreateSpec(
        content_type=content_type.strip() if content_type else None,
        ttl_seconds=ttl_of(ttl_text),
        expires_at=expires_of(expires_text),
        expires_at_text=expires_text.strip() if expires_text else None,
        closed=is_true(header(headers, "stream-closed")),
        source_name=_source_name(source) if source is not None else None,
        fork_offset=offset_of(fork_offset_text.strip()) if fork_offset_text is not None else None,
        fork_sub_offset=sub,
        body=body_of(app.current_event.raw_event),
        public=is_true(header(headers, "postbox-public")),
    )
    result = lifecycle.create(form.scope, form.name, spec)
    stream = result.stream
    out = {"Stream-Next-Offset": offsets.format_offset(stream.tail), **form.extra(stream.incarnation)}
    if result.created:
        event = app.current_event
        host = header(headers, "host") or event.request_context.domain_name
        scheme = header(headers, "x-forwarded-proto") or "http"
        path = quote(event.raw_event.get("rawPath", ""), safe=_URL_SAFE)  # a header is Latin-1: encode the rest
        out["Location"] = f"{scheme}://{host}{path}"
    if stream.closed:
        out["Stream-Closed"] = "true"
    return answer(201 if result.created else 200, out, content_type=stream.content_type)


def append(form: Form, headers: dict[str, str]) -> Response:
    close = is_true(header(headers, "stream-closed"))
    producer = producer_of(headers)
    body = body_of(app.current_event.raw_event)
    content_type = header(headers, "content-type")
    if not body and not close:
        raise Invalid("An append needs a body.", code="EMPTY_APPEND")
    if body and not content_type:
        raise Invalid("An append needs a Content-Type.", code="MISSING_CONTENT_TYPE")
    written = writes.append(form.scope, form.name, body, content_type=content_type,
                            seq=header(headers, "stream-seq"), close=close, producer=producer,
                            incarnation=incarnation_of(headers) if form.hosted else None)
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
    return answer(status, out)


def delete(form: Form) -> Response:
    lifecycle.delete(form.scope, form.name)
    return answer(204)


def head(form: Form) -> Response:
    stream = catalog.head(form.scope, form.name)
    out = {
        "Stream-Next-Offset": offsets.format_offset(stream.tail),
        "Cache-Control": "no-store",
        "ETag": _etag(stream.incarnation, "-1", stream.tail, stream.closed),
        **form.extra(stream.incarnation),
    }
    if stream.closed:
        out["Stream-Closed"] = "true"
    if not form.hosted:
        if stream.ttl_seconds is not None:
            out["Stream-TTL"] = str(stream.ttl_seconds)
        if stream.expires_at_text:
            out["Stream-Expires-At"] = stream.expires_at_text
    else:
        out["Ursula-Max-Request-Bytes"] = str(MAX_BODY)
        latest = snapshots.latest_offset(stream)
        if latest is not None:
            out["Stream-Snapshot-Offset"] = offsets.format_offset(latest)
    return answer(200, out, content_type=stream.content_type)


def _etag(incarnation: str, start: str, nxt: int, closed: bool) -> str:
    return f'"{incarnation}:{start}:{offsets.format_offset(nxt)}{":c" if closed else ""}"'


def read(form: Form, headers: dict[str, str]) -> Response:
    params = query()
    offset_values = [v for k, v in params if k == "offset"]
    live_mode = next((v for k, v in params if k == "live"), None)
    cursor = next((v for k, v in params if k == "cursor"), None)
    if len(offset_values) > 1:
        raise Invalid("Send one offset.", code="INVALID_QUERY")
    offset_text = offset_values[0] if offset_values else None
    if offset_text == "":
        raise Invalid("The offset is empty.", code="INVALID_OFFSET")
    now = offset_text == offsets.NOW
    start = None if offset_text in (None, offsets.START, offsets.NOW) else offset_of(offset_text)
    if live_mode not in (None, "long-poll", "sse"):
        raise Invalid("live is long-poll or sse.", code="INVALID_QUERY")
    if live_mode and offset_text is None:
        raise Invalid("A live read needs an offset.", code="INVALID_QUERY")
    incarnation = incarnation_of(headers) if form.hosted else None
    ndjson = form.hosted or wants_ndjson(headers)
    if live_mode == "sse":
        return _sse(form, start, now, cursor, incarnation)
    timed_out = False
    if live_mode == "long-poll":
        result, timed_out = live.wait_read(form.scope, form.name, start, max_bytes=MAX_READ, now=now,
                                           timeout_s=wakeup.max_wait_seconds(), caller=_waiting_caller(),
                                           incarnation=incarnation)
    else:
        result = reads.read(form.scope, form.name, start, max_bytes=MAX_READ, now=now, incarnation=incarnation,
                            strict=form.hosted)
    stream = result.stream
    out = {"Stream-Next-Offset": offsets.format_offset(result.next_offset), **form.extra(stream.incarnation)}
    if result.up_to_date:
        out["Stream-Up-To-Date"] = "true"
    if result.closed_at_tail:
        out["Stream-Closed"] = "true"
    if live_mode == "long-poll":
        if not (result.closed_at_tail and not timed_out and not result.payloads):
            out["Stream-Cursor"] = offsets.response_cursor(cursor)
        if not result.payloads:
            return answer(204, out)
    body, content_type = read_body(stream.content_type, result.payloads, ndjson)
    etag = _etag(stream.incarnation, offset_text or "-1", result.next_offset, result.closed_at_tail)
    out["ETag"] = etag
    if header(headers, "if-none-match") == etag:
        return answer(304, {"ETag": etag, **form.extra(stream.incarnation)})
    return answer(200, out, body, content_type)


def _waiting_caller() -> wait_slots.Caller:
    """Whose waits a live read counts among: its key's tenant, or an anonymous reader's address."""
    return wait_slots.caller(principal(), app.current_event.request_context.http.source_ip)


def _sse(form: Form, start: int | None, now: bool, cursor: str | None, incarnation: str | None) -> Response:
    """An SSE answer: each data event followed by a control event, one control event for a read that
    found nothing. Streamed where the door carries it (open until the stream closes, see `_sse_stream`),
    else one bounded window."""
    if streaming.available():
        return _sse_stream(form, start, now, cursor, incarnation)
    batches = live.window(form.scope, form.name, start, now=now, incarnation=incarnation, max_bytes=MAX_READ,
                          timeout_s=wakeup.max_wait_seconds(), caller=_waiting_caller())
    binary = sse_is_binary(batches[0].stream.content_type)
    parts: list[str] = []
    for result in batches:
        parts.extend(_sse_events(result, cursor, binary))
    return _sse_answer(form, batches[-1].stream, binary, "".join(parts))


def _sse_answer(form: Form, stream: Any, binary: bool, body: Any) -> Response:
    out = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache, no-store", **form.extra(stream.incarnation)}
    if binary:
        out["Stream-SSE-Data-Encoding"] = "base64"
    return answer(200, out, body, "text/event-stream")


def _sse_stream(form: Form, start: int | None, now: bool, cursor: str | None, incarnation: str | None) -> Response:
    """An open SSE answer: the catch-up, then each append as it lands, a control event (the client's
    offset, `upToDate`) after every heartbeat without one, until the stream is closed at its tail, the
    invocation's deadline or POSTBOX_STREAM_MAX_SECONDS (the client reconnects from the last
    `streamNextOffset`). The catch-up is read here, so a missing stream is still a 404."""
    settings = config.settings()
    until = min(streaming.deadline(), time.monotonic() + settings.stream_max_seconds)
    follow = live.follow(form.scope, form.name, start, now=now, incarnation=incarnation, max_bytes=MAX_READ,
                         total_bytes=settings.stream_max_bytes, heartbeat_s=settings.stream_heartbeat_ms / 1000,
                         until=until, caller=_waiting_caller())
    first = next(follow)
    binary = sse_is_binary(first.stream.content_type)
    return _sse_answer(form, first.stream, binary, streaming.StreamedBody(_sse_chunks(first, follow, cursor, binary)))


def _sse_chunks(first: Read, follow: Iterator[Read | None], cursor: str | None, binary: bool) -> Iterator[bytes]:
    """The events of a streamed SSE answer, one chunk per read or heartbeat. A refusal met on the way
    (the stream deleted, its offsets removed) ends the answer: the client's reconnect is told why."""
    last = first
    try:
        yield "".join(_sse_events(first, cursor, binary)).encode()
        for result in follow:
            if result is None:
                yield sse_event("control", _control(last.stream, last.next_offset, cursor)).encode()
                continue
            last = result
            yield "".join(_sse_events(result, cursor, binary)).encode()
    except PostboxError:
        return
    finally:
        follow.close()


def _sse_events(result: Read, cursor: str | None, binary: bool) -> list[str]:
    stream = result.stream
    events = []
    for i, payload in enumerate(result.payloads):
        events.append(sse_event("data", sse_data(stream.content_type, payload, binary)))
        events.append(sse_event("control", _control(stream, result.start + i + 1, cursor)))
    if not result.payloads:
        events.append(sse_event("control", _control(stream, result.next_offset, cursor)))
    return events


def _control(stream: Any, nxt: int, cursor: str | None) -> str:
    data: dict[str, Any] = {"streamNextOffset": offsets.format_offset(nxt)}
    if stream.closed and nxt >= stream.tail:
        data["streamClosed"] = True
    else:
        data["streamCursor"] = offsets.response_cursor(cursor)
        if nxt >= stream.tail:
            data["upToDate"] = True
    return json.dumps(data, separators=(",", ":"))
