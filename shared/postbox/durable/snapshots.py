"""Snapshots (Ursula extension): the state of a stream at an offset, published whole or from
staged parts, read back by offset, and the start of a bootstrap."""

from __future__ import annotations

import hashlib
from typing import NamedTuple

from postbox import db
from postbox.errors import Conflict, Invalid, NotFound, TooLarge, TooManyRequests

from .catalog import check_incarnation, get
from .model import Scope
from .store import Stream

MAX_SNAPSHOT = 8 * 1024 * 1024
MAX_STAGED_PARTS = 256


class Snapshot(NamedTuple):
    offset: int
    content_type: str
    digest: str
    body: bytes


def digest_of(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


def _check_offset(stream: Stream, offset: int) -> None:
    if offset > stream.tail or offset < stream.retained_offset:
        raise Invalid("A snapshot's offset must be within the stream.", code="INVALID_SNAPSHOT")


def _store(conn, stream: Stream, offset: int, content_type: str, body: bytes) -> str:
    if len(body) > MAX_SNAPSHOT:
        raise TooLarge(f"A snapshot is at most {MAX_SNAPSHOT} bytes.", code="SNAPSHOT_TOO_LARGE")
    digest = digest_of(body)
    row = conn.execute(
        'SELECT digest FROM durable_snapshots WHERE stream_id = %s AND "offset" = %s', (stream.id, offset)
    ).fetchone()
    if row is not None:
        if row[0] != digest:
            raise Conflict("Another snapshot was published at this offset.", code="SNAPSHOT_CONFLICT")
        return digest
    conn.execute(
        'INSERT INTO durable_snapshots (stream_id, "offset", content_type, digest, body) VALUES (%s, %s, %s, %s, %s)',
        (stream.id, offset, content_type, digest, body),
    )
    return digest


def publish(scope: Scope, name: str, offset: int, body: bytes, content_type: str,
            incarnation: str | None = None) -> str:
    """Publish the snapshot at `offset`; the same content again is accepted, other content is 409."""
    with db.transaction() as conn:
        stream = get(conn, scope, name, lock=True)
        check_incarnation(stream, incarnation)
        _check_offset(stream, offset)
        return _store(conn, stream, offset, content_type, body)


def stage_part(scope: Scope, name: str, offset: int, body: bytes, incarnation: str | None = None) -> str:
    with db.transaction() as conn:
        stream = get(conn, scope, name, lock=True)
        check_incarnation(stream, incarnation)
        _check_offset(stream, offset)
        count, size = conn.execute(
            "SELECT count(*), coalesce(sum(octet_length(body)), 0) FROM durable_snapshot_parts WHERE stream_id = %s",
            (stream.id,),
        ).fetchone()
        if count >= MAX_STAGED_PARTS:
            raise TooManyRequests("Too many staged parts; commit or discard them.", code="STAGED_PARTS_LIMIT",
                                  retry_after=60)
        if size + len(body) > MAX_SNAPSHOT:
            raise TooLarge(f"A snapshot is at most {MAX_SNAPSHOT} bytes.", code="SNAPSHOT_TOO_LARGE")
        digest = digest_of(body)
        conn.execute(
            'INSERT INTO durable_snapshot_parts (stream_id, "offset", digest, body) VALUES (%s, %s, %s, %s)'
            " ON CONFLICT DO NOTHING",
            (stream.id, offset, digest, body),
        )
        return digest


def commit_parts(scope: Scope, name: str, offset: int, parts: list[str], content_type: str,
                 incarnation: str | None = None) -> str:
    """Publish the snapshot made of the staged parts, in the order named; they are used up."""
    if not parts:
        raise Invalid("Stream-Snapshot-Parts names no part.", code="INVALID_PARTS_COMMIT")
    with db.transaction() as conn:
        stream = get(conn, scope, name, lock=True)
        check_incarnation(stream, incarnation)
        _check_offset(stream, offset)
        found = dict(conn.execute(
            'SELECT digest, body FROM durable_snapshot_parts WHERE stream_id = %s AND "offset" = %s'
            " AND digest = ANY(%s)",
            (stream.id, offset, parts),
        ).fetchall())
        missing = [p for p in parts if p not in found]
        if missing:
            raise Invalid(f"No staged part {missing[0]} for this offset.", code="UNKNOWN_PART")
        digest = _store(conn, stream, offset, content_type, b"".join(bytes(found[p]) for p in parts))
        conn.execute(
            'DELETE FROM durable_snapshot_parts WHERE stream_id = %s AND "offset" = %s AND digest = ANY(%s)',
            (stream.id, offset, parts),
        )
        return digest


def discard_parts(scope: Scope, name: str, incarnation: str | None = None) -> int:
    with db.transaction() as conn:
        stream = get(conn, scope, name, lock=True)
        check_incarnation(stream, incarnation)
        return conn.execute("DELETE FROM durable_snapshot_parts WHERE stream_id = %s", (stream.id,)).rowcount


def read(scope: Scope, name: str, offset: int | None, incarnation: str | None = None) -> tuple[Stream, Snapshot]:
    """The snapshot at `offset` (None: the latest one)."""
    with db.transaction() as conn:
        stream = get(conn, scope, name)
        check_incarnation(stream, incarnation)
        return stream, _find(conn, stream, offset)


def _find(conn, stream: Stream, offset: int | None) -> Snapshot:
    sql = 'SELECT "offset", content_type, digest, body FROM durable_snapshots WHERE stream_id = %s'
    row = (conn.execute(sql + ' ORDER BY "offset" DESC LIMIT 1', (stream.id,)) if offset is None
           else conn.execute(sql + ' AND "offset" = %s', (stream.id, offset))).fetchone()
    if row is None:
        raise NotFound("No snapshot at this offset.", code="SNAPSHOT_NOT_FOUND", incarnation=stream.incarnation)
    return Snapshot(row[0], row[1], row[2], bytes(row[3]))


def latest_offset(stream: Stream) -> int | None:
    with db.transaction() as conn:
        row = conn.execute(
            'SELECT max("offset") FROM durable_snapshots WHERE stream_id = %s', (stream.id,)
        ).fetchone()
    return row[0]


def latest(scope: Scope, name: str, incarnation: str | None = None) -> tuple[Stream, Snapshot | None]:
    with db.transaction() as conn:
        stream = get(conn, scope, name)
        check_incarnation(stream, incarnation)
        try:
            return stream, _find(conn, stream, None)
        except NotFound:
            return stream, None
