"""Per-subscription delivery: fan-out, claims with per-key leases, acks, nacks, dead letters.

Every available message gets a `stream_pending` row per subscription. Pending messages are grouped
by ordering unit (a key, or the message alone when it has none) in `stream_sub_keys`, one row per
(subscription, unit) with its oldest pending offset (`head`) and a lease. A consumer claims units
whose lease is free or expired, with FOR UPDATE SKIP LOCKED, and gets each unit's head message:
so one key is never in flight twice in a subscription, and keys are handed out oldest first.

Lock order, everywhere: stream_messages rows, then the streams row, then stream_sub_keys rows (in
unit order), then stream_pending rows, then the stream_subscriptions row.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

import psycopg

from .subscriptions import Subscription

_ENQUEUE = """
WITH new AS (
    SELECT * FROM unnest(%(o)s::bigint[], %(u)s::text[]) AS n(o, u)
), subs AS (
    SELECT id FROM stream_subscriptions WHERE stream_id = %(s)s AND (%(only)s::bigint IS NULL OR id = %(only)s)
), keys AS (
    INSERT INTO stream_sub_keys AS k (sub_id, unit, pending, head)
    SELECT subs.id, new.u, count(*), min(new.o) FROM subs CROSS JOIN new
    GROUP BY subs.id, new.u ORDER BY subs.id, new.u
    ON CONFLICT (sub_id, unit) DO UPDATE SET pending = k.pending + excluded.pending, head = least(k.head, excluded.head)
), ins AS (
    INSERT INTO stream_pending (sub_id, "offset", unit)
    SELECT subs.id, new.o, new.u FROM subs CROSS JOIN new
)
UPDATE stream_subscriptions s SET pending = s.pending + %(n)s FROM subs WHERE s.id = subs.id
"""


def enqueue(conn: psycopg.Connection, stream_id: int, items: list[tuple[int, str]], *, only: int | None = None) -> None:
    """Hand newly available (offset, unit) messages to every subscription of the stream (or one)."""
    if not items:
        return
    offsets, units = (list(c) for c in zip(*items, strict=True))
    conn.execute(_ENQUEUE, {"o": offsets, "u": units, "s": stream_id, "only": only, "n": len(items)})


def enqueue_retained(conn: psycopg.Connection, stream_id: int, sub_id: int) -> None:
    """A subscription created to start at the earliest message gets every available one retained."""
    items = conn.execute(
        'SELECT "offset", unit FROM stream_messages WHERE stream_id = %s AND status = %s ORDER BY "offset"',
        (stream_id, "available"),
    ).fetchall()
    enqueue(conn, stream_id, items, only=sub_id)


def _lock_units(conn: psycopg.Connection, sub_id: int, units: list[str]) -> None:
    conn.execute(
        "SELECT 1 FROM stream_sub_keys WHERE sub_id = %s AND unit = ANY(%s) ORDER BY unit FOR UPDATE",
        (sub_id, sorted(set(units))),
    )


_REMOVE = """
WITH gone AS (
    DELETE FROM stream_pending WHERE sub_id = %(s)s AND "offset" = ANY(%(o)s) RETURNING "offset", unit, attempts
), dead AS (
    INSERT INTO stream_dead (sub_id, "offset", attempts)
    SELECT %(s)s, "offset", attempts FROM gone WHERE "offset" = ANY(%(d)s)
    ON CONFLICT DO NOTHING
)
SELECT unit, count(*)::int, array_agg("offset") FROM gone GROUP BY unit ORDER BY unit
"""

_SETTLE_UNITS = """
UPDATE stream_sub_keys k SET
    pending = k.pending - g.n,
    head = coalesce((SELECT min(p."offset") FROM stream_pending p WHERE p.sub_id = k.sub_id AND p.unit = k.unit),
                    k.head),
    lease_token = CASE WHEN k.lease_offset = ANY(%(o)s) THEN NULL ELSE k.lease_token END,
    lease_until = CASE WHEN k.lease_offset = ANY(%(o)s) THEN NULL ELSE k.lease_until END,
    lease_offset = CASE WHEN k.lease_offset = ANY(%(o)s) THEN NULL ELSE k.lease_offset END
FROM unnest(%(u)s::text[], %(n)s::int[]) AS g(unit, n)
WHERE k.sub_id = %(s)s AND k.unit = g.unit
"""


def remove(conn: psycopg.Connection, sub_id: int, offsets: list[int], *, dead: list[int] = (),
           acked: bool = False) -> int:
    """Take messages out of a subscription (acked, dead-lettered or gone); the caller holds their
    units' locks. Frees the units' leases on them and moves each unit's head on. Returns how many."""
    if not offsets:
        return 0
    groups = conn.execute(_REMOVE, {"s": sub_id, "o": offsets, "d": list(dead)}).fetchall()
    removed = sum(n for _, n, _ in groups)
    if not groups:
        return 0
    units = [u for u, _, _ in groups]
    conn.execute(_SETTLE_UNITS, {"s": sub_id, "o": offsets, "u": units, "n": [n for _, n, _ in groups]})
    conn.execute("DELETE FROM stream_sub_keys WHERE sub_id = %s AND unit = ANY(%s) AND pending <= 0", (sub_id, units))
    n_dead = len(set(dead) & {o for _, _, os in groups for o in os})
    conn.execute(
        "UPDATE stream_subscriptions SET pending = pending - %s, acked = acked + %s, dead = dead + %s WHERE id = %s",
        (removed, removed if acked else 0, n_dead, sub_id),
    )
    return removed


def forget(conn: psycopg.Connection, stream_id: int, items: list[tuple[int, str]]) -> None:
    """Messages that expired or were removed leave every subscription's pending set."""
    if not items:
        return
    offsets = [o for o, _ in items]
    units = [u for _, u in items]
    subs = [r[0] for r in conn.execute(
        "SELECT id FROM stream_subscriptions WHERE stream_id = %s ORDER BY id", (stream_id,))]
    for sub_id in subs:
        _lock_units(conn, sub_id, units)
        remove(conn, sub_id, offsets)


@dataclass(frozen=True)
class Delivery:
    offset: int
    attempt: int
    receipt: str
    lease_until: datetime


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
    expired are dropped, heads delivered `max_deliveries` times are dead-lettered, and the unit
    moves on to its next message."""
    units = [r[0] for r in conn.execute(_CLAIM_UNITS, {"s": sub.id, "n": max_messages})]
    chosen: dict[str, int] = {}
    for _ in range(50):
        if not units:
            break
        heads = conn.execute(_HEADS, {"u": units, "s": sub.id, "stream": sub.stream_id}).fetchall()
        drop, dead, retry = [], [], []
        for unit, offset, attempts, gone in heads:
            if gone:
                drop.append(offset)
                retry.append(unit)
            elif attempts >= sub.max_deliveries:
                dead.append(offset)
                retry.append(unit)
            else:
                chosen[unit] = offset
        remove(conn, sub.id, drop + dead, dead=dead)
        units = retry
    if not chosen:
        return []
    rows = conn.execute(_LEASE, {"s": sub.id, "u": list(chosen), "o": list(chosen.values()), "ms": lease_ms})
    return [Delivery(o, attempt, f"{o}.{token.hex}", until) for o, attempt, token, until in rows]


def parse_receipts(receipts: list[str]) -> list[tuple[int, uuid.UUID]] | None:
    """`<offset>.<lease token>` pairs, or None when one is malformed."""
    out = []
    for receipt in receipts:
        offset, _, token = receipt.partition(".")
        try:
            out.append((int(offset), uuid.UUID(hex=token)))
        except ValueError:
            return None
    return out


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
