"""Scopes: a tenant's namespaces for queues, each created with its five system queues.

A scope moves only along the allowed transitions; publishing needs an active scope, claiming a
scope that is not paused or archived (a draining scope lets consumers finish what is in it).
"""

from __future__ import annotations

from typing import Any

import psycopg

from .. import db, limits
from ..errors import Conflict
from ..tenancy import Principal, require
from . import acl, audit
from .common import (
    INVALID_TRANSITION,
    MANAGE,
    SCOPE_NOT_FOUND,
    SLUG_CONFLICT,
    VIEW,
    as_json,
    decode_cursor,
    missing,
    page,
    parse_id,
)

SYSTEM_QUEUES = ("_dead_letter", "_events", "_audit", "_integrity", "_corrections")

# action -> (the states it may start from, the state it leads to)
TRANSITIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "pause": (("active",), "paused"),
    "resume": (("paused",), "active"),
    "drain": (("active", "paused"), "draining"),
    "archive": (("active", "paused", "draining"), "archived"),
    "unarchive": (("archived",), "active"),
}

_COLUMNS = """s.id, s.tenant_id, s.slug, s.display_name, s.description, s.defaults, s.state, s.emit_published,
s.emit_claimed, s.retention_days, s.dead_letter_alert, s.created_at, s.updated_at,
(SELECT jsonb_object_agg(q.slug, q.queue_id) FROM work_queues q WHERE q.scope_id = s.id AND q.is_system)"""

_CREATE = """
INSERT INTO work_scopes (tenant_id, slug, display_name, description, defaults, emit_published, emit_claimed,
                         retention_days, dead_letter_alert)
VALUES (%(t)s, %(slug)s, %(name)s, %(description)s, %(defaults)s::jsonb, %(published)s, %(claimed)s,
        %(retention)s, %(alert)s)
ON CONFLICT (tenant_id, slug) DO NOTHING
RETURNING id
"""

_SYSTEM = """
WITH made AS (
    INSERT INTO work_queues (scope_id, tenant_id, slug, display_name, is_system)
    SELECT %(s)s, %(t)s, name, name, true FROM unnest(%(names)s::text[]) name
    RETURNING id, slug
)
UPDATE work_scopes SET dead_letter_queue_id = (SELECT id FROM made WHERE slug = '_dead_letter'),
                       events_queue_id = (SELECT id FROM made WHERE slug = '_events')
WHERE id = %(s)s
"""

_LOCK = f"SELECT state FROM work_scopes WHERE id = %s AND tenant_id = %s AND {acl.CHECKED} FOR UPDATE"


def _doc(row: tuple) -> dict[str, Any]:
    (sid, tenant, slug, name, description, defaults, state, published, claimed, retention, alert, created,
     updated, system) = row
    return {
        "id": str(sid), "tenant_id": str(tenant), "slug": slug, "display_name": name, "description": description,
        "defaults": defaults,
        "state": state, "emit_events": [e for e, on in (("published", published), ("claimed", claimed)) if on],
        "retention_days": retention, "dead_letter_alert_threshold": alert,
        "system_queues": {k: str(v) for k, v in (system or {}).items()},
        "created_at": created.isoformat(), "updated_at": updated.isoformat(),
    }


def _fetch(conn: psycopg.Connection, tenant_id: str, scope_id: str, gate: str | None = None) -> dict[str, Any]:
    """The scope's document; with `gate` (acl.guard's), the caller is checked in the same statement."""
    query, params = f"SELECT {_COLUMNS} FROM work_scopes s WHERE s.id = %s AND s.tenant_id = %s", [scope_id, tenant_id]
    if gate:
        query, params = query + f" AND {acl.CHECKED}", [*params, gate]
    with db.domain_errors():
        row = conn.execute(query, params).fetchone()
    if row is None:
        raise missing(SCOPE_NOT_FOUND)
    return _doc(row)


def create_scope(principal: Principal, fields: dict[str, Any]) -> dict[str, Any]:
    """A new scope and its system queues, in one transaction, within the plan's scopes (its system
    queues are not counted as the plan's queues); a taken slug is a conflict."""
    tenant_id = require(principal, MANAGE)
    events = set(fields.get("emit_events") or ())
    with db.transaction() as conn:
        limits.check(conn, tenant_id, limits.WORK_SCOPES)
        row = conn.execute(_CREATE, {
            "t": tenant_id, "slug": fields["slug"], "name": fields.get("display_name") or fields["slug"],
            "description": fields.get("description"), "defaults": as_json(fields.get("defaults") or {}),
            "published": "published" in events, "claimed": "claimed" in events,
            "retention": fields.get("retention_days") or 7, "alert": fields.get("dead_letter_alert_threshold") or 100,
        }).fetchone()
        if row is None:
            raise Conflict(f"A scope with slug {fields['slug']!r} already exists.", code=SLUG_CONFLICT)
        conn.execute(_SYSTEM, {"s": row[0], "t": tenant_id, "names": list(SYSTEM_QUEUES)})
        audit.record(conn, principal, "scaiqueue.scope.created", "scope", row[0], details={"slug": fields["slug"]})
        return _fetch(conn, tenant_id, str(row[0]))


def list_scopes(principal: Principal, limit: int = 50, cursor: str | None = None) -> tuple[list[dict], str | None]:
    """The tenant's scopes by slug; a work key does not see the scopes whose grants keep it out."""
    tenant_id = require(principal, VIEW)
    after = decode_cursor(cursor, "scopes", str)
    with db.connection() as conn:
        rows = conn.execute(
            f"SELECT {_COLUMNS} FROM work_scopes s WHERE s.tenant_id = %s AND (%s::text IS NULL OR s.slug > %s)"
            " AND work_acl_visible(s.id, s.acl_grants, %s::jsonb) ORDER BY s.slug LIMIT %s",
            (tenant_id, after, after, acl.guard(principal, tenant_id, None, VIEW), limit + 1),
        ).fetchall()
    docs, nxt = page([_doc(r) for r in rows], limit, "scopes", lambda d: d["slug"])
    return docs, nxt


def get_scope(principal: Principal, scope_id: str) -> dict[str, Any]:
    tenant_id = require(principal, VIEW)
    scope_id = parse_id(scope_id, SCOPE_NOT_FOUND)
    with db.connection() as conn:
        return _fetch(conn, tenant_id, scope_id, acl.guard(principal, tenant_id, scope_id, VIEW))


def transition(principal: Principal, scope_id: str, action: str) -> dict[str, Any]:
    """Move a scope along one allowed transition; any other move is SCAIQUEUE_INVALID_TRANSITION."""
    tenant_id = require(principal, MANAGE)
    scope_id = parse_id(scope_id, SCOPE_NOT_FOUND)
    sources, target = TRANSITIONS[action]
    with db.transaction() as conn:
        with db.domain_errors():
            state = conn.execute(_LOCK, (scope_id, tenant_id, acl.guard(principal, tenant_id, scope_id, MANAGE)),
                                 ).fetchone()
        if state is None:
            raise missing(SCOPE_NOT_FOUND)
        if state[0] not in sources:
            raise Conflict(f"A scope that is {state[0]} cannot {action}.", code=INVALID_TRANSITION,
                           state=state[0], action=action)
        conn.execute("UPDATE work_scopes SET state = %s, updated_at = clock_timestamp() WHERE id = %s",
                     (target, scope_id))
        audit.record(conn, principal, f"scaiqueue.scope.{action}d" if action.endswith("e") else
                     f"scaiqueue.scope.{action}ed", "scope", scope_id, details={"from": state[0], "to": target})
        return _fetch(conn, tenant_id, scope_id)


def delete_scope(principal: Principal, scope_id: str) -> None:
    """Hard-delete an archived scope with its queues and messages."""
    tenant_id = require(principal, MANAGE)
    scope_id = parse_id(scope_id, SCOPE_NOT_FOUND)
    with db.transaction() as conn:
        with db.domain_errors():
            state = conn.execute(_LOCK, (scope_id, tenant_id, acl.guard(principal, tenant_id, scope_id, MANAGE)),
                                 ).fetchone()
        if state is None:
            raise missing(SCOPE_NOT_FOUND)
        if state[0] != "archived":
            raise Conflict("Archive the scope before deleting it.", code=INVALID_TRANSITION, state=state[0])
        conn.execute("DELETE FROM work_messages WHERE scope_id = %s", (scope_id,))
        conn.execute("DELETE FROM work_scopes WHERE id = %s", (scope_id,))
        audit.record(conn, principal, "scaiqueue.scope.deleted", "scope", scope_id)
