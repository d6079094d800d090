"""Publishing: validate against the database clock, replay idempotent repeats, enforce the backlog
cap, append the records to the stream's log and index them, hand available ones to subscriptions.

The stream row is locked for the whole publish, so an idempotency key cannot be used twice by two
racing publishers and the backlog check cannot be overtaken.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from .. import jsoncodec, wakeup
from ..errors import Invalid, TooLarge, TooManyRequests
from ..log_engine import store
from ..log_engine.frames import Entry, Record
from . import catalog, delivery, lifecycle, messages
from .access import Project
from .durations import default_max_backlog


@dataclass(frozen=True)
class Outgoing:
    payload: Any
    key: str | None = None
    headers: dict[str, Any] | None = None
    idempotency_key: str | None = None
    deliver_at: datetime | None = None
    expires_at: datetime | None = None


def encode(value: Any) -> bytes:
    return jsoncodec.dumps(value)


def max_backlog(stream: catalog.Stream) -> int | None:
    return stream.max_backlog if stream.max_backlog is not None else default_max_backlog()


def backlog(conn: psycopg.Connection, stream: catalog.Stream) -> int:
    """Undelivered messages: scheduled ones plus what the slowest subscription still has to ack
    (every available message when the stream has no subscription)."""
    slowest = conn.execute(
        "SELECT max(pending) FROM stream_subscriptions WHERE stream_id = %s", (stream.id,)
    ).fetchone()[0]
    return stream.scheduled + (slowest if slowest is not None else stream.available)


def _validate(out: Outgoing, now: datetime, retention_ms: int | None, max_bytes: int) -> None:
    if out.expires_at is not None and out.expires_at <= now:
        raise Invalid("expires_at is in the past.", code="invalid_expires_at")
    if out.deliver_at is not None and out.expires_at is not None and out.expires_at <= out.deliver_at:
        raise Invalid("expires_at must be later than deliver_at.", code="invalid_expires_at")
    if (out.deliver_at is not None and retention_ms is not None
            and (out.deliver_at - now).total_seconds() * 1000 > retention_ms):
        raise Invalid("deliver_at is further away than the stream's retention.", code="invalid_deliver_at")
    if len(encode(out.payload)) > max_bytes:
        raise TooLarge(f"payload is larger than {max_bytes} bytes.", code="payload_too_large")


def _plan_max_bytes(conn: psycopg.Connection, tenant_id: str) -> int:
    return conn.execute(
        "SELECT p.max_message_bytes FROM tenants t JOIN plans p ON p.name = t.plan WHERE t.id = %s", (tenant_id,)
    ).fetchone()[0]


def publish(conn: psycopg.Connection, tenant_id: str, project: Project, name: str,
            batch: list[Outgoing]) -> tuple[catalog.Stream, list[tuple[dict[str, Any], bool]]]:
    """(the stream, [(message document, replayed)] in input order); creates the stream if needed."""
    stream, _ = catalog.find_or_create(conn, tenant_id, project, name)
    now = conn.execute("SELECT clock_timestamp()").fetchone()[0]
    retention = lifecycle.retention_ms(stream)
    max_bytes = _plan_max_bytes(conn, tenant_id)
    for out in batch:
        _validate(out, now, retention, max_bytes)

    earlier = messages.by_idempotency_keys(conn, stream.id, [o.idempotency_key for o in batch if o.idempotency_key])
    fresh: list[int] = []                 # input indexes appended now
    same_as: dict[int, int] = {}          # input index -> earlier input index with the same idempotency key
    first_with: dict[str, int] = {}
    for i, out in enumerate(batch):
        key = out.idempotency_key
        if key is not None and key in first_with:
            same_as[i] = first_with[key]
        elif key is None or key not in earlier:
            fresh.append(i)
            if key is not None:
                first_with[key] = i

    found: dict[int, tuple[messages.Row, Entry]] = {}   # input index -> (row, record)
    if fresh:
        limit = max_backlog(stream)
        if limit is not None and backlog(conn, stream) >= limit:
            raise TooManyRequests(f"stream {name} has reached its backlog cap of {limit} undelivered messages",
                                  code="backlog_full")
        outs = [batch[i] for i in fresh]
        records = [Record(encode(o.payload), key=o.key, headers=encode(o.headers) if o.headers is not None else None)
                   for o in outs]
        appended = store.append(conn, stream.partition_id, records)
        values = []
        for out, offset in zip(outs, appended.offsets, strict=True):
            scheduled = out.deliver_at is not None and out.deliver_at > now
            values.append((offset, messages.new_id(), out.key, messages.unit_of(out.key, offset),
                           "scheduled" if scheduled else "available", out.idempotency_key, out.deliver_at,
                           out.expires_at))
        inserted = messages.insert(conn, stream.id, values)
        for i, row, record in zip(fresh, inserted, records, strict=True):
            found[i] = (row, Entry(row.offset, 0, "", record.key, record.headers, record.payload))
        ready = [(r.offset, r.unit) for r in inserted if r.status == "available"]
        catalog.count(conn, stream.id, messages=len(inserted), scheduled=len(inserted) - len(ready),
                      available=len(ready))
        delivery.enqueue(conn, stream.id, ready)
        if ready:
            wakeup.notify(conn, [lifecycle.channel(stream.id)])

    if earlier:
        entries = messages.entries_at(conn, stream.partition_id, [r.offset for r in earlier.values()])
        for i, out in enumerate(batch):
            row = earlier.get(out.idempotency_key) if out.idempotency_key is not None else None
            if row is not None and i not in same_as and row.offset in entries:
                found[i] = (row, entries[row.offset])
    for i, j in same_as.items():
        found[i] = found[j]

    answers, fresh_set = [], set(fresh)
    for i in range(len(batch)):
        row, entry = found[i]
        answers.append((messages.document(stream, row, entry), i not in fresh_set))
    return stream, answers
