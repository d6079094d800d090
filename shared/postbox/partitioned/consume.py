"""Pop with leases, on an open connection: the next batch of a partition for a consumer group.

Within a partition and consumer group one lease exists at a time and batches follow the log's
order; partitions and groups are served in parallel. The usual pop is one SQL call (`pq_pop`);
expired leases (a failed delivery, decided by `failures`) and delayed queues take `lease`.
Acks and extensions are in `acks` (their names are kept here for callers). Nothing here commits.
"""

from __future__ import annotations

from datetime import datetime
from itertools import takewhile
from typing import Any

import psycopg

from .. import db
from ..db import domain_errors
from ..errors import Invalid, NotFound
from ..log_engine import cursors, leases, store
from ..log_engine.frames import Entry
from . import OWNER_KIND, counters, queues
from .acks import Ack, ack, ack_lease, ack_one_statement, check_partition, extend, require_live
from .failures import expire
from .shapes import OK_STATUSES, is_ok, iso, messages

__all__ = ["MAX_BATCH", "OK_STATUSES", "Ack", "ack", "ack_lease", "ack_one_statement", "check_partition", "expire",
           "extend", "is_ok", "iso", "lease", "pop", "require_live"]

MAX_BATCH = 10_000

_groups_seen: set[tuple[int, str]] = set()  # (queue, group) known to be in pq_groups (committed)


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
_JOIN = "SELECT pq_lease_join(%s::uuid, %s, %s, %s::uuid)"


def pop(conn: psycopg.Connection, tenant_id: str, queue: str, partition: str | None, group: str, batch: int, *,
        start: cursors.Start = "all", auto_ack: bool = False,
        share: str | None = None) -> tuple[int, list[dict[str, Any]]]:
    """Pop on an autocommit connection: (queue id, messages). The usual case is the SQL function
    pq_pop (claim and lease in one round trip) plus one statement recording the batch's last id
    (acks name it); expired leases and delayed queues take `lease` in a transaction. `share`: the
    lease id of this pop's earlier partitions, which the batch is leased under too (one lease id
    over every partition of a multi-partition pop, as Queen's)."""
    if not 1 <= batch <= MAX_BATCH:
        raise Invalid(f"batch: must be 1-{MAX_BATCH}")
    mode, since = ("time", start) if isinstance(start, datetime) else ("new" if start == "new" else "all", None)
    with domain_errors():
        rows = conn.execute(_POP, (tenant_id, queue, partition, group, batch, mode, since, auto_ack)).fetchall()
    status, queue_id, partition_id, name, lease_id, retries, start_at, end = rows[0][:8]
    if status == "empty":
        return queue_id, []
    if status == "slow":
        def slow(conn: psycopg.Connection) -> list[dict[str, Any]]:
            found = queues.get(conn, tenant_id, queue)
            only = store.find_partition(conn, OWNER_KIND, found.id, partition) if partition is not None else None
            if partition is not None and only is None:
                raise NotFound(f"partition not found: {partition}")
            return lease(conn, found, group, batch, partition=only, start=start, auto_ack=auto_ack, share=share)

        return queue_id, db.transact(slow, conn)
    entries: list[Entry] = []
    cursors.cut([r[8:] for r in rows], start_at, end, end - start_at, entries)
    if lease_id is not None:
        last = entries[-1] if entries else None
        given = (lease_id, last.id if last else None, last.offset + 1 if last else None)
        if share is None:
            conn.execute(_LAST_ID, given)
        else:
            conn.execute(_JOIN, (*given, share))
            lease_id = share
    return queue_id, messages(queue, name, partition_id, group, entries, lease_id, retries)


def lease(conn: psycopg.Connection, queue: queues.Queue, group: str, batch: int, *,
          partition: store.Partition | None = None, start: cursors.Start = "all",
          auto_ack: bool = False, share: str | None = None) -> list[dict[str, Any]]:
    """Lease the next batch (up to `batch` messages) of one partition for `group`; [] when none
    is available. With `auto_ack` the cursor commits at once and no lease is held. `share`: lease
    it under that lease id (a multi-partition pop's), not a new one."""
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
            lease_id, _ = leases.grant(conn, cur, end, queue.lease_time, entries[-1].id, lease_id=share)
        return messages(queue.name, cur.partition, cur.partition_id, cur.group, entries, lease_id, cur.attempts)


def _due(entries: list[Entry], cutoff_ms: int) -> list[Entry]:
    """The leading entries pushed at or before the cutoff (delayed processing keeps order)."""
    return list(takewhile(lambda e: e.ts_ms <= cutoff_ms, entries))
