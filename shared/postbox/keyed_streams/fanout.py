"""A subscription's pending set: which messages each subscription still has to deliver.

Every available message gets a `stream_pending` row per subscription. Pending messages are grouped
by ordering unit (a key, or the message alone when it has none) in `stream_sub_keys`, one row per
(subscription, unit) with its oldest pending offset (`head`) and the unit's lease (see `delivery`).
Messages join the set when they become available and leave it when acked, dead-lettered, expired
or removed.

Lock order, everywhere: stream_messages rows, then the streams row, then stream_sub_keys rows (in
unit order), then stream_pending rows, then the stream_subscriptions row.
"""

from __future__ import annotations

import psycopg


def enqueue(conn: psycopg.Connection, stream_id: int, items: list[tuple[int, str]], *, only: int | None = None) -> None:
    """Hand newly available (offset, unit) messages to every subscription of the stream (or one)."""
    if not items:
        return
    offsets, units = (list(c) for c in zip(*items, strict=True))
    conn.execute("SELECT keyed_stream_enqueue(%s, %s::bigint[], %s::text[], %s)", (stream_id, offsets, units, only))


def enqueue_retained(conn: psycopg.Connection, stream_id: int, sub_id: int) -> None:
    """A subscription created to start at the earliest message gets every available one retained."""
    items = conn.execute(
        'SELECT "offset", unit FROM stream_messages WHERE stream_id = %s AND status = %s ORDER BY "offset"',
        (stream_id, "available"),
    ).fetchall()
    enqueue(conn, stream_id, items, only=sub_id)


def lock_units(conn: psycopg.Connection, sub_id: int, units: list[str]) -> None:
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
        lock_units(conn, sub_id, units)
        remove(conn, sub_id, offsets)
