"""Long-poll wake-ups: a reader waiting on a queue LISTENs; a sender NOTIFYs only if one waits.

NOTIFY is only a hint: readers also re-check on a short period, which catches what no send
announces (a visibility timeout running out, a delayed message coming due).
"""

from __future__ import annotations

import uuid

import psycopg

from .. import db


def channel(queue_id: int) -> str:
    return f"postbox_queue_{queue_id}"


def notify_waiters(conn: psycopg.Connection, queue_id: int) -> None:
    """Within the sender's transaction: wake readers of this queue, if any are registered."""
    conn.execute(
        "SELECT pg_notify(%s, '') FROM queue_waiters"
        " WHERE queue_id = %s AND until > clock_timestamp() LIMIT 1",
        (channel(queue_id), queue_id),
    )


def wait(queue_id: int, timeout_s: float) -> bool:
    """Wait up to `timeout_s` for a send to this queue; True if woken by one."""
    waiter = uuid.uuid4()
    with db.pool().connection() as conn:
        conn.autocommit = True
        try:
            conn.execute(
                "INSERT INTO queue_waiters (queue_id, waiter, until)"
                " VALUES (%s, %s, clock_timestamp() + %s * interval '1 second')",
                (queue_id, waiter, timeout_s + 1),
            )
            conn.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel(queue_id))))
            woken = any(True for _ in conn.notifies(timeout=timeout_s, stop_after=1))
            return woken
        finally:
            conn.execute("UNLISTEN *")
            conn.execute("DELETE FROM queue_waiters WHERE queue_id = %s AND waiter = %s", (queue_id, waiter))
            conn.autocommit = False
