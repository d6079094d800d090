"""The retention sweep: archived messages past their queue's retention are deleted in batches.

A queue's retention is its `retention_days`, else its plan's. SKIP LOCKED lets two overlapping
sweeps split the work instead of waiting on each other.

The archive is walked in message-id order (its primary key), and only as far as a mark allows: ids
are drawn as messages are sent, so a message archived before the cutoff has an id no greater than
the sequence's position at any moment after the cutoff. Each sweep first records that position
(`queue_archive_marks`); the walk of a queue whose archive has nothing expired then reads only the
messages sent before its cutoff and archived after it, not the whole archive.
"""

from __future__ import annotations

import time

import psycopg

from .. import db

# The mark's time is taken a second before the sequence is read, so the position it records covers
# every id drawn before it, whatever order the statement evaluates the two in. Marks older than the
# longest retention a plan gives are deleted: a walk whose cutoff precedes every mark is bounded by
# the oldest one left, or by none.
_MARK = """
WITH marked AS (
    INSERT INTO queue_archive_marks (at, msg_id)
    SELECT clock_timestamp() - interval '1 second', s.last_value FROM queue_msg_id_seq s
    ON CONFLICT (at) DO NOTHING
)
DELETE FROM queue_archive_marks
WHERE at < clock_timestamp() - make_interval(days => (SELECT coalesce(max(retention_days), 0) + 1 FROM plans))
"""

_SWEEP = """
WITH doomed AS (
    SELECT a.queue_id, a.msg_id
    FROM queues q
    JOIN tenants t ON t.id = q.tenant_id
    JOIN plans p ON p.name = t.plan
    CROSS JOIN LATERAL (
        SELECT now() - make_interval(days => coalesce(q.retention_days, p.retention_days)) AS cutoff
    ) c
    CROSS JOIN LATERAL (
        SELECT coalesce((SELECT k.msg_id FROM queue_archive_marks k WHERE k.at >= c.cutoff ORDER BY k.at LIMIT 1),
                        9223372036854775807) AS upto
    ) b
    CROSS JOIN LATERAL (
        SELECT x.queue_id, x.msg_id FROM queue_archive x
        WHERE x.queue_id = q.id AND x.msg_id <= b.upto AND x.archived_at < c.cutoff
        ORDER BY x.msg_id LIMIT %(batch)s
        FOR UPDATE SKIP LOCKED
    ) a
    LIMIT %(batch)s
)
DELETE FROM queue_archive a USING doomed d WHERE a.queue_id = d.queue_id AND a.msg_id = d.msg_id
"""


def sweep(batch: int = 5000, budget_s: float = 20.0) -> int:
    """Mark the sequence's position, then delete expired archived messages, a batch per transaction,
    until none or out of time."""
    with db.connection() as conn:
        conn.execute(_MARK)
    return in_batches(_SWEEP, batch, budget_s)


def forget_marks(conn: psycopg.Connection) -> None:
    """Delete this cell's marks, once a tenant moved here with ids from another cell's sequence: a
    mark taken before they came may be below them. The lock waits for a sweep marking right now,
    which may have read the sequence before the move raised it."""
    with conn.transaction():
        conn.execute("LOCK TABLE queue_archive_marks IN SHARE ROW EXCLUSIVE MODE")
        conn.execute("DELETE FROM queue_archive_marks")


def in_batches(statement: str, batch: int, budget_s: float) -> int:
    """Run a statement that deletes at most %(batch)s rows, one transaction each time, until it
    deletes none or the budget is spent; the rows deleted in all. A pass that deletes fewer than a
    batch is not the end: the rows it skipped may be held by an overlapping sweep that is deleting
    them, with more behind them (stopping there, two sweeps could each leave the rest to the other)."""
    deleted, deadline = 0, time.monotonic() + budget_s
    while time.monotonic() < deadline:
        with db.transaction() as conn:
            n = conn.execute(statement, {"batch": batch}).rowcount
        deleted += n
        if n == 0:
            break
    return deleted
