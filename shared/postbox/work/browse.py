"""Reading messages: by state with cursor pages, one in full, and a correlation chain."""

from __future__ import annotations

from typing import Any

from .. import db
from ..tenancy import Principal, require
from . import acl
from .common import MESSAGE_NOT_FOUND, QUEUE_NOT_FOUND, SCOPE_NOT_FOUND, VIEW, decode_cursor, missing, page, parse_id

STATES = ("pending", "claimed", "completed", "failed", "dead_lettered", "cancelled", "expired", "archived",
          "delivering")
CHAIN_LIMIT = 1000

LIVE_STATES = ("pending", "claimed", "delivering")
ENDED_STATES = tuple(s for s in STATES if s not in LIVE_STATES)

# Live messages through the index of live rows (filtered by state: a claim changes the state in
# place, so no index holds it); ended ones through `ended_state`, set once a message ends.
_LIST_LIVE = """
SELECT m.seq, row_to_json(d)
FROM work_messages m JOIN work_message_docs d ON d.id = m.id
WHERE m.queue_id = (SELECT work_queue_of(%(s)s, %(q)s)).id AND m.ended_at IS NULL AND m.state = %(state)s
  AND m.seq > %(after)s
ORDER BY m.seq LIMIT %(n)s
"""
_LIST_ENDED = """
SELECT m.seq, row_to_json(d)
FROM work_messages m JOIN work_message_docs d ON d.id = m.id
WHERE m.queue_id = (SELECT work_queue_of(%(s)s, %(q)s)).id AND m.ended_at IS NOT NULL
  AND m.ended_state = %(state)s AND m.seq > %(after)s
ORDER BY m.seq LIMIT %(n)s
"""

# Every state, in publish order: the live rows and each ended state's, each through its index and
# cut at the page, merged (so a page costs the same whatever the queue holds).
_LIST_ALL = """
WITH q AS (SELECT (work_queue_of(%(s)s, %(q)s)).id),
picked AS (
    (SELECT m.seq, m.id FROM work_messages m
     WHERE m.queue_id = (SELECT id FROM q) AND m.ended_at IS NULL AND m.seq > %(after)s ORDER BY m.seq LIMIT %(n)s)
    UNION ALL
    SELECT e.seq, e.id FROM unnest(%(ended)s::text[]) st(state) CROSS JOIN LATERAL (
        SELECT m.seq, m.id FROM work_messages m
        WHERE m.queue_id = (SELECT id FROM q) AND m.ended_at IS NOT NULL AND m.ended_state = st.state
          AND m.seq > %(after)s
        ORDER BY m.seq LIMIT %(n)s) e
    ORDER BY 1 LIMIT %(n)s
)
SELECT p.seq, row_to_json(d) FROM picked p JOIN work_message_docs d ON d.id = p.id ORDER BY p.seq
"""

_ONE = """
SELECT row_to_json(d) FROM work_message_docs d
WHERE d.id = %(m)s AND d.queue_id = (SELECT work_queue_of(%(s)s, %(q)s)).queue_id
"""

_CHAIN = f"""
SELECT row_to_json(d)
FROM work_messages m JOIN work_message_docs d ON d.id = m.id
WHERE m.scope_id = (SELECT (work_scope_of(%(t)s, %(s)s)).id FROM {acl.GATE_NAMED} _)
  AND m.correlation_id = %(c)s
ORDER BY m.seq LIMIT %(n)s
"""


def _check_queue(conn, tenant_id: str, scope_id: str, queue_id: str) -> None:
    """The scope and queue exist (else their 404); a read of `_events` materialises it first."""
    with db.domain_errors():
        conn.execute("SELECT work_queue_synced(%s, %s, %s)", (tenant_id, scope_id, queue_id))


def list_messages(principal: Principal, scope_id: str, queue_id: str, state: str | None, limit: int = 50,
                  cursor: str | None = None) -> tuple[list[dict], str | None]:
    """A page of the queue's messages in one state, or in every state (None), in publish order."""
    tenant_id = require(principal, VIEW)
    scope_id, queue_id = parse_id(scope_id, SCOPE_NOT_FOUND), parse_id(queue_id, QUEUE_NOT_FOUND)
    after = decode_cursor(cursor, "messages") or 0
    with db.transaction() as conn:
        acl.load_scope(conn, principal, tenant_id, scope_id, VIEW, queue=queue_id)
        _check_queue(conn, tenant_id, scope_id, queue_id)
        with db.domain_errors():
            query = _LIST_ALL if state is None else _LIST_LIVE if state in LIVE_STATES else _LIST_ENDED
            rows = conn.execute(query, {"s": scope_id, "q": queue_id, "state": state, "after": int(after),
                                        "n": limit + 1, "ended": list(ENDED_STATES)}).fetchall()
    rows, nxt = page(rows, limit, "messages", lambda r: r[0])
    return [r[1] for r in rows], nxt


def get_message(principal: Principal, scope_id: str, queue_id: str, message_id: str) -> dict[str, Any]:
    tenant_id = require(principal, VIEW)
    scope_id, queue_id = parse_id(scope_id, SCOPE_NOT_FOUND), parse_id(queue_id, QUEUE_NOT_FOUND)
    message_id = parse_id(message_id, MESSAGE_NOT_FOUND)
    with db.transaction() as conn:
        acl.load_scope(conn, principal, tenant_id, scope_id, VIEW, queue=queue_id)
        _check_queue(conn, tenant_id, scope_id, queue_id)
        with db.domain_errors():
            row = conn.execute(_ONE, {"s": scope_id, "q": queue_id, "m": message_id}).fetchone()
    if row is None:
        raise missing(MESSAGE_NOT_FOUND)
    return row[0]


def correlation_chain(principal: Principal, scope_id: str, correlation_id: str) -> list[dict[str, Any]]:
    """Every message of the scope carrying this correlation id, oldest first (at most CHAIN_LIMIT)."""
    tenant_id = require(principal, VIEW)
    scope_id = parse_id(scope_id, SCOPE_NOT_FOUND)
    with db.connection() as conn, db.domain_errors():
        gate = acl.guard(principal, tenant_id, scope_id, VIEW)
        conn.execute(f"SELECT work_scope_synced(%s, %s) FROM {acl.GATE} _", (tenant_id, scope_id, gate))  # events too
        rows = conn.execute(_CHAIN, {"t": tenant_id, "s": scope_id, "c": correlation_id, "n": CHAIN_LIMIT,
                                     "acl": gate}).fetchall()
    return [r[0] for r in rows]
