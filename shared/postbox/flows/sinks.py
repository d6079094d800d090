"""The partitioned-queue calls a cycle makes, on the cycle's open connection (nothing commits here).

The one place flows depends on the partitioned queues' domain: `produce.push` (packing, auto-create,
encryption, dedup on transactionId, wake-ups of parked pops) and `consume.ack_lease` (the ack
validated under the lease: absent, foreign or expired leases raise and roll the cycle back).
"""

from __future__ import annotations

from typing import Any

import psycopg

from ..partitioned import DEFAULT_PARTITION, QUEUE_MODE, consume, produce
from ..partitioned.produce import Item

__all__ = ["DEFAULT_PARTITION", "QUEUE_MODE", "Item", "ack", "is_ok", "push", "source_queue_name"]


def push(conn: psycopg.Connection, tenant_id: str, items: list[Item]) -> list[dict[str, Any]]:
    """Push the items (grouped by queue and partition, one segment each); per item: queue,
    partition, status `queued`/`duplicate`, offset, transactionId, messageId."""
    return produce.push(conn, tenant_id, items, notify=True) if items else []


def ack(conn: psycopg.Connection, tenant_id: str, partition_id: str, group: str, lease_id: str,
        status: str | None, release: bool, count: int | None) -> dict[str, Any]:
    """The source ack under the lease: {success, count, lease_released, dlq}."""
    return consume.ack_lease(conn, tenant_id, lease_id, status=status, release=release, count=count,
                             partition_id=partition_id, consumer_group=group)


def is_ok(status: str | None) -> bool:
    return consume.is_ok(status)


def source_queue_name(conn: psycopg.Connection, partition: int) -> str | None:
    """The name of the queue a (checked) source partition belongs to."""
    row = conn.execute("SELECT q.name FROM log_partitions p JOIN pq_queues q ON q.id = p.owner_id"
                       " WHERE p.id = %s", (partition,)).fetchone()
    return row[0] if row else None
