"""Queue rows and their options. Names are unique per tenant; another tenant's queue is missing."""

from __future__ import annotations

from typing import Any, NamedTuple

import psycopg

from .. import names
from ..db import domain_errors
from ..errors import Invalid, NotFound

MAX_PARTITION_NAME = names.PARTITION.max_length


class Queue(NamedTuple):
    id: int
    tenant_id: str
    name: str
    lease_time: int
    retry_limit: int
    retry_delay_ms: int
    delayed_processing: int
    retention_seconds: int
    completed_retention_seconds: int
    encryption_enabled: bool
    dlq_after_max_retries: bool

    def options(self) -> dict[str, Any]:
        """The options as the API names them."""
        return {wire: getattr(self, column) for wire, column in OPTIONS.items()}


# Wire option name -> column. retryDelay is in milliseconds, the other times in seconds (as in Queen).
OPTIONS = {
    "leaseTime": "lease_time",
    "retryLimit": "retry_limit",
    "retryDelay": "retry_delay_ms",
    "delayedProcessing": "delayed_processing",
    "retentionSeconds": "retention_seconds",
    "completedRetentionSeconds": "completed_retention_seconds",
    "encryptionEnabled": "encryption_enabled",
    "dlqAfterMaxRetries": "dlq_after_max_retries",
}
_COLUMNS = ", ".join(Queue._fields)


def check_name(name: str, field: str = "queue") -> None:
    names.PARTITIONED_QUEUE.check(name, field)


def check_partition(name: str) -> None:
    names.PARTITION.check(name, "partition")


def find(conn: psycopg.Connection, tenant_id: str, name: str) -> Queue | None:
    row = conn.execute(f"SELECT {_COLUMNS} FROM pq_queues WHERE tenant_id = %s AND name = %s",
                       (tenant_id, name)).fetchone()
    return _queue(row) if row else None


def get(conn: psycopg.Connection, tenant_id: str, name: str) -> Queue:
    """The tenant's queue, or 404 (the same answer for another tenant's queue)."""
    found = find(conn, tenant_id, name)
    if found is None:
        raise NotFound(f"queue not found: {name}")
    return found


def ensure(conn: psycopg.Connection, tenant_id: str, name: str) -> Queue:
    """The tenant's queue, created with default options on first use, within the plan's partitioned
    queues (SQL: pq_queue_create, which a push's creation shares). Call it in a transaction."""
    found = find(conn, tenant_id, name)
    if found is not None:
        return found
    check_name(name)
    with domain_errors():
        row = conn.execute(f"SELECT {_COLUMNS} FROM pq_queue_create(%s, %s)", (tenant_id, name)).fetchone()
    return _queue(row)


def configure(conn: psycopg.Connection, tenant_id: str, name: str, options: dict[str, Any]) -> Queue:
    """Create the queue or change the options given (wire names); the others keep their values."""
    check_name(name)
    unknown = set(options) - set(OPTIONS)
    if unknown:
        raise Invalid(f"options: unknown option {sorted(unknown)[0]}")
    queue = ensure(conn, tenant_id, name)
    if not options:
        return queue
    sets = ", ".join(f"{OPTIONS[k]} = %({k})s" for k in options)
    update = f"UPDATE pq_queues SET {sets}, updated_at = clock_timestamp() WHERE id = %(id)s RETURNING {_COLUMNS}"
    row = conn.execute(update, {**options, "id": queue.id}).fetchone()
    if row is None:  # deleted since it was found: made anew, as a configure after the deletion makes it
        row = conn.execute(update, {**options, "id": ensure(conn, tenant_id, name).id}).fetchone()
    return _queue(row)


def _queue(row: tuple) -> Queue:
    return Queue(row[0], str(row[1]), *row[2:])


def by_id(conn: psycopg.Connection, queue_id: int) -> Queue:
    return _queue(conn.execute(f"SELECT {_COLUMNS} FROM pq_queues WHERE id = %s", (queue_id,)).fetchone())
