"""Push: items grouped by (queue, partition), one log segment per group, on an open connection,
in one round trip (the SQL function pq_push; framing and compression stay here).

Callable inside a larger transaction (the `transaction` route, a streaming cycle): nothing here
commits. Partitions are locked in (queue, partition) order so concurrent pushers never deadlock.
"""

from __future__ import annotations

import bisect
import itertools
import os
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import psycopg

from ..db import domain_errors
from ..errors import Invalid, TooLarge
from ..inputs import MAX_REQUEST_BYTES
from ..log_engine import cursors
from ..log_engine.frames import Record, id_hash, pack
from . import DEFAULT_PARTITION, payloads, queues

# No cap below the request's own (6 MiB, inside Lambda's synchronous payload limit): Queen caps a
# payload only by its HTTP body limit, so a push it takes is refused here only where API Gateway
# and Lambda would refuse the request anyway. A transaction or streaming cycle is held to it too.
MAX_PAYLOAD_BYTES = MAX_REQUEST_BYTES
MAX_ID_LENGTH = 256


class Item(NamedTuple):
    queue: str
    payload: Any = None
    partition: str = DEFAULT_PARTITION
    transaction_id: str | None = None
    message_id: str | None = None


_RAND_B = (1 << 62) - 1
_LOW_48 = (1 << 48) - 1
_last = [0, 0]  # the last id's (milliseconds, 74-bit sequence) of this process
_last_lock = threading.Lock()


def uuid7s(n: int) -> list[str]:
    """`n` UUIDs (version 7) that sort in the order they are made in this process: 48 bits of
    milliseconds, then 74 bits (12 of `rand_a`, 62 of `rand_b`) holding a sequence that starts at a
    random point below the middle and counts up (RFC 9562's monotonic method 2). A consumer that sorts
    a partition's batch by (createdAt, id), as Queen's streaming SDK does, sees the push order; a
    clock step back keeps the last millisecond, so the order holds then too. Formatted as text
    directly (uuid.UUID objects cost more than the rest of a push)."""
    now = time.time_ns() // 1_000_000 & 0xFFFFFFFFFFFF
    start = int.from_bytes(os.urandom(9), "big") >> 1  # 71 bits: room for ~2^73 ids in one millisecond
    with _last_lock:
        if now > _last[0]:
            _last[0], _last[1] = now, start
        else:
            now = _last[0]
        seq = _last[1]
        _last[1] = seq + n
    head = f"{now:012x}"
    head = f"{head[:8]}-{head[8:]}-7"
    low = seq & _LOW_48
    if low + n <= _LOW_48:  # the usual case: only the last 48 bits differ within the call
        prefix = f"{head}{seq >> 62:03x}-{0x8000 | ((seq & _RAND_B) >> 48):04x}-"
        return [f"{prefix}{x:012x}" for x in range(low, low + n)]
    out = []
    for s in range(seq, seq + n):
        a, b = s >> 62, s & _RAND_B
        out.append(f"{head}{a:03x}-{0x8000 | (b >> 48):04x}-{b & _LOW_48:012x}")
    return out


def uuid7() -> str:
    return uuid7s(1)[0]


# The (tenant, queue)s last seen encrypted: records are framed with this guess and pq_push refuses
# a wrong one (nothing appended), so a stale entry costs one retry. Only encrypted queues are kept.
_encrypted: set[tuple[str, str]] = set()

_PUSH = (
    "SELECT * FROM pq_push(%b::uuid, %b::text[], %b::text[], %b::boolean[], %b::int[], %b::smallint[], %b::int[],"
    " %b::bytea[], %b::bytea[], %b::int[], %b::int[], %b::boolean)"
)


class _Group(NamedTuple):
    queue: str
    partition: str
    indexes: list[int]          # input positions, in order
    ids: list[str]              # record id (transactionId or messageId) per input
    keys: list[str]             # messageId per input
    raws: list[bytes]           # encoded payload per input
    dedup: bool
    stored: dict[bytes, int]    # id hash -> offset already in the partition (learnt from pq_push)


def _item(i: int) -> str:
    return f"items[{i}]"


def _group(tenant_id: str, items: list[Item], fresh: list[str], name: Callable[[int], str] = _item) -> list[_Group]:
    """Items by (queue, partition), sorted (the lock order), validated and encoded once; `name`
    says which item a refusal is about."""
    by_key: dict[tuple[str, str], list[int]] = {}
    for i, item in enumerate(items):
        by_key.setdefault((item.queue, item.partition or DEFAULT_PARTITION), []).append(i)
    out = []
    encode = payloads.encode
    for qname, pname in sorted(by_key):
        queues.check_name(qname)
        queues.check_partition(pname)
        indexes = by_key[(qname, pname)]
        ids, keys, raws = [], [], []
        for i in indexes:
            item = items[i]
            tid, mid = item.transaction_id, item.message_id
            if tid is not None and not 0 < len(tid) <= MAX_ID_LENGTH:
                raise Invalid(f"{name(i)}.transactionId: must be 1-{MAX_ID_LENGTH} characters")
            if mid is not None and not 0 < len(mid) <= MAX_ID_LENGTH:
                raise Invalid(f"{name(i)}.messageId: must be 1-{MAX_ID_LENGTH} characters")
            raw = encode(item.payload)
            if len(raw) > MAX_PAYLOAD_BYTES:
                raise TooLarge(f"{name(i)}.payload: over {MAX_PAYLOAD_BYTES} bytes")
            mid = mid or fresh[i]
            ids.append(tid or mid)
            keys.append(mid)
            raws.append(raw)
        out.append(_Group(qname, pname, indexes, ids, keys, raws,
                          any(items[i].transaction_id for i in indexes), {}))
    return out


def push_each(conn: psycopg.Connection, tenant_id: str, batches: list[list[Item]]) -> list[list[dict[str, Any]]]:
    """Several pushes of one transaction as one: `push`'s results per batch, each batch's items
    indexed (and named in a refusal) as its own. One call locks the partitions of them all in the
    lock order, where pushes made one after another lock them in the order given, and two
    transactions pushing to the same partitions in opposite orders would deadlock."""
    starts = [0]
    for batch in batches:
        starts.append(starts[-1] + len(batch))
    if not starts[-1]:
        return [[] for _ in batches]

    def local(i: int) -> int:
        return i - starts[bisect.bisect_right(starts, i) - 1]

    results = push(conn, tenant_id, [item for batch in batches for item in batch],
                   name=lambda i: _item(local(i)))
    return [[{**r, "index": local(r["index"])} for r in results[start:end]]
            for start, end in itertools.pairwise(starts)]


def push(conn: psycopg.Connection, tenant_id: str, items: list[Item], *, notify: bool = True,
         name: Callable[[int], str] = _item) -> list[dict[str, Any]]:
    """Append the items; one result per item, in input order: `queued` with its offset, or
    `duplicate` (same transactionId in the partition) with the offset of the message it repeats.
    One round trip (pq_push) in the usual case; works in autocommit or inside a transaction."""
    groups = _group(tenant_id, items, uuid7s(len(items)), name)
    while True:
        encrypted = [(tenant_id, g.queue) in _encrypted for g in groups]
        plans = [_plan(g, enc) for g, enc in zip(groups, encrypted, strict=True)]
        hashes, hash_groups, hash_positions = [], [], []
        for k, (g, plan) in enumerate(zip(groups, plans, strict=True), start=1):
            if g.dedup:
                hashes += [plan.hashes[j] for j in plan.keep]
                hash_groups += [k] * len(plan.keep)
                hash_positions += range(len(plan.keep))
        packed = [pack([plan.records[j] for j in plan.keep]) if plan.keep else (0, None, 0) for plan in plans]
        with domain_errors():
            rows = conn.execute(_PUSH, (
                tenant_id, [g.queue for g in groups], [g.partition for g in groups], encrypted,
                [len(p.keep) for p in plans], [c for c, _, _ in packed], [r for _, _, r in packed],
                [f for _, f, _ in packed], hashes if any(g.dedup for g in groups) else None, hash_groups,
                hash_positions, notify,
            )).fetchall()
        retry = False
        for kind, k, _, offset, h, flag in rows:
            if kind == "encryption":
                (_encrypted.add if flag else _encrypted.discard)((tenant_id, groups[k - 1].queue))
                retry = True
            elif kind == "duplicate":
                groups[k - 1].stored[bytes(h)] = offset
                retry = True
        if not retry:
            appended = {r[1]: (r[2], r[3]) for r in rows}
            return _results(items, groups, plans, appended, _stored_keys(conn, plans, appended))


class _Plan(NamedTuple):
    records: list[Record]
    hashes: list[bytes]
    keep: list[int]                 # positions in the group that get appended
    repeats: dict[int, int]         # position -> position of its first copy in this call
    stored: dict[int, int]          # position -> offset already stored


def _plan(g: _Group, encrypted: bool) -> _Plan:
    """The group's records framed for this encryption setting, minus known duplicates."""
    if encrypted:
        records = [Record(payloads.seal(raw), id=rid, key=key, headers=payloads.ENCRYPTED)
                   for raw, rid, key in zip(g.raws, g.ids, g.keys, strict=True)]
    else:
        records = list(map(Record, g.raws, g.ids, g.keys))
    if not g.dedup:
        return _Plan(records, [], list(range(len(records))), {}, {})
    hashes = [id_hash(rid) for rid in g.ids]
    keep: list[int] = []
    first: dict[bytes, int] = {}
    repeats: dict[int, int] = {}
    stored: dict[int, int] = {}
    for n, h in enumerate(hashes):
        if h in g.stored:
            stored[n] = g.stored[h]
        elif h in first:
            repeats[n] = first[h]
        else:
            first[h] = n
            keep.append(n)
    return _Plan(records, hashes, keep, repeats, stored)


def _stored_keys(conn: psycopg.Connection, plans: list[_Plan],
                 appended: dict[int, tuple[int, int]]) -> dict[tuple[int, int], str]:
    """The messageId of each message an item repeats that was stored before this call, by
    (partition id, offset): a duplicate answers the id it was first given. Read only when a push
    repeats a stored transactionId, so the usual push stays one round trip."""
    out: dict[tuple[int, int], str] = {}
    for k, plan in enumerate(plans, start=1):
        pid = appended[k][0]
        for offset in sorted(set(plan.stored.values())):
            for entry in cursors.read_window(conn, pid, offset, 1, offset + 1):
                out[(pid, entry.offset)] = entry.key or entry.id
    return out


def _results(items: list[Item], groups: list[_Group], plans: list[_Plan],
             appended: dict[int, tuple[int, int]], stored_keys: dict[tuple[int, int], str]) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = [{} for _ in items]
    for k, (g, plan) in enumerate(zip(groups, plans, strict=True), start=1):
        pid, first = appended[k]
        offsets: dict[int, int] = {n: first + m for m, n in enumerate(plan.keep)}
        for n, i in enumerate(g.indexes):
            duplicate = n not in offsets
            key = g.keys[n]
            if n in plan.stored:
                key = stored_keys.get((pid, plan.stored[n]), key)
            elif n in plan.repeats:
                key = g.keys[plan.repeats[n]]
            results[i] = {
                "index": i,
                "queue": g.queue,
                "partition": g.partition,
                "partitionId": str(pid),
                "transactionId": g.ids[n],
                "messageId": key,
                "status": "duplicate" if duplicate else "queued",
                "offset": offsets[n] if not duplicate else plan.stored.get(n, offsets.get(plan.repeats.get(n, -1))),
            }
    return results
