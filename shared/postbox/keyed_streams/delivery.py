"""A subscription's deliveries: claims with per-key leases, acks, nacks, dead letters.

A consumer claims units (see `fanout`) whose lease is free or ran out, with FOR UPDATE SKIP LOCKED,
and gets each unit's head message: so one key is never in flight twice in a subscription, and
keys are handed out oldest first. Leases, attempts and the retry-or-dead-letter decision follow
the log engine's lease module: a head still pending after `max_deliveries` deliveries (its
max_attempts) is dead-lettered at the next claim and the unit moves on; a nack gives the message
back after the delay it names. Lock order: as in `fanout`.
"""

from __future__ import annotations

import uuid

import psycopg

from ..log_engine.leases import Delivery, parse_receipts, receipt, triage
from .fanout import enqueue, enqueue_retained, forget, remove
from .subscriptions import Subscription

__all__ = ["Delivery", "ack", "claim", "dead_letters", "enqueue", "enqueue_retained", "forget", "nack",
           "parse_receipts", "remove"]

_CLAIM_UNITS = """
SELECT unit FROM stream_sub_keys
WHERE sub_id = %(s)s AND (lease_until IS NULL OR lease_until <= clock_timestamp())
ORDER BY head
LIMIT %(n)s
FOR UPDATE SKIP LOCKED
"""

_HEADS = """
SELECT u.unit, p."offset", p.attempts,
       m.status IS NULL OR m.status <> 'available' OR coalesce(m.expires_at <= clock_timestamp(), false)
FROM unnest(%(u)s::text[]) AS u(unit)
CROSS JOIN LATERAL (
    SELECT "offset", attempts FROM stream_pending p
    WHERE p.sub_id = %(s)s AND p.unit = u.unit ORDER BY "offset" LIMIT 1
) p
LEFT JOIN stream_messages m ON m.stream_id = %(stream)s AND m."offset" = p."offset"
"""

_LEASE = """
WITH leased AS (
    UPDATE stream_sub_keys k SET lease_token = gen_random_uuid(), lease_offset = x.o,
        lease_until = clock_timestamp() + %(ms)s * interval '1 millisecond'
    FROM unnest(%(u)s::text[], %(o)s::bigint[]) AS x(u, o)
    WHERE k.sub_id = %(s)s AND k.unit = x.u
    RETURNING k.lease_offset, k.lease_token, k.lease_until
), tried AS (
    UPDATE stream_pending p SET attempts = p.attempts + 1
    WHERE p.sub_id = %(s)s AND p."offset" = ANY(%(o)s)
    RETURNING p."offset", p.attempts
)
SELECT l.lease_offset, t.attempts, l.lease_token, l.lease_until
FROM leased l JOIN tried t ON t."offset" = l.lease_offset
ORDER BY l.lease_offset
"""


def claim(conn: psycopg.Connection, sub: Subscription, max_messages: int, lease_ms: int) -> list[Delivery]:
    """Lease up to `max_messages` messages, the head of as many free units. Heads that are gone or
    expired are dropped, heads that used up the subscription's attempts are dead-lettered, and the
    unit moves on to its next message."""
    units = [r[0] for r in conn.execute(_CLAIM_UNITS, {"s": sub.id, "n": max_messages})]
    chosen: dict[str, int] = {}
    for _ in range(50):
        if not units:
            break
        heads = conn.execute(_HEADS, {"u": units, "s": sub.id, "stream": sub.stream_id}).fetchall()
        decided = triage(heads, sub.policy)
        chosen.update(decided.deliver)
        remove(conn, sub.id, decided.gone + decided.dead, dead=decided.dead)
        units = decided.again
    if not chosen:
        return []
    rows = conn.execute(_LEASE, {"s": sub.id, "u": list(chosen), "o": list(chosen.values()), "ms": lease_ms})
    return [Delivery(o, attempt, receipt(o, token), until) for o, attempt, token, until in rows]


_HELD = """
SELECT p."offset", k.unit
FROM unnest(%(o)s::bigint[], %(t)s::uuid[]) AS r(o, t)
JOIN stream_pending p ON p.sub_id = %(s)s AND p."offset" = r.o
JOIN stream_sub_keys k ON k.sub_id = p.sub_id AND k.unit = p.unit AND k.lease_token = r.t AND k.lease_offset = r.o
ORDER BY k.unit
FOR UPDATE OF k
"""


def _held(conn: psycopg.Connection, sub_id: int, pairs: list[tuple[int, uuid.UUID]]) -> list[tuple[int, str]]:
    """The receipts whose lease is still this consumer's (locked), as (offset, unit)."""
    if not pairs:
        return []
    return conn.execute(_HELD, {"s": sub_id, "o": [o for o, _ in pairs], "t": [t for _, t in pairs]}).fetchall()


def ack(conn: psycopg.Connection, sub_id: int, pairs: list[tuple[int, uuid.UUID]]) -> list[int]:
    """Acknowledge leased messages; returns the offsets acked (a lost or unknown lease is skipped)."""
    held = _held(conn, sub_id, pairs)
    offsets = [o for o, _ in held]
    remove(conn, sub_id, offsets, acked=True)
    return sorted(offsets)


def nack(conn: psycopg.Connection, sub_id: int, pairs: list[tuple[int, uuid.UUID]], delay_ms: int) -> list[int]:
    """Give leased messages back: their key is handed out again after `delay_ms` (the delivery counts)."""
    held = _held(conn, sub_id, pairs)
    if held:
        conn.execute(
            "UPDATE stream_sub_keys SET lease_token = NULL, lease_offset = NULL,"
            " lease_until = clock_timestamp() + %s * interval '1 millisecond'"
            " WHERE sub_id = %s AND unit = ANY(%s)",
            (delay_ms, sub_id, [u for _, u in held]),
        )
    return sorted(o for o, _ in held)


def dead_letters(conn: psycopg.Connection, sub_id: int, limit: int, before_offset: int | None) -> list[tuple]:
    """(offset, attempts, dead_at) newest first."""
    return conn.execute(
        'SELECT "offset", attempts, dead_at FROM stream_dead WHERE sub_id = %s'
        ' AND (%s::bigint IS NULL OR "offset" < %s) ORDER BY "offset" DESC LIMIT %s',
        (sub_id, before_offset, before_offset, limit),
    ).fetchall()
