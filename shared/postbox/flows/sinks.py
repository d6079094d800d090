"""The partitioned-queue calls a cycle makes, on the cycle's open connection (nothing commits here).

The one place flows depends on the partitioned queues' domain: `produce.push` (packing, auto-create,
encryption, dedup on transactionId, wake-ups of parked pops), `consume.ack_lease` (the ack
validated under the lease: absent, foreign or expired leases raise and roll the cycle back), the
quiet check an idle flush commits under (the group's cursor row locked, as an ack locks it), and the
source queue's lease and retry defaults for flows.
"""

from __future__ import annotations

from typing import Any

import psycopg

from ..errors import Conflict
from ..partitioned import DEFAULT_PARTITION, QUEUE_MODE, consume, produce, queues
from ..partitioned.produce import Item

__all__ = ["DEFAULT_PARTITION", "QUEUE_MODE", "Item", "ack", "is_ok", "lock_quiet", "push", "quiet_among",
           "source_defaults"]

# A source partition is quiet for a consumer group when the group has consumed everything in it
# (retention may have moved its start past the cursor) and no live lease is held on it.
_QUIET = ("greatest(coalesce(c.committed, p.start_offset), p.start_offset) >= p.next_offset"
          " AND (c.lease_id IS NULL OR c.lease_expires_at <= clock_timestamp())")

# What a flows source queue runs with unless its owner chose otherwise: a killed runner's batches
# come back after 30 s (not the queue default of 5 minutes), and a batch whose holders were killed
# a few times is not dead-lettered unfolded (an expired lease counts as a failed delivery).
SOURCE_DEFAULTS = {"leaseTime": 30, "retryLimit": 100}
_QUEUE_DEFAULTS = {"leaseTime": 300, "retryLimit": 3}


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


def quiet_among(conn: psycopg.Connection, partitions: list[int], group: str) -> list[int]:
    """Those of `partitions` that are quiet for `group`, in id order."""
    if not partitions:
        return []
    return [r[0] for r in conn.execute(
        "SELECT p.id FROM log_partitions p LEFT JOIN log_cursors c ON c.partition_id = p.id"
        f" AND c.consumer_group = %s WHERE p.id = ANY(%s::bigint[]) AND {_QUIET} ORDER BY p.id",
        (group, partitions))]


def lock_quiet(conn: psycopg.Connection, partition: int, group: str) -> None:
    """An idle flush's guard: lock the group's cursor on the partition until the cycle commits (pops
    skip a locked cursor, acks wait for it) and raise Conflict (`not_quiet`) unless the partition
    is quiet. A fold holds a live lease from its pop to its cycle, so none can be half-way."""
    row = conn.execute(
        f"SELECT {_QUIET} FROM log_cursors c JOIN log_partitions p ON p.id = c.partition_id"
        " WHERE c.partition_id = %s AND c.consumer_group = %s FOR UPDATE OF c", (partition, group)).fetchone()
    if row is None:  # the group never met the partition: quiet only if nothing was ever appended to it
        row = conn.execute("SELECT start_offset >= next_offset FROM log_partitions WHERE id = %s",
                           (partition,)).fetchone()
    if not row or not row[0]:
        raise Conflict("partition not quiet: messages wait to be folded or a runner holds its lease;"
                       " its windows are emitted by the fold or a later idle flush", code="not_quiet")


def source_defaults(conn: psycopg.Connection, tenant_id: str, queue: str) -> None:
    """Create the source queue if needed and give it SOURCE_DEFAULTS while both options are still
    the partitioned queues' defaults (a queue configured otherwise keeps its values)."""
    found = queues.ensure(conn, tenant_id, queue)
    if {"leaseTime": found.lease_time, "retryLimit": found.retry_limit} == _QUEUE_DEFAULTS:
        queues.configure(conn, tenant_id, queue, SOURCE_DEFAULTS)
