"""Per-queue counters, kept as messages move (never a full count).

The hot paths count inside their own SQL functions (pq_push, pq_pop's auto-ack, pq_ack); the
general paths here add their deltas in the transaction that moves the messages, so a rolled-back
ack or replay counts nothing. Rows are spread over slots, each writer on one no other open
transaction holds (pq_count in sql/functions/partitioned.sql, through counter_slot in
sql/functions/counters.sql).
"""

from __future__ import annotations

import psycopg

NAMES = ("pushed", "acked", "failed", "deadLettered", "replayed")


def add(conn: psycopg.Connection, queue_id: int, *, pushed: int = 0, acked: int = 0, failed: int = 0,
        dead_lettered: int = 0, replayed: int = 0) -> None:
    """Add these deltas to the queue's counters (nothing when all are zero)."""
    if pushed or acked or failed or dead_lettered or replayed:
        conn.execute("SELECT pq_count(%s, %s, %s, %s, %s, %s)",
                     (queue_id, pushed, acked, failed, dead_lettered, replayed))


def read(conn: psycopg.Connection, queue_id: int) -> dict[str, int]:
    """The queue's counters (sums of its slot rows; zeros for a queue nothing moved in yet)."""
    row = conn.execute(
        "SELECT coalesce(sum(pushed), 0), coalesce(sum(acked), 0), coalesce(sum(failed), 0),"
        " coalesce(sum(dead_lettered), 0), coalesce(sum(replayed), 0) FROM pq_counters WHERE queue_id = %s",
        (queue_id,),
    ).fetchone()
    return dict(zip(NAMES, map(int, row), strict=True))
