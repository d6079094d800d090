"""Reads by offset (Queen's `fetch`): records of named partitions from an offset, with no lease, no
cursor and nothing to ack. On an open connection; reads only.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import psycopg

from ..log_engine import cursors
from . import OWNER_KIND, payloads, queues
from .shapes import iso

MAX_RECORDS = 1000  # per entry and call; a reader asks again from one past the last record
OFFSET_OUT_OF_RANGE = "OFFSET_OUT_OF_RANGE"
UNKNOWN_TOPIC_OR_PARTITION = "UNKNOWN_TOPIC_OR_PARTITION"


class FetchEntry(NamedTuple):
    queue: str
    partition: str
    offset: int = 0
    max_bytes: int | None = None


_PARTITION = """
SELECT p.id, p.start_offset, p.next_offset FROM log_partitions p JOIN pq_queues q ON q.id = p.owner_id
WHERE q.tenant_id = %s AND q.name = %s AND p.owner_kind = %s AND p.name = %s
"""


def fetch(conn: psycopg.Connection, tenant_id: str, entries: list[FetchEntry], max_bytes: int) -> list[dict[str, Any]]:
    """One answer per entry, in order: `records` from its offset (at most MAX_RECORDS, and payload
    bytes within the entry's and the call's budget, at least one record when any is there), with the
    partition's `highWatermark` (next offset) and `logStartOffset` (oldest kept). An unknown queue or
    partition answers UNKNOWN_TOPIC_OR_PARTITION, an offset outside the kept range
    OFFSET_OUT_OF_RANGE; neither is an error of the call."""
    budget = max_bytes
    out = []
    for entry in entries:
        queues.check_name(entry.queue)
        row = conn.execute(_PARTITION, (tenant_id, entry.queue, OWNER_KIND, entry.partition)).fetchone()
        if row is None:
            out.append({"queue": entry.queue, "partition": entry.partition, "records": [], "highWatermark": 0,
                        "logStartOffset": 0, "error": UNKNOWN_TOPIC_OR_PARTITION})
            continue
        pid, start, end = row
        answer: dict[str, Any] = {"queue": entry.queue, "partition": entry.partition, "records": [],
                                  "highWatermark": end, "logStartOffset": start}
        if entry.offset < start or entry.offset > end:
            answer["error"] = OFFSET_OUT_OF_RANGE
        elif entry.offset < end and budget > 0:
            answer["records"], spent = _read(conn, pid, entry.offset, end, min(budget, entry.max_bytes or budget))
            budget -= spent
        out.append(answer)
    return out


def _read(conn: psycopg.Connection, partition_id: int, offset: int, end: int,
          max_bytes: int) -> tuple[list[dict[str, Any]], int]:
    found = cursors.read_window(conn, partition_id, offset, MAX_RECORDS, end)
    kept, spent = [], 0
    for e in found:
        if kept and spent + len(e.payload) > max_bytes:
            break
        kept.append(e)
        spent += len(e.payload)
    values = payloads.decode_many([e.payload for e in kept], [e.headers for e in kept])
    return [{"offset": e.offset, "transactionId": e.id, "messageId": e.key, "payload": value, "ts": iso(e.ts_ms)}
            for e, value in zip(kept, values, strict=True)], spent
