"""Long-poll wake-ups shared by every surface: a waiter LISTENs on a channel; a writer NOTIFYs
that channel only if someone is registered as waiting on it.

NOTIFY is only a hint: waiters also re-check on a short period, which catches what no write
announces (a visibility timeout or a lease running out, a delayed message coming due).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

import psycopg

from . import db


def notify(conn: psycopg.Connection, channels: Iterable[str]) -> None:
    """Within the writer's transaction: wake the waiters of these channels, if any are registered."""
    names = list(dict.fromkeys(channels))
    if not names:
        return
    conn.execute(
        "SELECT pg_notify(w.channel, '') FROM (SELECT DISTINCT channel FROM waiters"
        " WHERE channel = ANY(%s) AND until > clock_timestamp()) w",
        (names,),
    )


def wait(channels: Iterable[str], timeout_s: float) -> bool:
    """Wait up to `timeout_s` for a notification on any of `channels`; True if woken by one."""
    names = list(dict.fromkeys(channels))
    waiter = uuid.uuid4()
    with db.connection() as conn:
        try:
            conn.execute(
                "INSERT INTO waiters (channel, waiter, until)"
                " SELECT c, %s, clock_timestamp() + %s * interval '1 second' FROM unnest(%s::text[]) c",
                (waiter, timeout_s + 1, names),
            )
            for name in names:
                conn.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(name)))
            return any(True for _ in conn.notifies(timeout=timeout_s, stop_after=1))
        finally:
            conn.execute("UNLISTEN *")
            conn.execute("DELETE FROM waiters WHERE waiter = %s", (waiter,))
