"""Time-driven changes, by the database clock: scheduled messages become available, messages past
`expires_at` are marked expired, retention removes old messages (rows and log segments).

Each step is a bounded batch. Promotion and expiry pick rows with FOR UPDATE SKIP LOCKED and
retention takes a per-stream advisory lock, so overlapping runs split the work or skip it. The
same steps run lazily for one stream before a browse or a consume, so answers never wait for an
agent's next run.
"""

from __future__ import annotations

import time
from collections import defaultdict

import psycopg

from .. import db, wakeup
from ..log_engine import store
from . import catalog, delivery
from .durations import default_retention, parse_duration

_LOCK_BASE = 0x73747265 << 32  # "stre": advisory lock keys of stream retention


def channel(stream_id: int) -> str:
    """The long-poll channel of a keyed stream (its subscriptions' consumers wait on it)."""
    return wakeup.channel(wakeup.KEYED_STREAM, stream_id)


_PROMOTE = """
WITH due AS (
    SELECT stream_id, "offset" FROM stream_messages
    WHERE status = 'scheduled' AND deliver_at <= clock_timestamp() {scope}
    ORDER BY deliver_at LIMIT %(n)s
    FOR UPDATE SKIP LOCKED
)
UPDATE stream_messages m
SET status = CASE WHEN m.expires_at <= clock_timestamp() THEN 'expired' ELSE 'available' END
FROM due WHERE m.stream_id = due.stream_id AND m."offset" = due."offset"
RETURNING m.stream_id, m."offset", m.unit, m.status
"""

_EXPIRE = """
WITH due AS (
    SELECT stream_id, "offset" FROM stream_messages
    WHERE status = 'available' AND expires_at IS NOT NULL AND expires_at <= clock_timestamp() {scope}
    ORDER BY expires_at LIMIT %(n)s
    FOR UPDATE SKIP LOCKED
)
UPDATE stream_messages m SET status = 'expired'
FROM due WHERE m.stream_id = due.stream_id AND m."offset" = due."offset"
RETURNING m.stream_id, m."offset", m.unit, m.status
"""


def _by_stream(rows) -> dict[int, list[tuple[int, str, str]]]:
    out: dict[int, list[tuple[int, str, str]]] = defaultdict(list)
    for stream_id, offset, unit, status in rows:
        out[stream_id].append((offset, unit, status))
    return dict(sorted(out.items()))


def promote(conn: psycopg.Connection, stream_id: int | None = None, batch: int = 1000) -> int:
    """Due scheduled messages become available (or expired, if they expired first)."""
    scope = "AND stream_id = %(s)s" if stream_id is not None else ""
    rows = conn.execute(_PROMOTE.format(scope=scope), {"s": stream_id, "n": batch}).fetchall()
    for sid, items in _by_stream(rows).items():
        ready = [(o, u) for o, u, status in items if status == "available"]
        catalog.count(conn, sid, scheduled=-len(items), available=len(ready))
        delivery.enqueue(conn, sid, ready)
        if ready:
            wakeup.notify(conn, [channel(sid)])
    return len(rows)


def expire(conn: psycopg.Connection, stream_id: int | None = None, batch: int = 1000) -> int:
    """Available messages past `expires_at` are marked expired and leave every subscription."""
    scope = "AND stream_id = %(s)s" if stream_id is not None else ""
    rows = conn.execute(_EXPIRE.format(scope=scope), {"s": stream_id, "n": batch}).fetchall()
    for sid, items in _by_stream(rows).items():
        catalog.count(conn, sid, available=-len(items))
        delivery.forget(conn, sid, [(o, u) for o, u, _ in items])
    return len(rows)


def catch_up(conn: psycopg.Connection, stream_id: int) -> None:
    """Before a browse or a consume: apply what the clock decided since the agents last ran."""
    # min() over the partial indexes: two index probes, whatever the stream's size.
    due = conn.execute(
        "SELECT coalesce((SELECT min(deliver_at) FROM stream_messages WHERE stream_id = %(s)s"
        " AND status = 'scheduled') <= clock_timestamp(), false)"
        " OR coalesce((SELECT min(expires_at) FROM stream_messages WHERE stream_id = %(s)s"
        " AND status = 'available' AND expires_at IS NOT NULL) <= clock_timestamp(), false)",
        {"s": stream_id},
    ).fetchone()[0]
    if due:
        promote(conn, stream_id)
        expire(conn, stream_id)


def retention_ms(stream: catalog.Stream) -> int | None:
    """The stream's retention in ms (its own, else the deployment default); None = forever."""
    if stream.retention is not None:
        return stream.retention_ms
    return parse_duration(default_retention())


_CUT = """
SELECT coalesce(min(o) FILTER (WHERE published_at >= clock_timestamp() - %(ms)s * interval '1 millisecond'),
                max(o) + 1)
FROM (SELECT "offset" AS o, published_at FROM stream_messages WHERE stream_id = %(s)s
      ORDER BY "offset" LIMIT %(n)s) oldest
"""


def trim(conn: psycopg.Connection, stream: catalog.Stream, batch: int = 5000) -> int:
    """Remove up to `batch` of the stream's messages published longer ago than its retention."""
    ms = retention_ms(stream)
    if ms is None:
        return 0
    cut = conn.execute(_CUT, {"ms": ms, "s": stream.id, "n": batch}).fetchone()[0]
    if cut is None:
        return 0
    rows = conn.execute(
        'DELETE FROM stream_messages WHERE stream_id = %s AND "offset" < %s RETURNING "offset", unit, status',
        (stream.id, cut),
    ).fetchall()
    if not rows:
        return 0
    statuses = [s for _, _, s in rows]
    catalog.count(conn, stream.id, messages=-len(rows), scheduled=-statuses.count("scheduled"),
                  available=-statuses.count("available"))
    delivery.forget(conn, stream.id, [(o, u) for o, u, s in rows if s == "available"])
    conn.execute(
        'DELETE FROM stream_dead WHERE sub_id IN (SELECT id FROM stream_subscriptions WHERE stream_id = %s)'
        ' AND "offset" < %s',
        (stream.id, cut),
    )
    store.drop_before(conn, stream.partition_id, cut)
    return len(rows)


def sweep_schedules(batch: int = 1000, budget_s: float = 20.0) -> dict[str, int]:
    """Agent: promote due messages and expire old ones, a batch per transaction, until done or out of time."""
    done = {"available": 0, "expired": 0}
    deadline = time.monotonic() + budget_s
    while time.monotonic() < deadline:
        with db.transaction() as conn:
            promoted = promote(conn, batch=batch)
        with db.transaction() as conn:
            expired = expire(conn, batch=batch)
        done["available"] += promoted
        done["expired"] += expired
        if promoted < batch and expired < batch:
            break
    return done


def sweep_retention(batch: int = 5000, budget_s: float = 20.0) -> int:
    """Agent: apply retention stream by stream; a stream another run is trimming is skipped."""
    removed, deadline = 0, time.monotonic() + budget_s
    with db.transaction() as conn:
        ids = [r[0] for r in conn.execute("SELECT id FROM streams WHERE messages > 0 ORDER BY id")]
    for stream_id in ids:
        while time.monotonic() < deadline:
            with db.transaction() as conn:
                if not conn.execute("SELECT pg_try_advisory_xact_lock(%s)", (_LOCK_BASE + stream_id,)).fetchone()[0]:
                    break
                stream = catalog.by_id(conn, stream_id)
                n = trim(conn, stream, batch) if stream else 0
            removed += n
            if n < batch:
                break
    return removed
