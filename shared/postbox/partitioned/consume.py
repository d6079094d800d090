"""Pop with leases, ack, extend and dead-lettering, on an open connection.

Within a partition and consumer group one lease exists at a time and batches follow the log's
order; partitions and groups are served in parallel. An ack commits the group's cursor:
- by transactionId: up to and including that message (earlier messages of the lease with it);
  the lease is released once the whole leased batch is committed;
- without one (the whole lease): to the batch end.
A failed ack fails the uncommitted rest of the lease: retry count +1, the lease is released and
the same messages redeliver after retryDelay; past retryLimit they go to the dead-letter table
and the cursor moves past them. An expired lease counts as a failed delivery the same way.
Nothing here commits, so a caller can ack inside its own transaction (`transaction`, cycles).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import takewhile
from typing import Any

import psycopg

from ..db import domain_errors
from ..errors import Conflict, Invalid, NotFound
from ..log import cursors, store
from ..log.frames import Entry
from . import OWNER_KIND, QUEUE_MODE, counters, payloads, queues

OK_STATUSES = frozenset({"completed", "success", "acked", "ok"})
MAX_BATCH = 10_000

_groups_seen: set[tuple[int, str]] = set()  # (queue, group) known to be in pq_groups (committed)


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def is_ok(status: str | None) -> bool:
    """Success for `completed`, `success`, `acked`, `ok` and an absent status; anything else fails."""
    return status is None or status.lower() in OK_STATUSES


def _join_group(conn: psycopg.Connection, queue: queues.Queue, group: str, start: cursors.Start) -> None:
    """Record the group on the queue; a new group gets cursors where its subscription starts."""
    if (queue.id, group) in _groups_seen:
        return
    new = conn.execute(
        "INSERT INTO pq_groups (queue_id, consumer_group) VALUES (%s, %s) ON CONFLICT DO NOTHING RETURNING 1",
        (queue.id, group),
    ).fetchone()
    if new:
        cursors.ensure(conn, OWNER_KIND, queue.id, group, start)
    else:
        _groups_seen.add((queue.id, group))


_POP = "SELECT * FROM pq_pop(%s::uuid, %s, %s, %s, %s::int, %s, %s::timestamptz, %s)"
_LAST_ID = "SELECT pq_lease_last(%s::uuid, %s, %s)"


def pop(conn: psycopg.Connection, tenant_id: str, queue: str, partition: str | None, group: str, batch: int, *,
        start: cursors.Start = "all", auto_ack: bool = False) -> tuple[int, list[dict[str, Any]]]:
    """Pop on an autocommit connection: (queue id, messages). The usual case is the SQL function
    pq_pop (claim and lease in one round trip) plus one statement recording the batch's last id
    (acks name it); expired leases and delayed queues take `lease` in a transaction."""
    if not 1 <= batch <= MAX_BATCH:
        raise Invalid(f"batch: must be 1-{MAX_BATCH}")
    mode, since = ("time", start) if isinstance(start, datetime) else ("new" if start == "new" else "all", None)
    with domain_errors():
        rows = conn.execute(_POP, (tenant_id, queue, partition, group, batch, mode, since, auto_ack)).fetchall()
    status, queue_id, partition_id, name, lease_id, retries, start_at, end = rows[0][:8]
    if status == "empty":
        return queue_id, []
    if status == "slow":
        with conn.transaction():
            found = queues.get(conn, tenant_id, queue)
            only = store.find_partition(conn, OWNER_KIND, found.id, partition) if partition is not None else None
            if partition is not None and only is None:
                raise NotFound(f"partition not found: {partition}")
            return queue_id, lease(conn, found, group, batch, partition=only, start=start, auto_ack=auto_ack)
    entries: list[Entry] = []
    cursors._cut([r[8:] for r in rows], start_at, end, end - start_at, entries)
    if lease_id is not None:
        last = entries[-1] if entries else None
        conn.execute(_LAST_ID, (lease_id, last.id if last else None, last.offset + 1 if last else None))
    return queue_id, _messages(queue, name, partition_id, group, entries, lease_id, retries)


def _messages(queue: str, partition: str, partition_id: int, group: str, entries: list[Entry],
              lease_id: str | None, retries: int) -> list[dict[str, Any]]:
    """_message for a batch, with the payloads decoded together."""
    values = payloads.decode_many([e.payload for e in entries], [e.headers for e in entries])
    pid, shown_group = str(partition_id), None if group == QUEUE_MODE else group
    stamps: dict[int, str] = {}
    out = []
    for e, data in zip(entries, values, strict=True):
        created = stamps.get(e.ts_ms)
        if created is None:
            created = stamps[e.ts_ms] = iso(e.ts_ms)
        out.append({"id": e.key, "messageId": e.key, "transactionId": e.id, "queue": queue, "partition": partition,
                    "partitionId": pid, "consumerGroup": shown_group, "leaseId": lease_id, "offset": e.offset,
                    "retryCount": retries, "createdAt": created, "data": data, "payload": data})
    return out


def lease(conn: psycopg.Connection, queue: queues.Queue, group: str, batch: int, *,
          partition: store.Partition | None = None, start: cursors.Start = "all",
          auto_ack: bool = False) -> list[dict[str, Any]]:
    """Lease the next batch (up to `batch` messages) of one partition for `group`; [] when none
    is available. With `auto_ack` the cursor commits at once and no lease is held."""
    if not 1 <= batch <= MAX_BATCH:
        raise Invalid(f"batch: must be 1-{MAX_BATCH}")
    _join_group(conn, queue, group, start)
    only = [partition.id] if partition else None
    skip: list[int] = []
    filled = False
    while True:
        claimed = cursors.claim(conn, OWNER_KIND, queue.id, group, batch,
                                partition_id=partition.id if partition else None, skip=skip)
        if claimed is None:
            # A partition may predate nothing the group knows (created concurrently with the group).
            if not filled and cursors.ensure(conn, OWNER_KIND, queue.id, group, "all", only):
                filled = True
                continue
            return []
        cur, entries = claimed
        if cur.lease_id is not None:  # its lease expired: that delivery failed
            expire(conn, queue, cur)
            continue
        if queue.delayed_processing and entries:
            entries = _due(entries, cur.now_ms - queue.delayed_processing * 1000)
        if not entries:
            skip.append(cur.partition_id)
            continue
        end = entries[-1].offset + 1
        lease_id = None
        if auto_ack:
            cursors.commit(conn, cur, end, release=True, consumed=len(entries))
            counters.add(conn, queue.id, acked=len(entries))
        else:
            lease_id, _ = cursors.grant(conn, cur, end, queue.lease_time, entries[-1].id)
        return _messages(queue.name, cur.partition, cur.partition_id, cur.group, entries, lease_id, cur.retry_count)


def _due(entries: list[Entry], cutoff_ms: int) -> list[Entry]:
    """The leading entries pushed at or before the cutoff (delayed processing keeps order)."""
    return list(takewhile(lambda e: e.ts_ms <= cutoff_ms, entries))


def expire(conn: psycopg.Connection, queue: queues.Queue, cur: cursors.Cursor) -> bool:
    """An expired lease is a failed delivery; True when it sent the batch to the dead letters."""
    return _fail(conn, queue, cur, cur.committed, cur.retry_count + 1, "lease expired")


def _fail(conn: psycopg.Connection, queue: queues.Queue, cur: cursors.Cursor, start: int, retries: int,
          error: str | None) -> bool:
    end = cur.batch_end if cur.batch_end is not None else start
    if retries > queue.retry_limit and end > start:
        if queue.dlq_after_max_retries:
            _dead_letter(conn, queue, cur, start, end, retries - 1, error)
        cursors.commit(conn, cur, end, release=True, consumed=0)
        return True
    cursors.release(conn, cur, retry_count=retries, delay_ms=queue.retry_delay_ms)
    return False


def _dead_letter(conn: psycopg.Connection, queue: queues.Queue, cur: cursors.Cursor, start: int, end: int,
                 retries: int, error: str | None) -> None:
    entries = cursors.read_window(conn, cur.partition_id, start, end - start, end)
    if not entries:
        return
    conn.execute(  # stored and counted in one statement
        "WITH dead AS (INSERT INTO pq_dead_letters (tenant_id, queue_id, partition_id, consumer_group, \"offset\","
        " transaction_id, message_id, headers, payload, created_at, retry_count, error)"
        " SELECT %s, %s, %s, %s, o, t, m, h, d, to_timestamp(ts / 1000.0), %s, %s"
        " FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::bytea[], %s::bytea[], %s::bigint[])"
        " AS u(o, t, m, h, d, ts) RETURNING queue_id)"
        " SELECT pq_count(queue_id, 0, 0, 0, count(*), 0) FROM dead GROUP BY queue_id",
        (queue.tenant_id, queue.id, cur.partition_id, cur.group, retries, error,
         [e.offset for e in entries], [e.id for e in entries], [e.key for e in entries],
         [e.headers for e in entries], [e.payload for e in entries], [e.ts_ms for e in entries]),
    )


# ---- acks ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ack:
    lease_id: str
    status: str | None = "completed"
    transaction_id: str | None = None   # None: the whole leased batch
    partition_id: str | None = None
    consumer_group: str | None = None
    error: str | None = None


def _holder(conn: psycopg.Connection, tenant_id: str, lease_id: str, partition_id: str | None,
            group: str | None) -> cursors.Cursor:
    """The live lease's cursor, locked; a stale, foreign or mismatched lease changes nothing."""
    cur = cursors.held(conn, lease_id)
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
    if upto > cur.committed:
        cursors.commit(conn, cur, upto, release=False)
    # A nack fails the uncommitted rest of the lease: those records count as failed.
    counters.add(conn, cur.owner_id, acked=upto - cur.committed, failed=max((cur.batch_end or upto) - upto, 0))
    retries = (0 if upto > cur.committed else cur.retry_count) + 1
    error = next((a.error for a in acks if a.error), None)
    dlq = _fail(conn, queues.by_id(conn, cur.owner_id), cur, upto, retries, error)
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
    try:
        uuid.UUID(str(first.lease_id))
    except ValueError:
        return None
    txs = [a.transaction_id for a in group]
    done = conn.execute(_ACK, (str(first.lease_id), tenant_id, int(pid) if pid else None, first.consumer_group,
                               None if None in txs else txs)).fetchone()
    if done is None:
        return None
    return done[0], {"count": done[1], "lease_released": True, "dlq": False}


# The usual ack: commit the whole lease, release it and count it, in one round trip (migration 0004).
_ACK = "SELECT * FROM pq_ack(%s::uuid, %s::uuid, %s::bigint, %s::text, %s::text[])"


def ack_one_statement(conn: psycopg.Connection, tenant_id: str, acks: list[Ack]) -> list[dict[str, Any]] | None:
    """The usual ack (one lease, all completed, naming the whole lease or its last message) as one
    statement, safe on an autocommit connection; None (nothing changed) when `ack` must decide."""
    lease_id = str(acks[0].lease_id)
    if any(str(a.lease_id) != lease_id or str(a.partition_id) != str(acks[0].partition_id) for a in acks):
        return None
    fast = _commit_whole(conn, tenant_id, acks[0], acks)
    if fast is None:
        return None
    return _ack_results(acks, {lease_id: fast[0]}, {lease_id: fast[1]})


def _ack_results(acks: list[Ack], partition_of: dict[str, int],
                 settled: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [{
        "transactionId": a.transaction_id,
        "leaseId": str(a.lease_id),
        "partitionId": str(partition_of[str(a.lease_id)]),
        "status": "completed" if is_ok(a.status) else "failed",
        "success": True,
        "dlq": settled[str(a.lease_id)]["dlq"],
        "leaseReleased": settled[str(a.lease_id)]["lease_released"],
    } for a in acks]


def ack(conn: psycopg.Connection, tenant_id: str, acks: list[Ack]) -> list[dict[str, Any]]:
    """Acks, grouped by lease; all or nothing (one refused lease refuses the call).
    One result per ack, in input order."""
    by_lease: dict[str, list[Ack]] = {}
    for a in acks:
        by_lease.setdefault(str(a.lease_id), []).append(a)
    partition_of: dict[str, int] = {}
    settled: dict[str, dict[str, Any]] = {}
    for lease_id in sorted(by_lease):  # a fixed lock order: concurrent batch acks cannot deadlock
        group = by_lease[lease_id]
        first = group[0]
        if any(a.partition_id is not None and str(a.partition_id) != str(first.partition_id) for a in group):
            raise Conflict("lease is not held: it expired, was released, or is not yours", code="invalid_lease")
        fast = _commit_whole(conn, tenant_id, first, group)
        if fast is not None:
            partition_of[lease_id], settled[lease_id] = fast
            continue
        cur = _holder(conn, tenant_id, lease_id, first.partition_id, first.consumer_group)
        partition_of[lease_id], settled[lease_id] = cur.partition_id, _settle(conn, cur, group)
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
    cursors.commit(conn, cur, upto, release=False, consumed=len(entries))
    counters.add(conn, cur.owner_id, acked=len(entries))
    return {"success": True, "count": len(entries), "lease_released": False, "dlq": False}


def extend(conn: psycopg.Connection, tenant_id: str, lease_id: str, seconds: float | None) -> dict[str, Any]:
    """A live lease expires `seconds` from now (the queue's leaseTime when not given)."""
    cur = _holder(conn, tenant_id, lease_id, None, None)
    if seconds is None:
        seconds = queues.by_id(conn, cur.owner_id).lease_time
    expires = cursors.extend(conn, cur, seconds)
    return {"leaseId": str(lease_id), "leaseExpiresAt": expires.isoformat().replace("+00:00", "Z"),
            "partitionId": str(cur.partition_id)}
