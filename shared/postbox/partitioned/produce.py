"""Push: items grouped by (queue, partition), one log segment per group, on an open connection.

Callable inside a larger transaction (the `transaction` route, a streaming cycle): nothing here
commits. Partitions are locked in (queue, partition) order so concurrent pushers never deadlock.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass
from typing import Any

import psycopg

from .. import wakeup
from ..errors import Invalid, TooLarge
from ..log import cursors, store
from ..log.frames import Record
from . import DEFAULT_PARTITION, OWNER_KIND, payloads, queues

MAX_PAYLOAD_BYTES = 1024 * 1024
MAX_ID_LENGTH = 256


@dataclass(frozen=True)
class Item:
    queue: str
    payload: Any = None
    partition: str = DEFAULT_PARTITION
    transaction_id: str | None = None
    message_id: str | None = None


_VERSION_MASK = ~((0xF << 76) | (0x3 << 62))
_VERSION_BITS = (0x7 << 76) | (0x2 << 62)


def uuid7s(n: int) -> list[str]:
    """`n` time-ordered UUIDs (version 7): 48 bits of milliseconds, then random bits (one read of
    the OS's randomness for the lot)."""
    ms = (time.time_ns() // 1_000_000) << 80
    rand = os.urandom(10 * n)
    return [str(uuid.UUID(int=((ms | int.from_bytes(rand[10 * i : 10 * i + 10], "big")) & _VERSION_MASK)
                          | _VERSION_BITS)) for i in range(n)]


def uuid7() -> str:
    return uuid7s(1)[0]


def channel(queue_id: int) -> str:
    """The long-poll channel of a queue (pops on any of its partitions wait on it)."""
    return f"pq_{queue_id}"


def _record(queue: queues.Queue, index: int, item: Item, fresh_id: str) -> Record:
    for field, value in (("transactionId", item.transaction_id), ("messageId", item.message_id)):
        if value is not None and not 0 < len(value) <= MAX_ID_LENGTH:
            raise Invalid(f"items[{index}].{field}: must be 1-{MAX_ID_LENGTH} characters")
    raw = payloads.encode(item.payload)
    if len(raw) > MAX_PAYLOAD_BYTES:
        raise TooLarge(f"items[{index}].payload: over {MAX_PAYLOAD_BYTES} bytes")
    message_id = item.message_id or fresh_id
    if queue.encryption_enabled:
        return Record(payloads.seal(raw), id=item.transaction_id or message_id, key=message_id,
                      headers=payloads.ENCRYPTED)
    return Record(raw, id=item.transaction_id or message_id, key=message_id)


def partition_for(conn: psycopg.Connection, queue: queues.Queue, name: str) -> store.Partition:
    """The queue's partition, created on first push with a cursor for every group already reading."""
    found = store.find_partition(conn, OWNER_KIND, queue.id, name)
    return found if found is not None else _create_partition(conn, queue, name)


def _create_partition(conn: psycopg.Connection, queue: queues.Queue, name: str) -> store.Partition:
    queues.check_partition(name)
    created = store.ensure_partition(conn, queue.tenant_id, OWNER_KIND, queue.id, name)
    groups = [r[0] for r in conn.execute("SELECT consumer_group FROM pq_groups WHERE queue_id = %s", (queue.id,))]
    cursors.ensure_groups(conn, created.id, groups)
    return created


def push(conn: psycopg.Connection, tenant_id: str, items: list[Item], *, notify: bool = True) -> list[dict[str, Any]]:
    """Append the items; one result per item, in input order: `queued` with its offset, or
    `duplicate` (same transactionId in the partition) with the offset of the message it repeats."""
    groups: dict[tuple[str, str], list[int]] = {}
    for i, item in enumerate(items):
        groups.setdefault((item.queue, item.partition or DEFAULT_PARTITION), []).append(i)
    results: list[dict[str, Any]] = [{} for _ in items]
    known: dict[str, queues.Queue] = {}
    touched: set[int] = set()
    for qname, pname in sorted(groups):
        queue, row = queues.find_with_partition(conn, tenant_id, qname, pname, OWNER_KIND)
        queue = queue or known.get(qname) or queues.ensure(conn, tenant_id, qname)
        known[qname] = queue
        part = store.Partition(*row) if row else _create_partition(conn, queue, pname)
        indexes = groups[(qname, pname)]
        fresh = uuid7s(len(indexes))
        records = [_record(queue, i, items[i], fresh[n]) for n, i in enumerate(indexes)]
        dedup = any(items[i].transaction_id for i in indexes)
        appended = store.append(conn, part.id, records, dedup=dedup)
        for n, i in enumerate(indexes):
            offset = appended.offsets[n]
            duplicate = offset is None
            results[i] = {
                "index": i,
                "queue": qname,
                "partition": pname,
                "partitionId": str(part.id),
                "transactionId": records[n].id,
                "messageId": records[n].key,
                "status": "duplicate" if duplicate else "queued",
                "offset": appended.duplicates[n] if duplicate else offset,
            }
        if any(o is not None for o in appended.offsets):
            touched.add(queue.id)
    if notify:
        wakeup.notify(conn, [channel(q) for q in sorted(touched)])
    return results
