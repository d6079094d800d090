"""Partitioned queues for one principal: each call is one unit of work (one transaction).

Queues are the tenant's (names unique per tenant); another tenant's queue or partition is
answered exactly like a missing one. Pops long-poll on the queue's wake-up channel.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from .. import db, history, tenancy, wait_slots, wakeup
from ..errors import Invalid, NotFound
from ..tenancy import Principal
from . import QUEUE_MODE, admin, consume, dlq, produce, queues, reads, resources
from .consume import Ack
from .produce import Item

MAX_LEASE_SECONDS = 7 * 24 * 3600


def _require(principal: Principal, need: str) -> str:
    return tenancy.require(principal, need, what="partitioned queues")


def configure(principal: Principal, queue: str, options: dict[str, Any]) -> dict[str, Any]:
    tenant = _require(principal, "write")
    found = db.transact(lambda conn: queues.configure(conn, tenant, queue, options))
    if found.encryption_enabled:
        from . import payloads

        payloads.seal(b"")  # a missing key or library is a 503 now, not at the first push
    return {"configured": True, "queue": found.name, "options": found.options()}


def echo_options(answer: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """Configure's answer with the options as sent, ignored ones included (Queen echoes them)."""
    return {**answer, "options": {**answer["options"], **given}}


def push(principal: Principal, items: list[Item]) -> list[dict[str, Any]]:
    tenant = _require(principal, "write")
    if not items:
        raise Invalid("items: at least one item is required")
    with db.connection() as conn:  # autocommit: pq_push is one statement
        return produce.push(conn, tenant, items)


class PopRequest(NamedTuple):
    queue: str
    partition: str | None = None
    batch: int = 1
    wait: bool = False
    timeout_ms: int | None = None
    consumer_group: str | None = None
    auto_ack: bool = False
    start: str | datetime = "all"  # subscription of a new group: "all", "new" or a time
    partitions: int = 1  # partitions one pop may lease, sharing `batch` (a named partition: 1)


def pop(principal: Principal, request: PopRequest) -> list[dict[str, Any]]:
    """Lease the next batch of up to `partitions` partitions; with `wait`, long-poll (bounded) until
    one is ready. A queue or partition that does not exist yet is empty, as in Queen: a worker
    started before its producer waits (re-checking) instead of failing. The partitions one pop
    leases share one lease id, as Queen's (renewing it renews them all; acks name it with the
    partition)."""
    tenant = _require(principal, "write")
    group = request.consumer_group or QUEUE_MODE
    limit_ms = wakeup.max_wait_seconds() * 1000
    wait_ms = (request.timeout_ms if request.timeout_ms is not None else limit_ms) if request.wait else 0
    sweep = 1 if request.partition is not None else max(1, request.partitions)

    def attempt() -> tuple[list[dict[str, Any]], list[str]]:
        found: list[dict[str, Any]] = []
        with db.connection() as conn:  # autocommit: the usual pop is two single-statement steps
            for _ in range(sweep):  # each round leases another partition (the last one is held now)
                try:
                    share = found[0]["leaseId"] if found else None
                    queue_id, more = consume.pop(conn, tenant, request.queue, request.partition, group,
                                                 request.batch - len(found), start=request.start,
                                                 auto_ack=request.auto_ack, share=share)
                except NotFound:
                    return found, []  # nothing to listen on yet: re-checked until it exists
                found += more
                if not more or len(found) >= request.batch:
                    break
        return found, [wakeup.channel(wakeup.PARTITIONED, queue_id)]

    return wakeup.long_poll(attempt, wait_ms / 1000, caller=wait_slots.caller(principal))


def ack(principal: Principal, acks: list[Ack]) -> list[dict[str, Any]]:
    tenant = _require(principal, "write")
    if not acks:
        raise Invalid("acknowledgments: at least one ack is required")
    with db.connection() as conn:  # autocommit: the usual ack is one statement
        done = consume.ack_one_statement(conn, tenant, acks)
        if done is not None:
            return done
        return db.transact(lambda conn: consume.ack(conn, tenant, acks), conn)


def extend(principal: Principal, lease_id: str, seconds: float | None = None) -> dict[str, Any]:
    tenant = _require(principal, "write")
    if seconds is not None and not 0 < seconds <= MAX_LEASE_SECONDS:
        raise Invalid(f"seconds: must be more than 0 and at most {MAX_LEASE_SECONDS}")
    return db.transact(lambda conn: consume.extend(conn, tenant, lease_id, seconds))


def transaction(principal: Principal, operations: list[Ack | list[Item]],
                required_leases: list[str] = ()) -> list[dict[str, Any]]:
    """Acks and pushes in one transaction: any refusal rolls back every operation, and nothing
    applies unless every one of `required_leases` is live."""
    tenant = _require(principal, "write")
    if not operations:
        raise Invalid("operations: at least one operation is required")

    def run(conn) -> list[dict[str, Any]]:
        # The pushes first, as one (their partitions locked in one order), then the leases: the
        # lock order of sql/functions/partitioned.sql, whatever the order of the operations.
        pushed = iter(produce.push_each(conn, tenant, [op for op in operations if not isinstance(op, Ack)]))
        consume.require_live(conn, tenant, list(required_leases))
        return [{"type": "ack", **consume.ack(conn, tenant, [op])[0]} if isinstance(op, Ack)
                else {"type": "push", "results": next(pushed)} for op in operations]

    return db.transact(run)  # run again from the start if the database breaks it off


def dead_letters(principal: Principal, queue: str | None, partition: str | None, group: str | None,
                 limit: int, offset: int) -> dict[str, Any]:
    tenant = _require(principal, "read")
    with db.transaction() as conn:
        return dlq.list_messages(conn, tenant, queue, partition, group, limit, offset)


def replay(principal: Principal, ids: list[int]) -> dict[str, Any]:
    tenant = _require(principal, "write")

    def run(conn) -> list[dict[str, Any]]:
        results = dlq.replay(conn, tenant, ids)
        queue_ids = [r[0] for r in conn.execute(
            "SELECT DISTINCT owner_id FROM log_partitions WHERE id = ANY(%s)",
            ([int(r["partitionId"]) for r in results],))]
        wakeup.notify(conn, [wakeup.channel(wakeup.PARTITIONED, q) for q in queue_ids])
        return results

    results = db.transact(run)
    return {"replayed": len(results), "results": results}


def queue_resource(principal: Principal, queue: str) -> dict[str, Any]:
    """The queue's options, counters, partitions and consumer groups' progress (resources API)."""
    tenant = _require(principal, "read")
    with db.transaction() as conn:
        return resources.queue(conn, tenant, queue)


def queue_history(principal: Principal, queue: str, window: str) -> dict[str, Any]:
    """The queue's depth, oldest age and messages in and out per minute over `window` (charts)."""
    tenant = _require(principal, "read")
    with db.transaction() as conn:
        return history.series(conn, "partitioned", queues.get(conn, tenant, queue).id, window)


def delete_queue(principal: Principal, queue: str) -> dict[str, Any]:
    tenant = _require(principal, "manage")
    return db.transact(lambda conn: admin.delete_queue(conn, tenant, queue))


def delete_group(principal: Principal, group: str, metadata: bool = True) -> dict[str, Any]:
    tenant = _require(principal, "manage")
    return db.transact(lambda conn: admin.delete_group(conn, tenant, group, metadata=metadata))


def list_queues(principal: Principal, limit: int, offset: int) -> dict[str, Any]:
    tenant = _require(principal, "read")
    with db.transaction() as conn:
        return admin.list_queues(conn, tenant, limit, offset)


def overview(principal: Principal) -> dict[str, Any]:
    tenant = _require(principal, "read")
    with db.transaction() as conn:
        return admin.overview(conn, tenant)


def fetch(principal: Principal, entries: list[reads.FetchEntry], max_bytes: int) -> list[dict[str, Any]]:
    """Records by offset, read in one snapshot (REPEATABLE READ would add nothing: reads only)."""
    tenant = _require(principal, "read")
    with db.transaction() as conn:
        return reads.fetch(conn, tenant, entries, max_bytes)


def health(principal: Principal) -> dict[str, Any]:
    """Queen's health answer: the caller's key was accepted and the database answers."""
    _require(principal, "read")
    with db.connection() as conn:
        conn.execute("SELECT 1").fetchone()
    return {"status": "healthy", "database": "connected", "server": "Postbox"}
