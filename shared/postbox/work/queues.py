"""Queues in a scope: settings inherited from the scope's defaults, depth kept by counters.

Depths (`depth_pending`, `depth_claimed`) are sums of a few counter rows and of the journal rows
not folded into them yet (the hot paths write no counter row), never a count over messages.
"""

from __future__ import annotations

from typing import Any

import psycopg

from .. import db, history, limits
from ..errors import Conflict
from ..tenancy import Principal, require
from . import acl, audit
from .common import (
    INVALID_TRANSITION,
    MANAGE,
    QUEUE_NOT_FOUND,
    SCOPE_NOT_FOUND,
    SLUG_CONFLICT,
    VIEW,
    decode_cursor,
    missing,
    page,
    parse_id,
)

# A queue's settings and what each is when neither the request nor the scope's defaults give it.
SETTINGS: dict[str, Any] = {
    "consumer_mode": "competing",
    "ordering": "fifo",
    "max_depth": 0,
    "overflow_policy": "reject",
    "visibility_timeout_s": 30,
    "max_retries": 3,
    "ttl_seconds": None,
}

_COLUMNS = """q.id, q.queue_id, q.scope_id, q.slug, q.display_name, q.description, q.is_system, q.state,
q.consumer_mode, q.ordering, q.max_depth, q.overflow_policy, q.visibility_timeout_s, q.max_retries, q.ttl_seconds,
q.created_at, q.updated_at,
(SELECT jsonb_build_object('name', x.name, 'version', x.version) FROM work_schemas x WHERE x.id = q.schema_id),
q.tenant_id"""  # row[0] id, [1] queue_id, [2] scope_id, [3] slug, [6] is_system: read by position below

EVENTS_PER_READ = 10_000  # work_events_sync's bound

# Exact at the read: the folded counters and the journal's moves not folded yet (work_journal.sql).
_DEPTHS = """SELECT queue_id, pending, claimed, published, completed, dead_lettered FROM work_queue_depths(%s)"""


def _doc(row: tuple) -> dict[str, Any]:
    (_, qid, sid, slug, name, description, system, state, mode, ordering, max_depth, overflow, vt, retries, ttl,
     created, updated, schema, tenant) = row
    return {
        "id": str(qid), "scope_id": str(sid), "tenant_id": str(tenant), "slug": slug, "display_name": name,
        "description": description, "is_system": system, "state": state, "consumer_mode": mode, "ordering": ordering,
        "max_depth": max_depth,
        "overflow_policy": overflow, "visibility_timeout_s": vt, "max_retries": retries, "ttl_seconds": ttl,
        "schema": schema, "created_at": created.isoformat(), "updated_at": updated.isoformat(),
    }


def _scope_defaults(conn: psycopg.Connection, tenant_id: str, scope_id: str, gate: str, *,
                    lock: bool = False) -> dict:
    """The scope's queue defaults, the caller checked by the ACL (`gate`, acl.guard's) in the same statement."""
    with db.domain_errors():
        row = conn.execute(f"SELECT defaults FROM work_scopes WHERE id = %s AND tenant_id = %s AND {acl.CHECKED}"
                           + (" FOR SHARE" if lock else ""), (scope_id, tenant_id, gate)).fetchone()
    if row is None:
        raise missing(SCOPE_NOT_FOUND)
    return row[0] or {}


def _row(conn: psycopg.Connection, principal: Principal, op: str, tenant_id: str, scope_id: str, queue_id: str, *,
         lock: bool = False) -> tuple:
    _scope_defaults(conn, tenant_id, scope_id, acl.guard(principal, tenant_id, scope_id, op, queue=queue_id))
    row = conn.execute(f"SELECT {_COLUMNS} FROM work_queues q WHERE q.queue_id = %s AND q.scope_id = %s"
                       + (" FOR UPDATE" if lock else ""), (queue_id, scope_id)).fetchone()
    if row is None:
        raise missing(QUEUE_NOT_FOUND)
    return row


def _ids(scope_id: str, queue_id: str) -> tuple[str, str]:
    return parse_id(scope_id, SCOPE_NOT_FOUND), parse_id(queue_id, QUEUE_NOT_FOUND)


def create_queue(principal: Principal, scope_id: str, fields: dict[str, Any]) -> dict[str, Any]:
    """A queue with the request's settings, else the scope's defaults, else ours, within the plan's
    queues."""
    tenant_id = require(principal, MANAGE)
    scope_id = parse_id(scope_id, SCOPE_NOT_FOUND)
    with db.transaction() as conn:
        defaults = _scope_defaults(conn, tenant_id, scope_id, acl.guard(principal, tenant_id, scope_id, MANAGE),
                                   lock=True)
        settings = {k: fields[k] if fields.get(k) is not None else defaults.get(k, v) for k, v in SETTINGS.items()}
        limits.check(conn, tenant_id, limits.WORK_QUEUES)
        row = conn.execute(
            "INSERT INTO work_queues (scope_id, tenant_id, slug, display_name, description, consumer_mode, ordering,"
            " max_depth, overflow_policy, visibility_timeout_s, max_retries, ttl_seconds)"
            " VALUES (%(s)s, %(t)s, %(slug)s, %(name)s, %(description)s, %(consumer_mode)s, %(ordering)s,"
            " %(max_depth)s, %(overflow_policy)s, %(visibility_timeout_s)s, %(max_retries)s, %(ttl_seconds)s)"
            f" ON CONFLICT (scope_id, slug) DO NOTHING RETURNING {_COLUMNS.replace('q.', '')}",
            {"s": scope_id, "t": tenant_id, "slug": fields["slug"],
             "name": fields.get("display_name") or fields["slug"], "description": fields.get("description"),
             **settings},
        ).fetchone()
        if row is None:
            raise Conflict(f"A queue with slug {fields['slug']!r} already exists in this scope.", code=SLUG_CONFLICT)
        audit.record(conn, principal, "scaiqueue.queue.created", "queue", row[1], scope_id=scope_id,
                     details={"slug": fields["slug"]})
        return _doc(row)


def list_queues(principal: Principal, scope_id: str, limit: int = 50,
                cursor: str | None = None) -> tuple[list[dict], str | None]:
    tenant_id = require(principal, VIEW)
    scope_id = parse_id(scope_id, SCOPE_NOT_FOUND)
    after = decode_cursor(cursor, "queues", str)
    with db.connection() as conn:
        _scope_defaults(conn, tenant_id, scope_id, acl.guard(principal, tenant_id, scope_id, VIEW))
        rows = conn.execute(
            f"SELECT {_COLUMNS} FROM work_queues q WHERE q.scope_id = %s AND (%s::text IS NULL OR q.slug > %s)"
            " ORDER BY q.slug LIMIT %s", (scope_id, after, after, limit + 1)).fetchall()
    return page([_doc(r) for r in rows], limit, "queues", lambda d: d["slug"])


def get_queue(principal: Principal, scope_id: str, queue_id: str) -> dict[str, Any]:
    tenant_id = require(principal, VIEW)
    with db.connection() as conn:
        return _doc(_row(conn, principal, VIEW, tenant_id, *_ids(scope_id, queue_id)))


def stats(principal: Principal, scope_id: str, queue_id: str) -> dict[str, Any]:
    tenant_id = require(principal, VIEW)
    with db.connection() as conn:
        row = _row(conn, principal, VIEW, tenant_id, *_ids(scope_id, queue_id))
        if row[6] and row[3] == "_events":  # materialised from the journal when read, all of it here:
            # each call brings in at most EVENTS_PER_READ, in its own transaction (autocommit)
            while conn.execute("SELECT work_events_sync(%s)", (row[2],)).fetchone()[0] >= EVENTS_PER_READ:
                pass
        found = conn.execute(_DEPTHS, ([row[0]],)).fetchone()
    pending, claimed, published, completed, dead = found[1:] if found else (0, 0, 0, 0, 0)
    return {
        "queue_id": str(row[1]), "depth_current": int(pending + claimed), "depth_pending": int(pending),
        "depth_claimed": int(claimed), "published_total": int(published), "completed_total": int(completed),
        "dead_lettered_total": int(dead),
    }


def queue_history(principal: Principal, scope_id: str, queue_id: str, window: str) -> dict[str, Any]:
    """The queue's depth, oldest age and messages in and out per minute over `window` (charts)."""
    tenant_id = require(principal, VIEW)
    with db.connection() as conn:
        row = _row(conn, principal, VIEW, tenant_id, *_ids(scope_id, queue_id))
        return {"queue_id": str(row[1]), **history.series(conn, "work", row[0], window)}


def set_paused(principal: Principal, scope_id: str, queue_id: str, paused: bool) -> dict[str, Any]:
    """Pause or resume; doing either twice answers the queue as it is."""
    tenant_id = require(principal, MANAGE)
    with db.transaction() as conn:
        row = _row(conn, principal, MANAGE, tenant_id, *_ids(scope_id, queue_id), lock=True)
        updated = conn.execute(
            f"UPDATE work_queues q SET state = %s, updated_at = clock_timestamp() WHERE q.id = %s RETURNING {_COLUMNS}",
            ("paused" if paused else "active", row[0]),
        ).fetchone()
        audit.record(conn, principal, "scaiqueue.queue." + ("paused" if paused else "resumed"), "queue", row[1],
                     scope_id=str(row[2]))
        return _doc(updated)


def delete_queue(principal: Principal, scope_id: str, queue_id: str) -> None:
    """Delete a user queue that holds nothing pending or claimed; its ended messages go with it."""
    tenant_id = require(principal, MANAGE)
    with db.transaction() as conn:
        row = _row(conn, principal, MANAGE, tenant_id, *_ids(scope_id, queue_id), lock=True)
        if row[6]:
            raise Conflict("System queues cannot be deleted.", code=INVALID_TRANSITION)
        found = conn.execute(_DEPTHS, ([row[0]],)).fetchone()
        delivering = conn.execute("SELECT EXISTS (SELECT 1 FROM work_messages WHERE queue_id = %s"
                                  " AND state = 'delivering')", (row[0],)).fetchone()[0]
        if delivering:
            raise Conflict("Subscriptions are still processing messages of this queue.", code=INVALID_TRANSITION)
        if found and found[1] + found[2] > 0:
            raise Conflict("Only an empty queue (depth_current 0) can be deleted.", code=INVALID_TRANSITION,
                           depth_current=int(found[1] + found[2]))
        conn.execute("DELETE FROM work_messages WHERE queue_id = %s", (row[0],))
        conn.execute("DELETE FROM work_queues WHERE id = %s", (row[0],))
        audit.record(conn, principal, "scaiqueue.queue.deleted", "queue", row[1], scope_id=str(row[2]),
                     details={"slug": row[3]})
