"""The agent's sweeps: expired leases (redeliver or dead-letter) and retention (drop segments).

Both are bounded and safe when two runs overlap: leases are taken with SKIP LOCKED, and a
partition's retention runs under a transaction-scoped advisory lock that a second run skips.
"""

from __future__ import annotations

import time

from .. import db
from ..log_engine import cursors, leases, store
from . import OWNER_KIND, consume, queues

_LOCK_SPACE = 0x5051  # "PQ": advisory lock key space of partition retention


def sweep_leases(batch: int = 500, budget_s: float = 20.0) -> dict[str, int]:
    """Release expired leases (a failed delivery each); past the retry limit, dead-letter."""
    released = dead = 0
    deadline = time.monotonic() + budget_s

    def sweep(conn) -> tuple[int, int, int]:
        found = leases.expired(conn, OWNER_KIND, batch)
        known: dict[int, queues.Queue] = {}
        died = 0
        for cur in found:
            queue = known.get(cur.owner_id) or queues.by_id(conn, cur.owner_id)
            known[cur.owner_id] = queue
            died += consume.expire(conn, queue, cur)
        return len(found), len(found) - died, died

    while time.monotonic() < deadline:
        found, freed, died = db.transact(sweep)
        released, dead = released + freed, dead + died
        if found < batch:
            break
    return {"released": released, "deadLettered": dead}


_RETAINED = """
SELECT q.id, q.retention_seconds, q.completed_retention_seconds, p.id
FROM pq_queues q JOIN log_partitions p ON p.owner_kind = %s AND p.owner_id = q.id
WHERE q.retention_seconds > 0 OR q.completed_retention_seconds > 0
ORDER BY p.id
"""


def sweep_retention(budget_s: float = 20.0) -> int:
    """Drop whole segments past `retentionSeconds`, and those past `completedRetentionSeconds`
    that every consumer group has consumed. Returns the messages removed."""
    removed = 0
    deadline = time.monotonic() + budget_s
    with db.transaction() as conn:
        targets = conn.execute(_RETAINED, (OWNER_KIND,)).fetchall()
    for _, retention, completed, pid in targets:
        if time.monotonic() >= deadline:
            break
        with db.transaction() as conn:
            if not conn.execute("SELECT pg_try_advisory_xact_lock(%s, %s)", (_LOCK_SPACE, pid % 2**31)).fetchone()[0]:
                continue
            if retention:
                removed += store.drop_older_than(conn, pid, retention)
            if completed:
                slowest = cursors.slowest(conn, pid)
                if slowest:
                    edge = conn.execute(
                        "SELECT max(end_offset) FROM log_segments WHERE partition_id = %s AND end_offset <= %s"
                        " AND created_at < clock_timestamp() - %s * interval '1 second'",
                        (pid, slowest, completed),
                    ).fetchone()[0]
                    if edge is not None:
                        removed += store.drop_before(conn, pid, edge)
    return removed
