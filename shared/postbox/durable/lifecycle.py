"""A stream's life: create (or fork), delete, retention, and the expiry sweep. Every write here
locks the stream's row, so it orders with appends."""

from __future__ import annotations

import psycopg

from postbox import db, wakeup
from postbox.errors import Conflict, Invalid, NotFound
from postbox.log_engine import store as log
from postbox.log_engine.frames import Record

from . import catalog, jsontext, store
from .model import DEFAULT_CONTENT_TYPE, Created, CreateSpec, Scope, is_json, media_type, payload_of
from .reads import read_range
from .store import Stream


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


def _existing(existing: Stream, spec: CreateSpec) -> Created:
    """The answer to creating a stream whose name is taken: the same configuration again answers
    the existing stream, another (or a soft-deleted stream) is 409."""
    if existing.deleted:
        raise Conflict("The stream was deleted but forks still read it; the name is not free yet.",
                       code="STREAM_ALREADY_EXISTS_CONFLICT")
    content_type = spec.content_type or (existing.content_type if spec.source_name else DEFAULT_CONTENT_TYPE)
    if not _same_config(existing, spec, content_type):
        raise Conflict("The stream exists with a different configuration.", code="STREAM_ALREADY_EXISTS_CONFLICT")
    return Created(existing, False)


def create(scope: Scope, name: str, spec: CreateSpec) -> Created:
    """Create `name` (the same configuration again answers the existing stream, another is 409).
    Creates of one name racing each other end as if they came one after another: one creates it,
    the others find it."""
    with db.transaction() as conn:
        existing = catalog.alive(conn, store.find(conn, scope.project_id, name, lock=True))
        if existing is not None:
            return _existing(existing, spec)
        source, base, prefix = None, 0, None
        ttl, expires_at, expires_text = spec.ttl_seconds, spec.expires_at, spec.expires_at_text
        content_type = spec.content_type or DEFAULT_CONTENT_TYPE
        if spec.source_name is not None:
            source = catalog.alive(conn, store.find(conn, scope.project_id, spec.source_name, lock=True))
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
        if stream_id is None:  # a concurrent create took the name since we looked: it came first
            taken = store.find(conn, scope.project_id, name, lock=True)
            if taken is None:  # and was deleted again already
                raise Conflict("The stream was created and deleted meanwhile; retry.",
                               code="STREAM_ALREADY_EXISTS_CONFLICT")
            return _existing(taken, spec)
        stream = store.by_id(conn, stream_id)
        records = []
        if prefix is not None:
            records.append(Record(prefix))
        if spec.body:
            payload = payload_of(content_type, spec.body, allow_empty=True)
            if payload:
                records.append(Record(payload))
        if records:
            log.append(conn, stream.partition_id, records)
        if spec.closed:
            store.update_after_write(conn, stream_id, seq=None, close=True, closed_by=None)
        wakeup.notify(conn, [wakeup.channel(wakeup.DURABLE, stream_id)])
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


def delete(scope: Scope, name: str) -> None:
    """Remove the stream, or soft-delete it (410 to everything) while forks still read it."""
    with db.transaction() as conn:
        stream = catalog.get(conn, scope, name, lock=True)
        if stream.forks > 0:
            store.soft_delete(conn, stream.id)
        else:
            store.delete(conn, stream)
        wakeup.notify(conn, [wakeup.channel(wakeup.DURABLE, stream.id)])


def retain(scope: Scope, name: str, offset: int, *, incarnation: str | None = None) -> int:
    """Advance the retained offset: appends below it are removed and their offsets answer 410."""
    with db.transaction() as conn:
        stream = catalog.get(conn, scope, name, lock=True)
        catalog.check_incarnation(stream, incarnation)
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
            catalog.alive(conn, store.by_id(conn, stream_id, lock=True))
        return len(ids)
