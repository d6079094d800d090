"""A queue as the resources API shows it: options, counters, and per partition its end and, for
each consumer group, the committed offset, the lag and whether a lease is held.

Read from the queue's partition and cursor rows only (O(partitions x groups)); no segment is read.
"""

from __future__ import annotations

from typing import Any

import psycopg

from . import OWNER_KIND, counters, queues

_PARTITIONS = """
SELECT p.id, p.name, p.next_offset, p.start_offset, c.consumer_group, c.committed,
       coalesce(c.lease_id IS NOT NULL AND c.lease_expires_at > clock_timestamp(), false)
FROM log_partitions p LEFT JOIN log_cursors c ON c.partition_id = p.id
WHERE p.owner_kind = %s AND p.owner_id = %s
ORDER BY p.name, c.consumer_group
"""


def queue(conn: psycopg.Connection, tenant_id: str, name: str) -> dict[str, Any]:
    """The tenant's queue with its counters and partitions; 404 for a missing or foreign queue."""
    found = queues.get(conn, tenant_id, name)
    partitions: dict[int, dict[str, Any]] = {}
    for pid, pname, next_offset, start_offset, group, committed, leased in conn.execute(
            _PARTITIONS, (OWNER_KIND, found.id)):
        part = partitions.get(pid)
        if part is None:
            part = partitions[pid] = {"name": pname, "partitionId": str(pid), "nextOffset": next_offset,
                                      "startOffset": start_offset, "consumerGroups": []}
        if group is not None:
            # Records below the start offset were removed by retention: they are no longer pending.
            part["consumerGroups"].append({"name": group, "committedOffset": committed,
                                           "lag": max(next_offset - max(committed, start_offset), 0),
                                           "leased": leased})
    return {"queue": found.name, "options": found.options(), "counters": counters.read(conn, found.id),
            "partitions": list(partitions.values())}
