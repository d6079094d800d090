"""Consumer dispatch: queues with a `consumer` get their messages delivered to a function in batches.

Each batch is claimed with the consumer's visibility timeout, handed to the function, and acked
(archived or deleted) when the function succeeds. A failure leaves the batch to come back after
the timeout and records `last_error`. At most `concurrency` batches of a queue are in the hands of
its function at once, across every overlapping dispatcher run: each in-flight batch holds one of
the queue's `concurrency` advisory-lock slots.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import psycopg

from .. import config, db
from ..messages import engine

# A function gets {"queue": name, "messages": [...]} and raises (or returns an error) on failure.
Invoker = Callable[[str, dict[str, Any]], None]

_LOCK_SPACE = 0x5042  # advisory-lock namespace for consumer slots ("PB")
MAX_CONCURRENCY = 10


@dataclass(frozen=True)
class ConsumerQueue:
    ref: engine.QueueRef
    name: str
    function_name: str
    batch_size: int
    concurrency: int
    visibility_timeout_sec: int | None
    ack: str


def consumer_queues() -> list[ConsumerQueue]:
    with db.transaction() as conn:
        rows = conn.execute(
            "SELECT id, visibility_timeout_sec, max_reads, dead_letter_queue_id, name, consumer FROM queues"
            " WHERE consumer IS NOT NULL AND (consumer->>'enabled')::boolean IS NOT FALSE"
            " AND coalesce(consumer->>'function_name', '') <> '' ORDER BY id"
        ).fetchall()
    out = []
    for qid, vt, max_reads, dlq, name, c in rows:
        out.append(ConsumerQueue(
            ref=engine.QueueRef(qid, vt, max_reads, dlq),
            name=name,
            function_name=c["function_name"],
            batch_size=int(c.get("batch_size") or 10),
            concurrency=int(c.get("concurrency") or 1),
            visibility_timeout_sec=c.get("visibility_timeout_sec"),
            ack=c.get("ack") or "archive",
        ))
    return out


def _record(conn: psycopg.Connection, queue_id: int, error: str) -> None:
    with conn.transaction():
        conn.execute(
            "UPDATE queues SET consumer_last_error = %s WHERE id = %s AND consumer_last_error <> %s",
            (error[:1000], queue_id, error[:1000]),
        )


def deliver_one_batch(conn: psycopg.Connection, queue: ConsumerQueue, invoke: Invoker) -> int:
    """Claim one batch, invoke, ack on success. Returns how many messages were delivered (0 = none).

    `conn` is in autocommit mode; the claim and the ack are each their own short transaction, so no
    transaction stays open while the function runs.
    """
    with conn.transaction():
        batch = engine.read(conn, queue.ref, queue.batch_size, queue.visibility_timeout_sec)
    if not batch:
        return 0
    payload = {"queue": queue.name, "messages": [m.as_dict() for m in batch]}
    try:
        invoke(queue.function_name, payload)
    except Exception as exc:  # the function failed: its batch comes back after the timeout
        _record(conn, queue.ref.id, f"{type(exc).__name__}: {exc}")
        return 0
    ids = [m.msg_id for m in batch]
    with conn.transaction():
        (engine.archive if queue.ack == "archive" else engine.delete)(conn, queue.ref.id, ids)
    _record(conn, queue.ref.id, "")
    return len(batch)


def _serve_slot(queue: ConsumerQueue, slot: int, invoke: Invoker, deadline: float) -> int:
    """Hold one of the queue's slots (if free) and deliver batches until empty, failing or out of time."""
    key = queue.ref.id * 16 + slot
    delivered = 0
    with db.connection() as conn:
        if not conn.execute("SELECT pg_try_advisory_lock(%s, %s)", (_LOCK_SPACE, key)).fetchone()[0]:
            return 0
        try:
            while time.monotonic() < deadline:
                n = deliver_one_batch(conn, queue, invoke)
                if n == 0:
                    break
                delivered += n
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s, %s)", (_LOCK_SPACE, key))
    return delivered


def dispatch(invoke: Invoker, budget_s: float = 40.0, workers: int | None = None) -> int:
    """One dispatcher run over every queue with an enabled consumer; returns messages delivered.

    Slots are served by at most `workers` threads (the pool's size by default), each holding one
    connection, so the run never waits on its own pool.
    """
    deadline = time.monotonic() + budget_s
    tasks = [(q, slot) for q in consumer_queues() for slot in range(min(q.concurrency, MAX_CONCURRENCY))]
    if not tasks:
        return 0
    workers = workers or max(1, config.settings().pool_max)
    with ThreadPoolExecutor(max_workers=min(workers, len(tasks)), thread_name_prefix="consumer") as pool:
        return sum(pool.map(lambda t: _serve_slot(t[0], t[1], invoke, deadline), tasks))
