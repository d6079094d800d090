"""Acks and extensions of a partitioned queue's leases, on an open connection.

An ack commits the group's cursor:
- by transactionId: up to and including that message (earlier messages of the lease with it);
  the lease is released once the whole leased batch is committed;
- without one (the whole lease): to the batch end.
A failed ack fails the uncommitted rest of the lease: one more failed attempt, and the queue's
retry policy decides (see `failures`): the same messages redeliver after retryDelay, or, past
retryLimit, go to the dead letters and the cursor moves past them.
The usual ack (one lease, all completed) is one SQL statement (`pq_ack`); the rest is decided here.
Nothing here commits, so a caller can ack inside its own transaction (`transaction`, cycles).
"""

from __future__ import annotations

import uuid
from typing import Any, NamedTuple

import psycopg

from ..errors import Conflict, Invalid, NotFound
from ..log_engine import cursors, leases
from . import OWNER_KIND, QUEUE_MODE, counters, failures, queues
from .shapes import is_dead_letter, is_ok

# A partial ack that keeps the lease (a streaming gate's `release_lease: false`) keeps it this long:
# then the rest of the batch is offered again, in order, to whoever pops the partition for the group.
RETAINED_LEASE_SECONDS = 1.0


class Ack(NamedTuple):
    lease_id: str | None  # None: whichever lease holds the partition for the group now (as Queen acks)
    status: str | None = "completed"
    transaction_id: str | None = None   # None: the whole leased batch
    partition_id: str | None = None
    consumer_group: str | None = None
    error: str | None = None


def _holder(conn: psycopg.Connection, tenant_id: str, lease_id: str, partition_id: str | None,
            group: str | None) -> cursors.Cursor:
    """The live lease's cursor (on `partition_id`, when given: a multi-partition pop's lease covers
    several), locked; a stale, foreign or mismatched lease changes nothing."""
    cur = leases.held(conn, lease_id, partition_id)
    if (cur is not None and cur.tenant_id == tenant_id and cur.owner_kind == OWNER_KIND and cur.lease_live
            and (partition_id is None or str(cur.partition_id) == str(partition_id))
            and (group is None or cur.group == group)):
        return cur
    if partition_id is not None:
        check_partition(conn, tenant_id, partition_id)
    raise Conflict("lease is not held: it expired, was released, or is not yours", code="invalid_lease")


def check_partition(conn: psycopg.Connection, tenant_id: str, partition_id: str) -> None:
    """404 unless `partition_id` is one of the tenant's partitioned-queue partitions."""
    pid = str(partition_id)
    found = pid.isdigit() and conn.execute(
        "SELECT 1 FROM log_partitions WHERE id = %s AND tenant_id = %s AND owner_kind = %s",
        (int(pid), tenant_id, OWNER_KIND),
    ).fetchone()
    if not found:
        raise NotFound("partition not found")


def _locate(conn: psycopg.Connection, cur: cursors.Cursor, transaction_ids: list[str]) -> dict[str, int]:
    """Offsets of these transactions inside the leased batch; 409 for one that is not in it."""
    start, end = cur.batch_start, cur.batch_end
    if len(transaction_ids) == 1 and transaction_ids[0] == cur.batch_last_id:
        return {cur.batch_last_id: end - 1}  # the usual ack names the batch's last message
    entries = cursors.read_window(conn, cur.partition_id, start, end - start, end)
    offsets = {e.id: e.offset for e in entries}
    for tid in transaction_ids:
        if tid not in offsets:
            raise Conflict(f"transactionId {tid} is not in this lease", code="not_in_lease")
    return offsets


def _settle(conn: psycopg.Connection, cur: cursors.Cursor, acks: list[Ack]) -> dict[str, Any]:
    """Apply one lease's acks: commit what completed (in log order), fail the rest."""
    whole = any(a.transaction_id is None for a in acks)
    offsets = {} if whole else _locate(conn, cur, [a.transaction_id for a in acks])
    failed = [cur.committed if a.transaction_id is None else offsets[a.transaction_id]
              for a in acks if not is_ok(a.status)]
    failed = [o for o in failed if o >= cur.committed]
    if not failed:
        upto = cur.batch_end if whole else max(offsets[a.transaction_id] for a in acks) + 1
        upto = max(upto, cur.committed)
        release = upto >= cur.batch_end
        cursors.commit(conn, cur, upto, release=release)
        counters.add(conn, cur.owner_id, acked=upto - cur.committed)
        return {"count": upto - cur.committed, "lease_released": release, "dlq": False}
    upto = min(failed)
    # A nack fails the uncommitted rest of the lease: those records count as failed.
    counters.add(conn, cur.owner_id, acked=upto - cur.committed, failed=max((cur.batch_end or upto) - upto, 0))
    error = next((a.error for a in acks if a.error), None)
    queue = queues.by_id(conn, cur.owner_id)
    if any(is_dead_letter(a.status) for a in acks):
        dlq = failures.dead_letter(conn, queue, cur, upto, error)
    else:
        dlq = failures.nack(conn, queue, cur, upto, error)
    return {"count": upto - cur.committed, "lease_released": True, "dlq": dlq}


def _commit_whole(conn: psycopg.Connection, tenant_id: str, first: Ack,
                  group: list[Ack]) -> tuple[int, dict[str, Any]] | None:
    """The usual ack (all completed, naming the whole lease or its last message) in one statement;
    None when it does not apply or the lease is not held (the general path then decides)."""
    if not all(is_ok(a.status) for a in group):
        return None
    pid = str(first.partition_id) if first.partition_id is not None else None
    if pid is not None and not pid.isdigit():
        return None
    txs = [a.transaction_id for a in group]
    if pid is None and None in txs:
        return None  # the whole lease, naming no partition: it may cover several (the general path)
    try:
        uuid.UUID(str(first.lease_id))
    except ValueError:
        return None
    done = conn.execute(_ACK, (str(first.lease_id), tenant_id, int(pid) if pid else None, first.consumer_group,
                               None if None in txs else txs)).fetchone()
    if done is None:
        return None
    return done[0], {"count": done[1], "lease_released": True, "dlq": False}


# The usual ack: commit the whole lease, release it and count it, in one round trip (SQL: pq_ack).
_ACK = "SELECT * FROM pq_ack(%s::uuid, %s::uuid, %s::bigint, %s::text, %s::text[])"


def ack_one_statement(conn: psycopg.Connection, tenant_id: str, acks: list[Ack]) -> list[dict[str, Any]] | None:
    """The usual ack (one lease, all completed, naming the whole lease or its last message) as one
    statement, safe on an autocommit connection; None (nothing changed) when `ack` must decide."""
    lease_id = str(acks[0].lease_id)
    first = acks[0]
    if first.lease_id is None or any(
            str(a.lease_id) != lease_id or str(a.partition_id) != str(first.partition_id) for a in acks):
        return None
    fast = _commit_whole(conn, tenant_id, acks[0], acks)
    if fast is None:
        return None
    return _ack_results(acks, {_key(first): fast[0]}, {_key(first): fast[1]})


def _key(a: Ack) -> tuple[str, str | None]:
    """What one settlement covers: a lease on one partition (a lease may cover several)."""
    return str(a.lease_id), None if a.partition_id is None else str(a.partition_id)


def _ack_results(acks: list[Ack], partition_of: dict[Any, int],
                 settled: dict[Any, dict[str, Any]]) -> list[dict[str, Any]]:
    return [{
        "transactionId": a.transaction_id,
        "leaseId": str(a.lease_id),
        "partitionId": str(partition_of[_key(a)]),
        "status": "completed" if is_ok(a.status) else "failed",
        "success": True,
        "dlq": settled[_key(a)]["dlq"],
        "leaseReleased": settled[_key(a)]["lease_released"],
    } for a in acks]


def _with_current_lease(conn: psycopg.Connection, tenant_id: str, a: Ack) -> Ack:
    """An ack naming no lease takes the live lease of its partition and group (Queen fences an ack
    only with the lease it carries); 409 when none is live, 404 for a partition that is not there."""
    if a.partition_id is None:
        raise Invalid("leaseId: required when the ack names no partitionId")
    check_partition(conn, tenant_id, str(a.partition_id))
    row = conn.execute(
        "SELECT lease_id FROM log_cursors WHERE partition_id = %s AND consumer_group = %s AND lease_id IS NOT NULL"
        " AND lease_expires_at > clock_timestamp()",
        (int(a.partition_id), a.consumer_group or QUEUE_MODE),
    ).fetchone()
    if row is None:
        raise Conflict("lease is not held: it expired, was released, or is not yours", code="invalid_lease")
    return a._replace(lease_id=str(row[0]))


def _on_partitions(conn: psycopg.Connection, a: Ack) -> list[Ack]:
    """An ack naming a lease but no partition, on the partition(s) of that lease it acks: the one
    holding its transactionId, or, without one, every partition the lease covers (the whole lease).
    Unchanged when the lease covers one partition or none (the holder check then decides)."""
    if a.partition_id is not None:
        return [a]
    held = leases.holders(conn, str(a.lease_id))
    if len(held) < 2:
        return [a]
    if a.transaction_id is None:
        return [a._replace(partition_id=str(c.partition_id)) for c in held]
    for c in held:
        if c.batch_last_id == a.transaction_id or (c.batch_start is not None and c.batch_end is not None and any(
                e.id == a.transaction_id for e in cursors.read_window(
                    conn, c.partition_id, c.batch_start, c.batch_end - c.batch_start, c.batch_end))):
            return [a._replace(partition_id=str(c.partition_id))]
    raise Conflict(f"transactionId {a.transaction_id} is not in this lease", code="not_in_lease")


def require_live(conn: psycopg.Connection, tenant_id: str, lease_ids: list[str]) -> None:
    """409 unless every lease is live and the tenant's (a transaction's `requiredLeases`)."""
    for lease_id in sorted(set(lease_ids)):
        _holder(conn, tenant_id, lease_id, None, None)


def ack(conn: psycopg.Connection, tenant_id: str, acks: list[Ack]) -> list[dict[str, Any]]:
    """Acks, grouped by lease; all or nothing (one refused lease refuses the call).
    One result per ack, in input order."""
    acks = [a if a.lease_id is not None else _with_current_lease(conn, tenant_id, a) for a in acks]
    acks = [b for a in acks for b in _on_partitions(conn, a)]
    by_lease: dict[str, list[Ack]] = {}
    for a in acks:
        by_lease.setdefault(str(a.lease_id), []).append(a)
    partition_of: dict[Any, int] = {}
    settled: dict[Any, dict[str, Any]] = {}
    for lease_id in sorted(by_lease):  # a fixed lock order: concurrent batch acks cannot deadlock
        of_lease = by_lease[lease_id]
        named = sorted({str(a.partition_id) for a in of_lease if a.partition_id is not None},
                       key=lambda p: (not p.isdigit(), int(p) if p.isdigit() else 0, p))
        if len(named) > 1 and len(leases.holders(conn, lease_id)) < 2:  # one partition's lease, acked on two
            raise Conflict("lease is not held: it expired, was released, or is not yours", code="invalid_lease")
        # One settlement per partition of the lease (a multi-partition pop's covers several); an ack
        # naming no partition settles with the others (`_on_partitions` named it where that mattered).
        parts = {p: [a for a in of_lease if a.partition_id is None or str(a.partition_id) == p] for p in named}
        for group in parts.values() or [of_lease]:
            first = next((a for a in group if a.partition_id is not None), group[0])
            fast = _commit_whole(conn, tenant_id, first, group)
            if fast is not None:
                partition_of.update(dict.fromkeys({_key(a) for a in group}, fast[0]))
                settled.update(dict.fromkeys({_key(a) for a in group}, fast[1]))
                continue
            cur = _holder(conn, tenant_id, lease_id, first.partition_id, first.consumer_group)
            out = _settle(conn, cur, group)
            partition_of.update(dict.fromkeys({_key(a) for a in group}, cur.partition_id))
            settled.update(dict.fromkeys({_key(a) for a in group}, out))
    return _ack_results(acks, partition_of, settled)


def ack_lease(conn: psycopg.Connection, tenant_id: str, lease_id: str, *, status: str | None = "completed",
              release: bool = True, count: int | None = None, partition_id: str | None = None,
              consumer_group: str | None = None) -> dict[str, Any]:
    """The streaming cycle's ack, validated under the lease: ok + release commits the whole leased
    batch; ok without release commits exactly `count` messages and keeps the lease; anything else
    fails the batch (it redelivers). Returns {success, count, lease_released, dlq}."""
    if is_ok(status) and (release or count is None):
        whole = Ack(lease_id, "completed", None, partition_id, consumer_group)
        fast = _commit_whole(conn, tenant_id, whole, [whole])
        if fast is not None:
            return {"success": True, **fast[1]}
    cur = _holder(conn, tenant_id, lease_id, partition_id, consumer_group)
    if not is_ok(status):
        out = _settle(conn, cur, [Ack(lease_id, status="failed")])
        return {"success": True, **out, "count": 0}
    if release or count is None:
        return {"success": True, **_settle(conn, cur, [Ack(lease_id)])}
    if count < 0:
        raise Invalid("count: must be >= 0")
    entries = cursors.read_window(conn, cur.partition_id, cur.committed, count, cur.batch_end) if count else []
    upto = entries[-1].offset + 1 if entries else cur.committed
    done = cur.batch_end is not None and upto >= cur.batch_end
    cursors.commit(conn, cur, upto, release=done, consumed=len(entries))
    counters.add(conn, cur.owner_id, acked=len(entries))
    if not done:
        # The rest stays leased, as in Queen, but only for a short pause instead of the lease's
        # remaining time: a gate that denied it (a rate limiter waiting for tokens) sees it again,
        # in order, as soon as it can pass, not a whole leaseTime later.
        leases.shorten(conn, cur, RETAINED_LEASE_SECONDS)
    return {"success": True, "count": len(entries), "lease_released": done, "dlq": False}


def extend(conn: psycopg.Connection, tenant_id: str, lease_id: str, seconds: float | None) -> dict[str, Any]:
    """A live lease expires `seconds` from now (the queue's leaseTime when not given)."""
    cur = _holder(conn, tenant_id, lease_id, None, None)
    if seconds is None:
        seconds = queues.by_id(conn, cur.owner_id).lease_time
    # Every partition the lease covers (a multi-partition pop's), as Queen's renewal; the earliest.
    expires = leases.extend_lease(conn, lease_id, seconds).isoformat().replace("+00:00", "Z")
    # Queen's names (`success`, `newExpiresAt`, `expiresAt`, `renewed`) beside Postbox's own.
    return {"leaseId": str(lease_id), "success": True, "renewed": 1, "newExpiresAt": expires, "expiresAt": expires,
            "leaseExpiresAt": expires, "partitionId": str(cur.partition_id)}
