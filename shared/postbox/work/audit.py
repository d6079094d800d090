"""The audit log of a scope: the work journal's entries read as audit events.

Every moment of a message's life is journalled by the SQL that makes it (a row per call, an entry
per message, in the same transaction: the journal is the message-level audit trail and the source
of `_events`); every management change writes its row through `record`, inside the change's own
transaction, so a refused or rolled-back change leaves no audit event behind.
"""

from __future__ import annotations

from typing import Any

import psycopg

from .. import db
from ..tenancy import Principal, require
from . import gate
from .common import SCOPE_NOT_FOUND, VIEW, as_json, decode_cursor, own_tenant, page, parse_id

TRACE_LIMIT = 1000
SYSTEM_ACTOR = ("system", "postbox")

_RECORD = """
INSERT INTO work_journal (scope_id, tenant_id, event_type, resource_type, resource_id, correlation_ids,
                          actor_type, actor_id, outcome, payload)
VALUES (%(scope)s, %(tenant)s, %(action)s, %(rtype)s, %(rid)s, CASE WHEN %(corr)s::text IS NOT NULL
        THEN ARRAY[%(corr)s::text] END, %(atype)s, %(aid)s, %(outcome)s, %(details)s::jsonb)
"""

# An entry of the journal (a row of work_journal_entries) as an audit event.
_DOC = """jsonb_build_object(
    'id', j.seq::text, 'event_type', j.event_type, 'scope_id', j.scope_id, 'tenant_id', j.tenant_id,
    'actor_type', j.actor_type, 'actor_id', j.actor_id,
    'resource_type', j.resource_type, 'resource_id', coalesce(j.resource_id, j.message_id::text),
    'correlation_id', j.correlation_id, 'outcome', j.outcome,
    'queue_id', (SELECT q.queue_id FROM work_queues q WHERE q.id = j.queue_id),
    'attempts', j.attempts, 'details', j.payload, 'timestamp', j.at)"""

# The journal's rows (c, one per call) walked newest first by their index, and their entries (j):
# what a row shares is filtered on the row, what differs between its entries on the entry; a
# row's entries number from its seq up, so a row before the cursor may hold entries after it.
_ENTRIES = "FROM work_journal c CROSS JOIN LATERAL work_journal_unnest(c) j"
_FILTERS = """
  AND (%(event_type)s::text IS NULL OR c.event_type = %(event_type)s)
  AND (%(actor_id)s::text IS NULL OR c.actor_id = %(actor_id)s)
  AND (%(resource_type)s::text IS NULL OR coalesce(c.resource_type, 'message') = %(resource_type)s)
  AND (%(correlation_id)s::text IS NULL OR (c.correlation_ids @> ARRAY[%(correlation_id)s::text]
                                            AND j.correlation_id = %(correlation_id)s))
  AND (%(before)s::bigint IS NULL OR (c.seq < %(before)s AND j.seq < %(before)s))
ORDER BY c.seq DESC, j.seq DESC LIMIT %(n)s
"""
_QUERY = (f"SELECT j.seq, {_DOC} {_ENTRIES}"
          " WHERE c.scope_id = (SELECT work_scope_of(%(t)s, %(s)s)).id" + _FILTERS)
# Tenant-level records (work API keys, GDPR jobs) have no scope.
_TENANT_QUERY = f"SELECT j.seq, {_DOC} {_ENTRIES} WHERE c.scope_id IS NULL AND c.tenant_id = %(t)s" + _FILTERS

_TRACE = f"""
SELECT {_DOC} {_ENTRIES}
WHERE c.scope_id = (SELECT work_scope_of(%(t)s, %(s)s)).id AND c.correlation_ids @> ARRAY[%(c)s::text]
  AND j.correlation_id = %(c)s
ORDER BY c.seq, j.seq LIMIT %(n)s
"""

_STATS = """
SELECT coalesce(jsonb_object_agg(x.event_type, x.n), '{}') FROM (
    SELECT j.event_type, count(*) AS n FROM work_journal_entries j
    WHERE j.scope_id = (SELECT work_scope_of(%(t)s, %(s)s)).id GROUP BY j.event_type
) x
"""


def record(conn: psycopg.Connection, principal: Principal | None, action: str, resource_type: str,
           resource_id: Any, correlation_id: str | None = None, outcome: str = "success",
           details: dict[str, Any] | None = None, *, scope_id: str | None = None) -> None:
    """One audit event for a management change, written on `conn` inside the change's transaction.

    `action` is the event type (`scaiqueue.queue.created`, ...); the actor is the principal's
    (`principal.actor`), the system's when there is none. The scope is `scope_id`, or the resource
    itself when it is a scope; a tenant-level change (API keys) has none.
    """
    if scope_id is None and resource_type == "scope":
        scope_id = str(resource_id)
    actor_type, actor_id = principal.actor if principal is not None else SYSTEM_ACTOR
    tenant_id = principal.tenant_id if principal is not None else None
    if tenant_id is None:  # a system change: the scope's tenant
        tenant_id = conn.execute("SELECT tenant_id FROM work_scopes WHERE id = %s", (scope_id,)).fetchone()[0]
    conn.execute(_RECORD, {
        "scope": scope_id, "tenant": tenant_id, "action": action, "rtype": resource_type,
        "rid": None if resource_id is None else str(resource_id), "corr": correlation_id, "atype": actor_type,
        "aid": actor_id, "outcome": outcome, "details": None if details is None else as_json(details),
    })


def query(principal: Principal, scope_id: str, **filters: Any) -> tuple[list[dict], str | None]:
    """A page of the scope's audit events, newest first, filtered (event_type, actor_id,
    resource_type, correlation_id, limit, cursor); the cursor names the next page."""
    tenant_id = require(principal, VIEW)
    scope_id = parse_id(scope_id, SCOPE_NOT_FOUND)
    with db.connection() as conn, db.domain_errors():
        gate.load_scope(conn, principal, tenant_id, scope_id, VIEW)
        return _page(conn, _QUERY, {"t": tenant_id, "s": scope_id}, **filters)


def query_tenant(principal: Principal, tenant_id: str, **filters: Any) -> tuple[list[dict], str | None]:
    """A page of the tenant-level audit events (work API keys, GDPR jobs), newest first; needs manage."""
    tenant_id = own_tenant(principal, tenant_id)
    with db.connection() as conn:
        return _page(conn, _TENANT_QUERY, {"t": tenant_id}, **filters)


def _page(conn: psycopg.Connection, statement: str, where: dict[str, Any], *, event_type: str | None = None,
          actor_id: str | None = None, resource_type: str | None = None, correlation_id: str | None = None,
          limit: int = 50, cursor: str | None = None) -> tuple[list[dict], str | None]:
    before = decode_cursor(cursor, "audit")
    rows = conn.execute(statement, {
        **where, "event_type": event_type, "actor_id": actor_id, "resource_type": resource_type,
        "correlation_id": correlation_id, "before": None if before is None else int(before),
        "n": limit + 1}).fetchall()
    rows, nxt = page(rows, limit, "audit", lambda r: r[0])
    return [r[1] for r in rows], nxt


def trace(principal: Principal, scope_id: str, correlation_id: str) -> list[dict[str, Any]]:
    """Every audit event of a correlation chain, oldest first (at most TRACE_LIMIT)."""
    tenant_id = require(principal, VIEW)
    scope_id = parse_id(scope_id, SCOPE_NOT_FOUND)
    with db.connection() as conn, db.domain_errors():
        gate.load_scope(conn, principal, tenant_id, scope_id, VIEW)
        rows = conn.execute(_TRACE, {"t": tenant_id, "s": scope_id, "c": correlation_id, "n": TRACE_LIMIT}).fetchall()
    return [r[0] for r in rows]


def stats(principal: Principal, scope_id: str) -> dict[str, int]:
    """{event_type: count} over the scope's retained audit log."""
    tenant_id = require(principal, VIEW)
    scope_id = parse_id(scope_id, SCOPE_NOT_FOUND)
    with db.connection() as conn, db.domain_errors():
        gate.load_scope(conn, principal, tenant_id, scope_id, VIEW)
        return conn.execute(_STATS, {"t": tenant_id, "s": scope_id}).fetchone()[0]
