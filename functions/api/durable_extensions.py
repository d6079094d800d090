"""The spec file's paths under a stream (`/{account}/s.{name}/...`): snapshots and staged parts,
retention, bootstrap, and the cacheable chunk and snapshot reads under `/incarnation/{token}/`."""

from __future__ import annotations

import re
import secrets
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.event_handler import Response

from functions.api.durable_http import MAX_READ, body_of, header, incarnation_of, offset_of, read_body
from postbox.durable import offsets, service, snapshots
from postbox.errors import Invalid, NotFound, PostboxError, Unauthorized

if TYPE_CHECKING:
    from functions.api.durable import Form

CHUNK_BYTES = 1024 * 1024  # fixed, so a chunk's extent depends only on the (immutable) data
IMMUTABLE = "public, max-age=300, immutable"
_TOKEN = re.compile(r"^[0-9a-f]{16}$")


class MethodNotAllowed(PostboxError):
    status, code = 405, "METHOD_NOT_ALLOWED"


def dispatch(form: Form, method: str, rest: list[str], headers: dict[str, str], event: dict[str, Any]) -> Response:
    """Route a sub-path of a stream (`event` is the request's, for its body); a known path with another
    method is 405."""
    incarnation = incarnation_of(headers)
    match rest:
        case ["snapshot", "parts"]:
            _allow(method, "DELETE")
            snapshots.discard_parts(form.scope, form.name, incarnation)
            return _answer(form, 204, {})
        case ["snapshot", offset, "parts"]:
            _allow(method, "POST")
            part = snapshots.stage_part(form.scope, form.name, offset_of(offset), body_of(event), incarnation)
            return _answer(form, 204, {"Stream-Snapshot-Part": part})
        case ["snapshot", offset]:
            _allow(method, "PUT", "GET", "HEAD")
            if method == "PUT":
                return _publish(form, offset_of(offset), headers, body_of(event), incarnation)
            return _snapshot(form, offset_of(offset), incarnation, cacheable=False)
        case ["retention", offset]:
            _allow(method, "PUT")
            kept = service.retain(form.scope, form.name, offset_of(offset), incarnation=incarnation)
            return _answer(form, 204, {"Stream-Retained-Offset": offsets.format_offset(kept)})
        case ["bootstrap"]:
            _allow(method, "GET", "HEAD")
            return _bootstrap(form, incarnation)
        case ["incarnation", token, "chunk", offset]:
            _allow(method, "GET", "HEAD")
            return _chunk(form, _token(token), offset_of(offset))
        case ["incarnation", token, "snapshot", offset]:
            _allow(method, "GET", "HEAD")
            return _snapshot(form, offset_of(offset), _token(token), cacheable=True)
    raise NotFound("No such path under a stream.", code="NOT_FOUND")


def _allow(method: str, *allowed: str) -> None:
    if method not in allowed:
        raise MethodNotAllowed(f"This path answers {', '.join(allowed)}.")


def _token(value: str) -> str:
    if not _TOKEN.match(value):
        raise Invalid("Not a Stream-Incarnation this server gives.", code="INVALID_REQUEST")
    return value


def _answer(form: Form, status: int, headers: dict[str, str], body: bytes | str = b"",
            content_type: str | None = None, incarnation: str | None = None) -> Response:
    return Response(status, content_type, body, {**form.extra(incarnation), **headers})


def _check_public(form: Form, stream) -> None:
    if form.anonymous and not stream.public:
        raise Unauthorized("A key is required to read this stream.", code="INVALID_CREDENTIAL")


def _publish(form: Form, offset: int, headers: dict[str, str], body: bytes, incarnation: str | None) -> Response:
    content_type = (header(headers, "content-type") or "application/octet-stream").strip()
    parts_header = header(headers, "stream-snapshot-parts")
    if parts_header is not None:
        if body:
            raise Invalid("A commit of staged parts has no body.", code="INVALID_PARTS_COMMIT")
        parts = [p.strip() for p in parts_header.split(",") if p.strip()]
        digest = snapshots.commit_parts(form.scope, form.name, offset, parts, content_type, incarnation)
    else:
        claimed = header(headers, "stream-snapshot-digest")
        if claimed is not None and claimed.strip() != snapshots.digest_of(body):
            raise Invalid("The body does not have the Stream-Snapshot-Digest sent.", code="SNAPSHOT_DIGEST_MISMATCH")
        digest = snapshots.publish(form.scope, form.name, offset, body, content_type, incarnation)
    return _answer(form, 204, {"Stream-Snapshot-Digest": digest})


def _snapshot(form: Form, offset: int, incarnation: str | None, *, cacheable: bool) -> Response:
    stream, snap = snapshots.read(form.scope, form.name, offset, incarnation)
    _check_public(form, stream)
    out = {
        "Stream-Snapshot-Offset": offsets.format_offset(snap.offset),
        "Stream-Snapshot-Digest": snap.digest,
    }
    if cacheable:
        out["Stream-Immutable"] = "true"
        if form.anonymous and stream.public:
            out["Cache-Control"] = IMMUTABLE
    return _answer(form, 200, out, snap.body, snap.content_type, stream.incarnation)


def _chunk(form: Form, token: str, start: int) -> Response:
    """The appends from `start`, cut at a fixed size: immutable once the chunk no longer reaches the
    tail of an open stream, so a CDN may keep it."""
    result = service.read(form.scope, form.name, start, max_bytes=CHUNK_BYTES, incarnation=token, strict=True)
    stream = result.stream
    _check_public(form, stream)
    body, content_type = read_body(stream.content_type, result.payloads, ndjson=True)
    out = {"Stream-Next-Offset": offsets.format_offset(result.next_offset)}
    if result.up_to_date:
        out["Stream-Up-To-Date"] = "true"
    if result.closed_at_tail:
        out["Stream-Closed"] = "true"
    if result.payloads and (not result.up_to_date or result.closed_at_tail):
        out["Stream-Immutable"] = "true"
        if form.anonymous and stream.public:
            out["Cache-Control"] = IMMUTABLE
    return _answer(form, 200, out, body, content_type, stream.incarnation)


def _bootstrap(form: Form, incarnation: str | None) -> Response:
    """`multipart/mixed`: the latest snapshot (when there is one), then the updates after it."""
    stream, snap = snapshots.latest(form.scope, form.name, incarnation)
    _check_public(form, stream)
    start = snap.offset if snap else None
    result = service.read(form.scope, form.name, start, max_bytes=MAX_READ, incarnation=incarnation)
    updates, updates_type = read_body(stream.content_type, result.payloads, ndjson=True)
    boundary = "postbox-" + secrets.token_hex(12)
    parts: list[bytes] = []
    out = {"Stream-Next-Offset": offsets.format_offset(result.next_offset)}
    if snap is not None:
        out["Stream-Snapshot-Offset"] = offsets.format_offset(snap.offset)
        parts.append(_part(boundary, {"Content-Type": snap.content_type,
                                      "Stream-Snapshot-Offset": offsets.format_offset(snap.offset),
                                      "Stream-Snapshot-Digest": snap.digest}, snap.body))
    parts.append(_part(boundary, {"Content-Type": updates_type,
                                  "Stream-Next-Offset": offsets.format_offset(result.next_offset)}, updates))
    if result.up_to_date:
        out["Stream-Up-To-Date"] = "true"
    if result.closed_at_tail:
        out["Stream-Closed"] = "true"
    body = b"".join(parts) + f"--{boundary}--\r\n".encode()
    return _answer(form, 200, out, body, f'multipart/mixed; boundary="{boundary}"', stream.incarnation)


def _part(boundary: str, headers: dict[str, str], body: bytes) -> bytes:
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return f"--{boundary}\r\n{head}\r\n".encode() + body + b"\r\n"
