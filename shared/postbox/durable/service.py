"""Durable streams: create, append, close, read (catch-up and waiting), delete, fork, retention.

Knows nothing of HTTP: positions are integers (the `offsets` module formats them), errors are
domain errors whose details (`closed`, `next_offset`, `current_epoch`, ...) the surface turns into
headers. Every write locks the stream's row, so Stream-Seq, producer state, close and the append
commit together, in order.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import datetime

import psycopg

from postbox import db, wakeup
from postbox.errors import (
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    PostboxError,
    PreconditionFailed,
    TooManyRequests,
)
from postbox.log import store as log
from postbox.log.frames import Record, pack

from . import jsontext, store
from .store import Stream

DEFAULT_CONTENT_TYPE = "application/octet-stream"


class OutOfRange(PostboxError):
    """An offset past the stream's tail, where the caller asked for strict offsets (416)."""

    status, code = 416, "OFFSET_OUT_OF_RANGE"

MAX_PRODUCERS = 10_000
READ_RECORDS = 1000


@dataclass(frozen=True)
class Scope:
    """Whose streams a request names: a tenant's project."""

    tenant_id: str
    project_id: str


@dataclass(frozen=True)
class Producer:
    id: str
    epoch: int
    seq: int

    @property
    def token(self) -> str:
        return json.dumps([self.id, self.epoch, self.seq])


@dataclass
class CreateSpec:
    content_type: str | None = None
    ttl_seconds: int | None = None
    expires_at: datetime | None = None
    expires_at_text: str | None = None
    closed: bool = False
    source_name: str | None = None
    fork_offset: int | None = None
    fork_sub_offset: int = 0
    body: bytes = b""
    public: bool = False


@dataclass
class Created:
    stream: Stream
    created: bool


@dataclass
class Written:
    """What a write did: `next_offset` is the tail after it; `offset` where its data starts."""

    next_offset: int
    offset: int | None = None
    closed: bool = False
    producer: Producer | None = None
    duplicate: bool = False
    last_seq: int | None = None
    incarnation: str = ""


@dataclass
class Read:
    stream: Stream
    start: int
    payloads: list[bytes] = field(default_factory=list)
    next_offset: int = 0
    up_to_date: bool = True

    @property
    def closed_at_tail(self) -> bool:
        return self.stream.closed and self.up_to_date and self.next_offset >= self.stream.tail


def media_type(content_type: str | None) -> str:
    return (content_type or "").split(";")[0].strip().lower()


def is_json(content_type: str) -> bool:
    return media_type(content_type) == "application/json"


def channel(stream_id: int) -> str:
    return f"durable_{stream_id}"


_projects: dict[str, str] = {}


def default_project(tenant_id: str) -> str:
    if tenant_id not in _projects:
        with db.transaction() as conn:
            row = conn.execute(
                "SELECT id::text FROM projects WHERE tenant_id = %s AND name = 'default'", (tenant_id,)
            ).fetchone()
        if row is None:
            raise NotFound("No such account.", code="NOT_FOUND")
        _projects[tenant_id] = row[0]
    return _projects[tenant_id]


# -- finding streams ---------------------------------------------------------------------------------

def _live(conn: psycopg.Connection, stream: Stream | None) -> Stream | None:
    """The stream after its lifetime is applied: an expired stream is removed, or soft-deleted while
    forks still read through it."""
    if stream is None or not stream.expired or stream.deleted:
        return stream
    if stream.forks > 0:
        store.soft_delete(conn, stream.id)
        return store.by_id(conn, stream.id)
    store.delete(conn, stream)
    return None


def _get(conn: psycopg.Connection, scope: Scope, name: str, *, lock: bool = False, gone_ok: bool = False) -> Stream:
    stream = _live(conn, store.find(conn, scope.project_id, name, lock=lock))
    if stream is None:
        raise NotFound("Stream not found.", code="STREAM_NOT_FOUND")
    if stream.deleted and not gone_ok:
        raise Gone("The stream was deleted.", code="STREAM_GONE", incarnation=stream.incarnation)
    return stream


def head(scope: Scope, name: str) -> Stream:
    with db.transaction() as conn:
        return _get(conn, scope, name)


# -- create ------------------------------------------------------------------------------------------

def _same_config(stream: Stream, spec: CreateSpec, content_type: str) -> bool:
    return (
        media_type(stream.content_type) == media_type(content_type)
        and stream.ttl_seconds == spec.ttl_seconds
        and stream.expires_at == spec.expires_at
        and stream.closed == spec.closed
        and stream.source_name == spec.source_name
        and (spec.fork_offset is None or spec.fork_offset == stream.base_offset)
        and stream.fork_sub_offset == spec.fork_sub_offset
    )


def create(scope: Scope, name: str, spec: CreateSpec) -> Created:
    with db.transaction() as conn:
        existing = _live(conn, store.find(conn, scope.project_id, name, lock=True))
        if existing is not None:
            if existing.deleted:
                raise Conflict("The stream was deleted but forks still read it; the name is not free yet.",
                               code="STREAM_ALREADY_EXISTS_CONFLICT")
            content_type = spec.content_type or (existing.content_type if spec.source_name else DEFAULT_CONTENT_TYPE)
            if not _same_config(existing, spec, content_type):
                raise Conflict("The stream exists with a different configuration.",
                               code="STREAM_ALREADY_EXISTS_CONFLICT")
            return Created(existing, False)
        source, base, prefix = None, 0, None
        ttl, expires_at, expires_text = spec.ttl_seconds, spec.expires_at, spec.expires_at_text
        content_type = spec.content_type or DEFAULT_CONTENT_TYPE
        if spec.source_name is not None:
            source = _live(conn, store.find(conn, scope.project_id, spec.source_name, lock=True))
            if source is None:
                raise NotFound("The source stream does not exist.", code="STREAM_NOT_FOUND")
            if source.deleted:
                raise Conflict("The source stream was deleted.", code="STREAM_ALREADY_EXISTS_CONFLICT")
            if spec.content_type and media_type(spec.content_type) != media_type(source.content_type):
                raise Conflict("A fork keeps its source's content type.", code="CONTENT_TYPE_MISMATCH")
            content_type = spec.content_type or source.content_type
            base = source.tail if spec.fork_offset is None else spec.fork_offset
            if base > source.tail or base < source.retained_offset:
                raise Invalid("The fork offset is not in the source stream.", code="INVALID_OFFSET")
            if spec.fork_sub_offset:
                prefix = _sub_offset_prefix(conn, source, base, spec.fork_sub_offset)
            if ttl is None and expires_at is None:
                ttl, expires_at, expires_text = source.ttl_seconds, source.expires_at, source.expires_at_text
        stream_id = store.insert(
            conn, tenant_id=scope.tenant_id, project_id=scope.project_id, name=name, content_type=content_type,
            ttl_seconds=ttl, expires_at=expires_at, expires_at_text=expires_text, public=spec.public,
            source=source, base_offset=base, fork_sub_offset=spec.fork_sub_offset,
        )
        stream = store.by_id(conn, stream_id)
        records = []
        if prefix is not None:
            records.append(Record(prefix))
        if spec.body:
            payload = _payload(content_type, spec.body, allow_empty=True)
            if payload:
                records.append(Record(payload))
        if records:
            log.append(conn, stream.partition_id, records)
        if spec.closed:
            store.update_after_write(conn, stream_id, seq=None, close=True, closed_by=None)
        wakeup.notify(conn, [channel(stream_id)])
        return Created(store.by_id(conn, stream_id), True)


def _sub_offset_prefix(conn: psycopg.Connection, source: Stream, offset: int, sub: int) -> bytes:
    """The first `sub` bytes (or JSON messages) of the source's append at `offset`, which a fork
    keeps as its own first append."""
    entries = read_range(conn, source, offset, offset + 1)
    if not entries:
        raise Invalid("There is no append at the fork offset to take a sub-offset of.", code="INVALID_OFFSET")
    payload = entries[0][1]
    if is_json(source.content_type):
        messages = jsontext.unpack(payload)
        if sub > len(messages):
            raise Invalid("The sub-offset is past the append's messages.", code="INVALID_OFFSET")
        return jsontext.pack(messages[:sub])
    if sub > len(payload):
        raise Invalid("The sub-offset is past the append's bytes.", code="INVALID_OFFSET")
    return payload[:sub]


def _payload(content_type: str, body: bytes, *, allow_empty: bool = False) -> bytes:
    if is_json(content_type):
        return jsontext.pack(jsontext.messages_of(body, allow_empty=allow_empty))
    return body


# -- append and close -------------------------------------------------------------------------------
# One SQL function call on an autocommit connection (`durable_append`, migration 0006): the row lock,
# the protocol's checks, the log append, producer state, close and the wake-up commit together in one
# round trip. The body is validated (JSON mode) and framed here first; the function refuses with an
# outcome, which becomes the error the protocol names, in the order the checks are documented.

_APPEND = (
    "SELECT * FROM durable_append(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %b)"
)


def append(
    scope: Scope,
    name: str,
    body: bytes,
    *,
    content_type: str | None,
    seq: str | None = None,
    close: bool = False,
    producer: Producer | None = None,
    incarnation: str | None = None,
) -> Written:
    """Append `body` (empty: only close), checking Stream-Seq, the producer's (epoch, seq) and the
    stream's state under its row lock."""
    invalid: Invalid | None = None
    codec = raw = frames = None
    if body:
        try:
            payload = _payload(content_type, body)  # the request's type: the stream's, or a mismatch
        except Invalid as e:
            invalid = e
        else:
            codec, frames, raw = pack([Record(payload)])
    media = media_type(content_type)
    params = (
        scope.project_id, name, media, incarnation, seq, close,
        producer.id if producer else None, producer.epoch if producer else None,
        producer.seq if producer else None, producer.token if producer else None,
        MAX_PRODUCERS, invalid is not None, codec, raw, frames,
    )
    with db.connection() as conn:
        outcome, tail, offset, stream_incarnation, value = conn.execute(_APPEND, params).fetchone()
    if outcome == "appended":
        return Written(tail, offset=offset, closed=close, producer=producer, incarnation=stream_incarnation)
    if outcome == "closed_now":
        return Written(tail, closed=True, producer=producer, incarnation=stream_incarnation)
    if outcome == "duplicate":
        return Written(tail, producer=producer, duplicate=True, last_seq=value, incarnation=stream_incarnation)
    if outcome == "closed_duplicate":
        return Written(tail, closed=True, producer=producer, duplicate=True, last_seq=producer.seq,
                       incarnation=stream_incarnation)
    if outcome == "closed_again":
        return Written(tail, closed=True, incarnation=stream_incarnation)
    if outcome == "invalid":
        raise invalid
    raise _refusal(outcome, tail, stream_incarnation, value, producer)


def _refusal(outcome: str, tail: int | None, stream_incarnation: str | None, value: int | None,
             producer: Producer | None) -> PostboxError:
    """The error for a write `durable_append` refused, with the details the protocol's headers carry."""
    if outcome == "missing":
        return NotFound("Stream not found.", code="STREAM_NOT_FOUND")
    if outcome == "gone":
        return Gone("The stream was deleted.", code="STREAM_GONE", incarnation=stream_incarnation)
    if outcome == "incarnation":
        return PreconditionFailed("The stream is not the one that answered this Stream-Incarnation.",
                                  code="INCARNATION_MISMATCH", incarnation=stream_incarnation)
    if outcome == "closed":
        return Conflict("The stream is closed.", code="STREAM_CLOSED", closed=True, next_offset=tail)
    if outcome == "content_type":
        return Conflict("Content-Type does not match the stream's.", code="CONTENT_TYPE_MISMATCH")
    if outcome == "producer_gap":
        return Conflict("Producer sequence gap.", code="PRODUCER_SEQ_CONFLICT", expected_seq=value,
                        received_seq=producer.seq if producer else None)
    if outcome == "producer_limit":
        return TooManyRequests("Too many producers on this stream.", code="PRODUCER_LIMIT", retry_after=60)
    if outcome == "epoch_stale":
        return Forbidden("Stale producer epoch.", code="PRODUCER_EPOCH_STALE", current_epoch=value)
    if outcome == "epoch_seq":
        return Invalid("A new producer epoch starts at sequence 0.", code="INVALID_PRODUCER")
    if outcome == "seq_conflict":
        return Conflict("Stream-Seq must increase.", code="STREAM_SEQ_CONFLICT")
    raise RuntimeError(f"durable_append answered {outcome!r}")


def _check_incarnation(stream: Stream, incarnation: str | None) -> None:
    if incarnation is not None and incarnation != stream.incarnation:
        raise PreconditionFailed("The stream is not the one that answered this Stream-Incarnation.",
                                 code="INCARNATION_MISMATCH", incarnation=stream.incarnation)


# -- delete ------------------------------------------------------------------------------------------

def delete(scope: Scope, name: str) -> None:
    with db.transaction() as conn:
        stream = _get(conn, scope, name, lock=True)
        if stream.forks > 0:
            store.soft_delete(conn, stream.id)
        else:
            store.delete(conn, stream)
        wakeup.notify(conn, [channel(stream.id)])


# -- reads -------------------------------------------------------------------------------------------

def read_range(
    conn: psycopg.Connection, stream: Stream, start: int, until: int, *, max_bytes: int | None = None
) -> list[tuple[int, bytes]]:
    """(offset, payload) of the appends in [start, until), through the fork chain, bounded in bytes
    (the first append always comes back)."""
    out: list[tuple[int, bytes]] = []
    if stream.source_id is not None and start < stream.base_offset:
        source = store.by_id(conn, stream.source_id)
        if source is not None:
            out = read_range(conn, source, start, min(until, stream.base_offset), max_bytes=max_bytes)
        if out and (out[-1][0] + 1 < min(until, stream.base_offset)):
            return out  # the byte bound stopped the inherited part
    used = sum(len(p) for _, p in out)
    own_start = max(start, stream.base_offset) - stream.base_offset
    own_until = until - stream.base_offset
    if own_until <= own_start:
        return out
    budget = None if max_bytes is None else max(max_bytes - used, 1 if not out else 0)
    if budget == 0:
        return out
    for entry in log.read(conn, stream.partition_id, own_start, max_records=READ_RECORDS, max_bytes=budget,
                          until_offset=own_until):
        if out and budget is not None and used + len(entry.payload) > max_bytes:
            break
        out.append((stream.base_offset + entry.offset, entry.payload))
        used += len(entry.payload)
    return out


def read(scope: Scope, name: str, start: int | None, *, max_bytes: int, now: bool = False,
         incarnation: str | None = None, strict: bool = False) -> Read:
    """A catch-up read from `start` (None: the stream's first retained offset; `now`: its tail).
    With `strict`, an offset past the tail is 416 rather than an empty answer at the tail."""
    with db.transaction() as conn:
        stream = _get(conn, scope, name)
        _check_incarnation(stream, incarnation)
        if strict and start is not None and start > stream.tail:
            raise OutOfRange("The offset is past the stream's tail.", incarnation=stream.incarnation)
        store.touch(conn, stream)
        return _read(conn, stream, start, max_bytes=max_bytes, now=now)


def _read(conn: psycopg.Connection, stream: Stream, start: int | None, *, max_bytes: int, now: bool) -> Read:
    if now:
        return Read(stream, stream.tail, [], stream.tail, True)
    begin = stream.retained_offset if start is None else start
    if begin < stream.retained_offset:
        raise Gone("Offsets below the retained offset were removed.", code="STREAM_GONE",
                   incarnation=stream.incarnation, retained_offset=stream.retained_offset)
    if begin >= stream.tail:
        return Read(stream, begin, [], stream.tail, True)
    entries = read_range(conn, stream, begin, stream.tail, max_bytes=max_bytes)
    nxt = entries[-1][0] + 1 if entries else begin
    return Read(stream, begin, [p for _, p in entries], nxt, nxt >= stream.tail)


def wait_read(scope: Scope, name: str, start: int | None, *, max_bytes: int, timeout_s: float, now: bool = False,
              incarnation: str | None = None) -> tuple[Read, bool]:
    """A long-poll: answer at once if there is data (or the stream is closed at its tail), else wait up
    to `timeout_s` for an append. Returns the read and whether it timed out."""
    deadline = time.monotonic() + timeout_s
    result = read(scope, name, start, max_bytes=max_bytes, now=now, incarnation=incarnation)
    begin = result.start
    while not result.payloads and not result.stream.closed and begin >= result.stream.tail:
        left = deadline - time.monotonic()
        if left <= 0:
            return result, True
        wakeup.wait([channel(result.stream.id)], min(left, 1.0))
        result = read(scope, name, begin, max_bytes=max_bytes, incarnation=incarnation)
    return result, False


# -- retention ---------------------------------------------------------------------------------------

def retain(scope: Scope, name: str, offset: int, *, incarnation: str | None = None) -> int:
    """Advance the retained offset: appends below it are removed and their offsets answer 410."""
    with db.transaction() as conn:
        stream = _get(conn, scope, name, lock=True)
        _check_incarnation(stream, incarnation)
        if offset > stream.tail:
            raise Invalid("The retained offset is past the stream's tail.", code="INVALID_RETENTION")
        forked_at = store.lowest_fork_offset(conn, stream.id) if stream.forks else None
        if forked_at is not None and offset > forked_at:
            raise Invalid("A fork still reads this stream below that offset.", code="INVALID_RETENTION")
        if offset > stream.retained_offset:
            store.set_retained(conn, stream, offset)
            return offset
        return stream.retained_offset


def sweep_expired(limit: int = 500) -> int:
    """The expiry agent's bounded pass: remove (or soft-delete) streams whose lifetime ended."""
    with db.transaction() as conn:
        ids = store.expired_ids(conn, limit)
        for stream_id in ids:
            _live(conn, store.by_id(conn, stream_id, lock=True))
        return len(ids)
