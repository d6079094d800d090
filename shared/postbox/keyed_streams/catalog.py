"""The `streams` table: one row per stream with its settings, its log partition and its counters."""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

import psycopg

from .. import names
from ..errors import Conflict, NotFound
from ..log_engine import store
from .access import Project

OWNER_KIND = "stream"
PARTITION = ""  # one partition per stream


class Stream(NamedTuple):
    id: int
    tenant_id: str
    project: Project
    name: str
    partition_id: int
    retention: str | None
    retention_ms: int | None
    max_backlog: int | None
    created_at: datetime
    messages: int
    scheduled: int
    available: int


_COLUMNS = """s.id, s.tenant_id, p.id, p.name, s.name, s.partition_id, s.retention, s.retention_ms, s.max_backlog,
s.created_at, s.messages, s.scheduled, s.available"""


def _stream(row) -> Stream:
    sid, tenant, pid, pname, name, partition, retention, retention_ms, max_backlog, created, *counts = row
    return Stream(sid, str(tenant), Project(str(pid), pname), name, partition, retention, retention_ms,
                  max_backlog, created, *counts)


def not_found(name: str, project: Project) -> NotFound:
    return NotFound(f"no stream named {name} in project {project.name}", code="stream_not_found")


def find(conn: psycopg.Connection, project: Project, name: str, *, lock: bool = False) -> Stream:
    """The stream `name` of `project`; FOR UPDATE with `lock` (publishes serialise on it)."""
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM streams s JOIN projects p ON p.id = s.project_id"
        " WHERE s.project_id = %s AND s.name = %s" + (" FOR UPDATE OF s" if lock else ""),
        (project.id, name),
    ).fetchone()
    if row is None:
        raise not_found(name, project)
    return _stream(row)


def by_id(conn: psycopg.Connection, stream_id: int) -> Stream | None:
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM streams s JOIN projects p ON p.id = s.project_id WHERE s.id = %s", (stream_id,)
    ).fetchone()
    return _stream(row) if row else None


def listing(conn: psycopg.Connection, tenant_id: str, project: Project | None) -> list[Stream]:
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM streams s JOIN projects p ON p.id = s.project_id"
        " WHERE s.tenant_id = %(t)s AND (%(p)s::uuid IS NULL OR s.project_id = %(p)s::uuid)"
        " ORDER BY p.name, s.name",
        {"t": tenant_id, "p": project.id if project else None},
    ).fetchall()
    return [_stream(r) for r in rows]


def _insert(conn: psycopg.Connection, tenant_id: str, project: Project, name: str, retention: str | None,
            retention_ms: int | None, max_backlog: int | None) -> int | None:
    """The new stream's id (with its log partition), None when the name is taken in the project."""
    names.KEYED_STREAM.check(name, "stream", code="invalid_name")  # every creating path passes here
    return conn.execute("SELECT keyed_stream_insert(%s, %s, %s, %s, %s, %s)",
                        (tenant_id, project.id, name, retention, retention_ms, max_backlog)).fetchone()[0]


def create(conn: psycopg.Connection, tenant_id: str, project: Project, name: str, retention: str | None,
           retention_ms: int | None, max_backlog: int | None) -> Stream:
    if _insert(conn, tenant_id, project, name, retention, retention_ms, max_backlog) is None:
        raise Conflict(f"a stream named {name} already exists in project {project.name}", code="stream_exists")
    return find(conn, project, name)


def update(conn: psycopg.Connection, stream: Stream, changes: dict) -> None:
    sets = {k: changes[k] for k in ("retention", "retention_ms", "max_backlog") if k in changes}
    assignments = ", ".join(f"{column} = %({column})s" for column in sets)
    conn.execute(f"UPDATE streams SET {assignments} WHERE id = %(id)s", {**sets, "id": stream.id})


def delete(conn: psycopg.Connection, stream: Stream) -> int:
    """Remove the stream, its messages and its log partition; returns the messages removed."""
    conn.execute("DELETE FROM stream_messages WHERE stream_id = %s", (stream.id,))
    store.delete_partitions(conn, OWNER_KIND, stream.id)
    conn.execute("DELETE FROM streams WHERE id = %s", (stream.id,))
    return stream.messages


def count(conn: psycopg.Connection, stream_id: int, *, messages: int = 0, scheduled: int = 0,
          available: int = 0) -> None:
    """Add deltas to a stream's counters."""
    conn.execute(
        "UPDATE streams SET messages = messages + %s, scheduled = scheduled + %s, available = available + %s"
        " WHERE id = %s",
        (messages, scheduled, available, stream_id),
    )
