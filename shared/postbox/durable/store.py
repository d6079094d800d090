"""The durable surface's SQL: stream rows, producers, forks' reference counts, deletion.

Every function takes an open connection; the service decides the transaction. Records live in
the log engine (owner_kind 'durable', one partition per stream, named '').
"""

from __future__ import annotations

import secrets
from datetime import datetime
from typing import NamedTuple

import psycopg

from postbox import limits
from postbox.log_engine import store as log

OWNER = "durable"


class Stream(NamedTuple):
    id: int
    tenant_id: str
    project_id: str
    name: str
    content_type: str
    incarnation: str
    partition_id: int
    base_offset: int
    closed: bool
    closed_by: str | None
    last_seq: str | None
    ttl_seconds: int | None
    expires_at: datetime | None
    expires_at_text: str | None
    public: bool
    source_id: int | None
    source_name: str | None
    fork_sub_offset: int
    forks: int
    deleted: bool
    retained_offset: int
    expired: bool
    tail: int  # the logical offset the next append gets

    @property
    def start(self) -> int:
        return self.retained_offset


_COLUMNS = """
    s.id, s.tenant_id::text, s.project_id::text, s.name, s.content_type, s.incarnation, s.partition_id,
    s.base_offset, s.closed, s.closed_by, s.last_seq, s.ttl_seconds, s.expires_at, s.expires_at_text,
    s.public, s.source_id, s.source_name, s.fork_sub_offset, s.forks, s.deleted, s.retained_offset,
    ((s.expires_at IS NOT NULL AND s.expires_at <= clock_timestamp()) OR (s.ttl_seconds IS NOT NULL
      AND s.accessed_at + s.ttl_seconds * interval '1 second' <= clock_timestamp())) AS expired,
    s.base_offset + p.next_offset AS tail
"""
_FROM = " FROM durable_streams s JOIN log_partitions p ON p.id = s.partition_id "


def find(conn: psycopg.Connection, project_id: str, name: str, *, lock: bool = False) -> Stream | None:
    row = conn.execute(
        f"SELECT {_COLUMNS}{_FROM} WHERE s.project_id = %s AND s.name = %s" + (" FOR UPDATE OF s" if lock else ""),
        (project_id, name),
    ).fetchone()
    return Stream(*row) if row else None


def by_id(conn: psycopg.Connection, stream_id: int, *, lock: bool = False) -> Stream | None:
    row = conn.execute(
        f"SELECT {_COLUMNS}{_FROM} WHERE s.id = %s" + (" FOR UPDATE OF s" if lock else ""), (stream_id,)
    ).fetchone()
    return Stream(*row) if row else None


def insert(
    conn: psycopg.Connection,
    *,
    tenant_id: str,
    project_id: str,
    name: str,
    content_type: str,
    ttl_seconds: int | None,
    expires_at: datetime | None,
    expires_at_text: str | None,
    public: bool,
    source: Stream | None,
    base_offset: int,
    fork_sub_offset: int,
) -> int | None:
    """A new stream row and its log partition, within the plan's streams; returns the stream id, or
    None (and makes nothing) when a concurrent transaction took the name first."""
    limits.check(conn, tenant_id, limits.DURABLE_STREAMS)
    row = conn.execute(
        "INSERT INTO durable_streams (tenant_id, project_id, name, content_type, incarnation, ttl_seconds,"
        " expires_at, expires_at_text, public, source_id, source_name, base_offset, fork_sub_offset)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
        " ON CONFLICT (project_id, name) DO NOTHING RETURNING id",
        (tenant_id, project_id, name, content_type, secrets.token_hex(8), ttl_seconds, expires_at,
         expires_at_text, public, source.id if source else None, source.name if source else None,
         base_offset, fork_sub_offset),
    ).fetchone()
    if row is None:
        return None
    stream_id = row[0]
    partition = log.ensure_partition(conn, tenant_id, OWNER, stream_id, "")
    conn.execute("UPDATE durable_streams SET partition_id = %s WHERE id = %s", (partition.id, stream_id))
    if source is not None:
        conn.execute("UPDATE durable_streams SET forks = forks + 1 WHERE id = %s", (source.id,))
    return stream_id


def update_after_write(
    conn: psycopg.Connection, stream_id: int, *, seq: str | None, close: bool, closed_by: str | None
) -> None:
    conn.execute(
        "UPDATE durable_streams SET accessed_at = clock_timestamp(), last_seq = coalesce(%s, last_seq),"
        " closed = closed OR %s, closed_by = CASE WHEN %s AND NOT closed THEN %s ELSE closed_by END WHERE id = %s",
        (seq, close, close, closed_by, stream_id),
    )


def touch(conn: psycopg.Connection, stream: Stream) -> None:
    """Renew a sliding lifetime (Stream-TTL): reads and writes do, HEAD does not."""
    if stream.ttl_seconds is not None:
        conn.execute("UPDATE durable_streams SET accessed_at = clock_timestamp() WHERE id = %s", (stream.id,))


def soft_delete(conn: psycopg.Connection, stream_id: int) -> None:
    conn.execute("UPDATE durable_streams SET deleted = true WHERE id = %s", (stream_id,))


def delete(conn: psycopg.Connection, stream: Stream) -> None:
    """Remove a stream with its records, then any soft-deleted source no fork reads any more."""
    conn.execute("DELETE FROM durable_streams WHERE id = %s", (stream.id,))
    log.delete_partitions(conn, OWNER, stream.id)
    if stream.source_id is None:
        return
    row = conn.execute(
        "UPDATE durable_streams SET forks = greatest(forks - 1, 0) WHERE id = %s RETURNING forks, deleted",
        (stream.source_id,),
    ).fetchone()
    if row and row[0] == 0 and row[1]:
        source = by_id(conn, stream.source_id, lock=True)
        if source is not None:
            delete(conn, source)


def lowest_fork_offset(conn: psycopg.Connection, stream_id: int) -> int | None:
    """The lowest offset a fork still reads through this stream (from its own retained offset up to
    its fork offset): retention must not pass it. None when no fork reads anything here."""
    return conn.execute(
        "SELECT min(retained_offset) FROM durable_streams WHERE source_id = %s AND retained_offset < base_offset",
        (stream_id,)).fetchone()[0]


def set_retained(conn: psycopg.Connection, stream: Stream, offset: int) -> None:
    conn.execute("UPDATE durable_streams SET retained_offset = %s WHERE id = %s", (offset, stream.id))
    if offset > stream.base_offset:
        log.drop_before(conn, stream.partition_id, offset - stream.base_offset)


# -- the expiry sweep ---------------------------------------------------------------------------------

def expired_ids(conn: psycopg.Connection, limit: int) -> list[int]:
    rows = conn.execute(
        "SELECT id FROM durable_streams s WHERE NOT deleted AND (ttl_seconds IS NOT NULL OR expires_at IS NOT NULL)"
        " AND ((s.expires_at IS NOT NULL AND s.expires_at <= clock_timestamp()) OR (s.ttl_seconds IS NOT NULL"
        " AND s.accessed_at + s.ttl_seconds * interval '1 second' <= clock_timestamp()))"
        " ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED",
        (limit,),
    )
    return [r[0] for r in rows]
