"""The hosted form, `/{account}/s.{name}`, with Ursula's paths under a stream: snapshots and
staged parts, retention, bootstrap, and the cacheable chunk and snapshot reads under
`/incarnation/{token}/`. Each is a row of the route table; `/{account}/{stream}/{rest+}` answers
the rest (404, or 405 for a path the table serves with other methods)."""

from __future__ import annotations

import re
import secrets
from urllib.parse import unquote

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from functions.api.durable import verbs
from functions.api.durable.resolver import app, finish, headers, method, principal
from functions.api.durable.wire import (
    MAX_READ,
    URSULA,
    body_of,
    header,
    incarnation_of,
    offset_of,
    read_body,
    stream_name_of,
)
from postbox.durable import access, lifecycle, offsets, reads, snapshots
from postbox.errors import Forbidden, Invalid, NotFound, PostboxError

router = APIGatewayHttpRouter()  # routes carry no return annotation: validation would read it as a model
STREAM = "/<account>/<stream>"
CHUNK_BYTES = 1024 * 1024  # fixed, so a chunk's extent depends only on the (immutable) data
IMMUTABLE = "public, max-age=300, immutable"
_TOKEN = re.compile(r"^[0-9a-f]{16}$")
_READS = ("GET", "HEAD")
_NOT_FOUND_BODY = '{"message": "Not Found"}'


class MethodNotAllowed(PostboxError):
    status, code = 405, "METHOD_NOT_ALLOWED"


class NotAStream(Exception):
    """A path of the form's shape whose second segment is not `s.{name}`: API Gateway's own 404."""


@router.exception_handler(NotAStream)
def _not_a_stream(_: NotAStream):
    return finish(Response(404, "application/json", _NOT_FOUND_BODY))


def _form(account: str, stream: str, need: str) -> verbs.Form:
    _check_shape(stream)
    name = stream_name_of(unquote(stream[2:]))
    allowed = access.hosted_form(unquote(account), principal(), need)
    if need == access.READ:
        access.require_readable(allowed, name)
    return verbs.Form(True, allowed, name)


def _check_shape(stream: str) -> None:
    if not stream.startswith("s.") or len(stream) <= 2:
        raise NotAStream()


def _answer(form: verbs.Form, status: int, out: dict[str, str], body: bytes | str = b"",
            content_type: str | None = None, incarnation: str | None = None) -> Response:
    return verbs.answer(status, {**form.extra(incarnation), **out}, body, content_type)


# -- the stream ---------------------------------------------------------------------------------------

@router.get(STREAM)
def read(account: str, stream: str):
    return verbs.read(_form(account, stream, access.READ), headers())


@router.head(STREAM)
def head(account: str, stream: str):
    return verbs.head(_form(account, stream, access.READ))


@router.post(STREAM)
def append(account: str, stream: str):
    return verbs.append(_form(account, stream, access.WRITE), headers())


@router.route(STREAM, method=["PUT", "DELETE"])
def lifecycle_elsewhere(account: str, stream: str):
    _form(account, stream, access.WRITE)
    raise Forbidden("Streams are created and deleted through the management API.", code="STREAM_LIFECYCLE")


@router.route(STREAM, method="OPTIONS")
def preflight(account: str, stream: str):
    _check_shape(stream)
    return verbs.answer(204, dict(URSULA))


# -- snapshots ----------------------------------------------------------------------------------------

@router.delete(STREAM + "/snapshot/parts")
def discard_parts(account: str, stream: str):
    form = _form(account, stream, access.WRITE)
    snapshots.discard_parts(form.scope, form.name, incarnation_of(headers()))
    return _answer(form, 204, {})


@router.post(STREAM + "/snapshot/<offset>/parts")
def stage_part(account: str, stream: str, offset: str):
    form = _form(account, stream, access.WRITE)
    part = snapshots.stage_part(form.scope, form.name, offset_of(offset), body_of(app.current_event.raw_event),
                                incarnation_of(headers()))
    return _answer(form, 204, {"Stream-Snapshot-Part": part})


@router.put(STREAM + "/snapshot/<offset>")
def publish(account: str, stream: str, offset: str):
    form = _form(account, stream, access.WRITE)
    request = headers()
    incarnation, at, body = incarnation_of(request), offset_of(offset), body_of(app.current_event.raw_event)
    content_type = (header(request, "content-type") or "application/octet-stream").strip()
    parts_header = header(request, "stream-snapshot-parts")
    if parts_header is not None:
        if body:
            raise Invalid("A commit of staged parts has no body.", code="INVALID_PARTS_COMMIT")
        parts = [p.strip() for p in parts_header.split(",") if p.strip()]
        digest = snapshots.commit_parts(form.scope, form.name, at, parts, content_type, incarnation)
    else:
        claimed = header(request, "stream-snapshot-digest")
        if claimed is not None and claimed.strip() != snapshots.digest_of(body):
            raise Invalid("The body does not have the Stream-Snapshot-Digest sent.", code="SNAPSHOT_DIGEST_MISMATCH")
        digest = snapshots.publish(form.scope, form.name, at, body, content_type, incarnation)
    return _answer(form, 204, {"Stream-Snapshot-Digest": digest})


@router.route(STREAM + "/snapshot/<offset>", method=list(_READS))
def snapshot(account: str, stream: str, offset: str):
    form = _form(account, stream, access.READ)
    return _snapshot(form, offset_of(offset), incarnation_of(headers()), cacheable=False)


def _snapshot(form: verbs.Form, offset: int, incarnation: str | None, *, cacheable: bool) -> Response:
    stream, snap = snapshots.read(form.scope, form.name, offset, incarnation)
    out = {
        "Stream-Snapshot-Offset": offsets.format_offset(snap.offset),
        "Stream-Snapshot-Digest": snap.digest,
    }
    if cacheable:
        out["Stream-Immutable"] = "true"
        if form.access.public_only and stream.public:
            out["Cache-Control"] = IMMUTABLE
    return _answer(form, 200, out, snap.body, snap.content_type, stream.incarnation)


# -- retention and bootstrap -------------------------------------------------------------------------

@router.put(STREAM + "/retention/<offset>")
def retain(account: str, stream: str, offset: str):
    form = _form(account, stream, access.WRITE)
    kept = lifecycle.retain(form.scope, form.name, offset_of(offset), incarnation=incarnation_of(headers()))
    return _answer(form, 204, {"Stream-Retained-Offset": offsets.format_offset(kept)})


@router.route(STREAM + "/bootstrap", method=list(_READS))
def bootstrap(account: str, stream: str):
    """`multipart/mixed`: the latest snapshot (when there is one), then the updates after it."""
    form = _form(account, stream, access.READ)
    incarnation = incarnation_of(headers())
    found, snap = snapshots.latest(form.scope, form.name, incarnation)
    start = snap.offset if snap else None
    result = reads.read(form.scope, form.name, start, max_bytes=MAX_READ, incarnation=incarnation)
    updates, updates_type = read_body(found.content_type, result.payloads, ndjson=True)
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
    return _answer(form, 200, out, body, f'multipart/mixed; boundary="{boundary}"', found.incarnation)


def _part(boundary: str, part_headers: dict[str, str], body: bytes) -> bytes:
    head_text = "".join(f"{k}: {v}\r\n" for k, v in part_headers.items())
    return f"--{boundary}\r\n{head_text}\r\n".encode() + body + b"\r\n"


# -- cacheable reads under /incarnation/{token}/ -------------------------------------------------------

def _token(value: str) -> str:
    if not _TOKEN.match(value):
        raise Invalid("Not a Stream-Incarnation this server gives.", code="INVALID_REQUEST")
    return value


@router.route(STREAM + "/incarnation/<token>/chunk/<offset>", method=list(_READS))
def chunk(account: str, stream: str, token: str, offset: str):
    """The appends from `offset`, cut at a fixed size: immutable once the chunk no longer reaches the
    tail of an open stream, so a CDN may keep it."""
    form = _form(account, stream, access.READ)
    token, start = _token(token), offset_of(offset)
    result = reads.read(form.scope, form.name, start, max_bytes=CHUNK_BYTES, incarnation=token, strict=True)
    found = result.stream
    body, content_type = read_body(found.content_type, result.payloads, ndjson=True)
    out = {"Stream-Next-Offset": offsets.format_offset(result.next_offset)}
    if result.up_to_date:
        out["Stream-Up-To-Date"] = "true"
    if result.closed_at_tail:
        out["Stream-Closed"] = "true"
    if result.payloads and (not result.up_to_date or result.closed_at_tail):
        out["Stream-Immutable"] = "true"
        if form.access.public_only and found.public:
            out["Cache-Control"] = IMMUTABLE
    return _answer(form, 200, out, body, content_type, found.incarnation)


@router.route(STREAM + "/incarnation/<token>/snapshot/<offset>", method=list(_READS))
def immutable_snapshot(account: str, stream: str, token: str, offset: str):
    form = _form(account, stream, access.READ)
    return _snapshot(form, offset_of(offset), _token(token), cacheable=True)


# -- everything else under a stream --------------------------------------------------------------------

@router.route(STREAM + "/<rest>", method=["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS"])
def elsewhere(account: str, stream: str, rest: str):
    """A path the route table does not serve under a stream: 404, or 405 naming the methods it has."""
    if method() == "OPTIONS":
        _check_shape(stream)
        return verbs.answer(204, dict(URSULA))
    _form(account, stream, access.READ if method() in _READS else access.WRITE)
    path = app.current_event.path
    allowed = [m for m in ("GET", "HEAD", "POST", "PUT", "DELETE") if _served(m, path)]
    if allowed:
        raise MethodNotAllowed(f"This path answers {', '.join(allowed)}.")
    raise NotFound("No such path under a stream.", code="NOT_FOUND")


def _served(verb: str, path: str) -> bool:
    from functions import routes  # the whole route table: for this rare answer only, not every cold start

    found = routes.match(verb, path)
    return found is not None and not found[0].path.endswith("+}")
