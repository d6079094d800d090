"""Dead letters: messages that failed past their queue's retry limit, recorded, listed and replayed.

A dead letter is a copy of the record (it outlives retention and replays without the log), with
`retryCount`, the retries it had after its first delivery (its failed attempts - 1).
"""

from __future__ import annotations

from typing import Any

import psycopg

from ..errors import NotFound
from ..log_engine import store
from ..log_engine.cursors import Cursor
from ..log_engine.frames import Entry, Record
from . import counters, payloads, queues
from .shapes import iso

_RECORD = """
WITH dead AS (
    INSERT INTO pq_dead_letters (tenant_id, queue_id, partition_id, consumer_group, "offset", transaction_id,
                                 message_id, headers, payload, created_at, retry_count, error)
    SELECT %s, %s, %s, %s, o, t, m, h, d, to_timestamp(ts / 1000.0), %s, %s
    FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::bytea[], %s::bytea[], %s::bigint[]) AS u(o, t, m, h, d, ts)
    RETURNING queue_id
)
SELECT pq_count(queue_id, 0, 0, 0, count(*), 0) FROM dead GROUP BY queue_id
"""


def record(conn: psycopg.Connection, cur: Cursor, entries: list[Entry], attempts: int, error: str | None) -> None:
    """The queue's dead-letter store for the lease module: copy the records, count them (one statement)."""
    conn.execute(_RECORD, (
        cur.tenant_id, cur.owner_id, cur.partition_id, cur.group, attempts - 1, error,
        [e.offset for e in entries], [e.id for e in entries], [e.key for e in entries],
        [e.headers for e in entries], [e.payload for e in entries], [e.ts_ms for e in entries]))


_LIST = """
SELECT d.id, q.name, p.name, d.partition_id, d.consumer_group, d."offset", d.transaction_id, d.message_id,
       d.headers, d.payload, (extract(epoch FROM d.created_at) * 1000)::bigint,
       (extract(epoch FROM d.failed_at) * 1000)::bigint, d.retry_count, d.error
FROM pq_dead_letters d JOIN pq_queues q ON q.id = d.queue_id JOIN log_partitions p ON p.id = d.partition_id
WHERE d.tenant_id = %(t)s AND (%(q)s::bigint IS NULL OR d.queue_id = %(q)s)
  AND (%(p)s::text IS NULL OR p.name = %(p)s) AND (%(g)s::text IS NULL OR d.consumer_group = %(g)s)
"""


def list_messages(conn: psycopg.Connection, tenant_id: str, queue: str | None, partition: str | None,
                  group: str | None, limit: int, offset: int) -> dict[str, Any]:
    qid = queues.get(conn, tenant_id, queue).id if queue else None
    params = {"t": tenant_id, "q": qid, "p": partition, "g": group}
    total = conn.execute(f"SELECT count(*) FROM ({_LIST}) x", params).fetchone()[0]
    rows = conn.execute(_LIST + " ORDER BY d.id LIMIT %(limit)s OFFSET %(offset)s",
                        {**params, "limit": limit, "offset": offset}).fetchall()
    out = []
    for (did, qname, pname, pid, grp, off, tid, mid, headers, stored, created, failed, retries, error) in rows:
        data = payloads.decode(stored, headers)
        out.append({
            "id": str(did), "queue": qname, "partition": pname, "partitionId": str(pid), "consumerGroup": grp,
            "offset": off, "transactionId": tid, "messageId": mid, "createdAt": iso(created),
            "failedAt": iso(failed), "retryCount": retries, "errorMessage": error, "data": data, "payload": data,
        })
    return {"messages": out, "total": total, "limit": limit, "offset": offset}


def replay(conn: psycopg.Connection, tenant_id: str, ids: list[int]) -> list[dict[str, Any]]:
    """Append the dead letters again at the end of their partitions (every group of that partition
    sees them again) and remove them from the dead letters. Unknown ids: 404, nothing replayed.
    In the lock order (sql/functions/partitioned.sql): their partitions, the dead letters, then
    (counting) the queues."""
    conn.execute(
        "SELECT 1 FROM log_partitions WHERE id IN (SELECT partition_id FROM pq_dead_letters"
        " WHERE tenant_id = %s AND id = ANY(%s)) ORDER BY id FOR NO KEY UPDATE",
        (tenant_id, ids),
    )
    rows = conn.execute(
        "DELETE FROM pq_dead_letters WHERE tenant_id = %s AND id = ANY(%s)"
        " RETURNING id, queue_id, partition_id, transaction_id, message_id, headers, payload",
        (tenant_id, ids),
    ).fetchall()
    missing = sorted(set(ids) - {r[0] for r in rows})
    if missing:
        raise NotFound(f"dead letter not found: {missing[0]}")
    by_partition: dict[int, list[tuple]] = {}
    for row in sorted(rows):
        by_partition.setdefault(row[2], []).append(row)
    results = []
    for pid in sorted(by_partition):
        group = by_partition[pid]
        # No dedup here: the transaction id was stored once already and replay means "again".
        appended = store.append(conn, pid, [Record(bytes(r[6]), id=r[3], key=r[4], headers=r[5]) for r in group])
        for row, off in zip(group, appended.offsets, strict=True):
            results.append({"id": str(row[0]), "partitionId": str(pid), "transactionId": row[3], "offset": off})
    replayed: dict[int, int] = {}
    for row in rows:
        replayed[row[1]] = replayed.get(row[1], 0) + 1
    for queue_id in sorted(replayed):
        counters.add(conn, queue_id, replayed=replayed[queue_id])
    return results
