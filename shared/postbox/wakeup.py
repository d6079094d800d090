"""Long polling, one implementation for every surface: a waiter LISTENs on a channel; a writer
NOTIFYs that channel only if someone is registered as waiting on it (an unconditional NOTIFY
would serialise every writer's commit).

NOTIFY is only a hint: `long_poll` also re-checks on a short period, which catches what no write
announces (a visibility timeout or a lease running out, a delayed message coming due).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterable
from typing import TypeVar

import psycopg

from . import config, db

T = TypeVar("T")

RECHECK_SECONDS = 1.0  # the longest a waiter sleeps between two looks, woken or not
AWS_MAX_WAIT_SECONDS = 25.0  # inside API Gateway's 30 s integration timeout


# Channel kinds; the SQL functions that notify build the same `<kind>_<id>` names.
QUEUE = "queue"  # a message engine queue (queues surface)
PARTITIONED = "pq"  # a partitioned queue, any of its partitions
KEYED_STREAM = "stream"  # a keyed stream
DURABLE = "durable"  # a durable stream


def channel(kind: str, ident: int | str) -> str:
    """The one channel name for a resource: what a writer notifies and a waiter listens on."""
    return f"{kind}_{ident}"


def max_wait_seconds() -> float:
    """The longest any request may wait: POSTBOX_LONG_POLL_MS, kept inside API Gateway's timeout."""
    seconds = config.settings().long_poll_ms / 1000.0
    if "AWS_LAMBDA_FUNCTION_NAME" in os.environ:
        seconds = min(seconds, AWS_MAX_WAIT_SECONDS)
    return seconds


def long_poll(
    attempt: Callable[[], tuple[T, Iterable[str]]],
    timeout_s: float,
    *,
    done: Callable[[T], bool] = bool,
    recheck_s: float = RECHECK_SECONDS,
) -> T:
    """Call `attempt` until its result is `done` or `timeout_s` (bounded by `max_wait_seconds`)
    has passed, sleeping between tries until a NOTIFY on the channels the attempt names, or at most
    `recheck_s`. `attempt` returns (result, channels to wait on); the last result is returned."""
    deadline = time.monotonic() + max(0.0, min(timeout_s, max_wait_seconds()))
    while True:
        result, channels = attempt()
        remaining = deadline - time.monotonic()
        if done(result) or remaining <= 0:
            return result
        wait(channels, min(remaining, recheck_s))


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
    if not names:
        time.sleep(max(0.0, timeout_s))
        return False
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
