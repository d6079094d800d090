"""The retention sweep: archived messages past their queue's retention are deleted in batches.

A queue's retention is its `retention_days`, else its plan's. SKIP LOCKED lets two overlapping
sweeps split the work instead of waiting on each other.
"""

from __future__ import annotations

import time

from .. import db

_SWEEP = """
WITH doomed AS (
    SELECT a.queue_id, a.msg_id
    FROM queues q
    JOIN tenants t ON t.id = q.tenant_id
    JOIN plans p ON p.name = t.plan
    CROSS JOIN LATERAL (
        SELECT x.queue_id, x.msg_id FROM queue_archive x
        WHERE x.queue_id = q.id
          AND x.archived_at < clock_timestamp() - make_interval(days => coalesce(q.retention_days, p.retention_days))
        ORDER BY x.msg_id LIMIT %(batch)s
        FOR UPDATE SKIP LOCKED
    ) a
    LIMIT %(batch)s
)
DELETE FROM queue_archive a USING doomed d WHERE a.queue_id = d.queue_id AND a.msg_id = d.msg_id
"""


def sweep(batch: int = 5000, budget_s: float = 20.0) -> int:
    """Delete expired archived messages, a batch per transaction, until none or out of time."""
    return in_batches(_SWEEP, batch, budget_s)


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
