"""Whole-queue and whole-group operations Queen's client calls: delete a queue, delete a consumer
group, list the queues, an overview of them all. On an open connection; nothing here commits.
"""

from __future__ import annotations

from typing import Any

import psycopg

from ..errors import NotFound
from ..log_engine import store
from . import OWNER_KIND, QUEUE_MODE, counters, queues


def delete_queue(conn: psycopg.Connection, tenant_id: str, name: str) -> dict[str, Any]:
    """Remove the queue with its partitions, messages, cursors, groups and dead letters; 404 for a
    missing or foreign one. A push afterwards creates a new, empty queue of the same name."""
    found = queues.get(conn, tenant_id, name)
    # The lock order (sql/functions/partitioned.sql): partitions, cursors, then the queue row, which
    # pushes and acks holding a partition or a cursor may still need (KEY SHARE) to count.
    conn.execute("SELECT 1 FROM log_partitions WHERE owner_kind = %s AND owner_id = %s ORDER BY id FOR UPDATE",
                 (OWNER_KIND, found.id))
    conn.execute(
        "DELETE FROM log_cursors c USING log_partitions p"
        " WHERE c.partition_id = p.id AND p.owner_kind = %s AND p.owner_id = %s",
        (OWNER_KIND, found.id),
    )
    removed = store.delete_partitions(conn, OWNER_KIND, found.id)
    # groups, dead letters and counters cascade; a concurrent delete that came first leaves nothing
    if not conn.execute("DELETE FROM pq_queues WHERE id = %s", (found.id,)).rowcount:
        raise NotFound(f"queue not found: {name}")
    return {"deleted": True, "queue": found.name, "messagesRemoved": removed}


def delete_group(conn: psycopg.Connection, tenant_id: str, group: str, *, metadata: bool = True) -> dict[str, Any]:
    """Forget a consumer group on every queue of the tenant: its cursors and leases go, so popping
    under the name again starts a new subscription. With `metadata`, the group's membership of the
    queues goes too. The queue mode's own consumers are not a group: 404, as is a group never seen."""
    if group == QUEUE_MODE:
        raise NotFound(f"consumer group not found: {group}")
    cursors = conn.execute(  # locked by partition first (the lock order: sql/functions/partitioned.sql)
        "DELETE FROM log_cursors WHERE (partition_id, consumer_group) IN ("
        " SELECT c.partition_id, c.consumer_group FROM log_cursors c JOIN log_partitions p ON p.id = c.partition_id"
        " WHERE p.tenant_id = %s AND p.owner_kind = %s AND c.consumer_group = %s"
        " ORDER BY c.partition_id FOR UPDATE OF c)",
        (tenant_id, OWNER_KIND, group),
    ).rowcount
    member = conn.execute(
        "SELECT count(*) FROM pq_groups g JOIN pq_queues q ON q.id = g.queue_id"
        " WHERE q.tenant_id = %s AND g.consumer_group = %s",
        (tenant_id, group),
    ).fetchone()[0]
    if not cursors and not member:
        raise NotFound(f"consumer group not found: {group}")
    if metadata:
        conn.execute(
            "DELETE FROM pq_groups g USING pq_queues q WHERE q.id = g.queue_id AND q.tenant_id = %s"
            " AND g.consumer_group = %s",
            (tenant_id, group),
        )
    return {"success": True, "deleted": True, "consumerGroup": group, "partitionsReset": cursors,
            "metadataDeleted": metadata}


_LIST = """
SELECT q.name, q.created_at, count(p.id), coalesce(sum(p.next_offset - p.start_offset), 0)
FROM pq_queues q LEFT JOIN log_partitions p ON p.owner_kind = %s AND p.owner_id = q.id
WHERE q.tenant_id = %s
GROUP BY q.id ORDER BY q.name LIMIT %s OFFSET %s
"""


def list_queues(conn: psycopg.Connection, tenant_id: str, limit: int, offset: int) -> dict[str, Any]:
    """The tenant's queues by name, each with its partition count and the messages its partitions
    still keep (retention removes the rest); read from queue and partition rows only."""
    rows = conn.execute(_LIST, (OWNER_KIND, tenant_id, limit, offset)).fetchall()
    total = conn.execute("SELECT count(*) FROM pq_queues WHERE tenant_id = %s", (tenant_id,)).fetchone()[0]
    return {
        "queues": [{"name": name, "createdAt": created.isoformat().replace("+00:00", "Z"), "partitions": parts,
                    "messages": int(kept)} for name, created, parts, kept in rows],
        "total": total, "limit": limit, "offset": offset,
    }


def overview(conn: psycopg.Connection, tenant_id: str) -> dict[str, Any]:
    """Counts over every queue of the tenant: queues, partitions, kept messages, consumer groups,
    live leases, dead letters, and the queues' counters summed."""
    q, parts, kept = conn.execute(
        "SELECT count(DISTINCT q.id), count(p.id), coalesce(sum(p.next_offset - p.start_offset), 0)"
        " FROM pq_queues q LEFT JOIN log_partitions p ON p.owner_kind = %s AND p.owner_id = q.id"
        " WHERE q.tenant_id = %s",
        (OWNER_KIND, tenant_id),
    ).fetchone()
    groups, leased = conn.execute(
        "SELECT count(DISTINCT c.consumer_group) FILTER (WHERE c.consumer_group <> %s),"
        " count(*) FILTER (WHERE c.lease_id IS NOT NULL AND c.lease_expires_at > clock_timestamp())"
        " FROM log_cursors c JOIN log_partitions p ON p.id = c.partition_id"
        " WHERE p.tenant_id = %s AND p.owner_kind = %s",
        (QUEUE_MODE, tenant_id, OWNER_KIND),
    ).fetchone()
    dead = conn.execute("SELECT count(*) FROM pq_dead_letters WHERE tenant_id = %s", (tenant_id,)).fetchone()[0]
    sums = conn.execute(
        "SELECT coalesce(sum(pushed), 0), coalesce(sum(acked), 0), coalesce(sum(failed), 0),"
        " coalesce(sum(dead_lettered), 0), coalesce(sum(replayed), 0)"
        " FROM pq_counters c JOIN pq_queues q ON q.id = c.queue_id WHERE q.tenant_id = %s",
        (tenant_id,),
    ).fetchone()
    totals = dict(zip(counters.NAMES, map(int, sums), strict=True))
    return {"queues": q, "partitions": parts, "messages": int(kept), "consumerGroups": groups, "leases": leased,
            "deadLetters": dead, "counters": totals}
