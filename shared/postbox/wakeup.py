"""Long polling, one implementation for every surface: a waiter LISTENs on a channel; a writer
NOTIFYs that channel only if someone is registered as waiting on it (an unconditional NOTIFY
would serialise every writer's commit).

NOTIFY is only a hint: `long_poll` also re-checks on a short period, which catches what no write
announces (a visibility timeout or a lease running out, a delayed message coming due).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
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
    if config.settings().on_lambda:
        seconds = min(seconds, AWS_MAX_WAIT_SECONDS)
    return seconds


def long_poll(
    attempt: Callable[[], tuple[T, Iterable[str]]],
    timeout_s: float,
    *,
    done: Callable[[T], bool] = bool,
    recheck_s: float | None = None,
) -> T:
    """Call `attempt` until its result is `done` or `timeout_s` (bounded by `max_wait_seconds`)
    has passed, sleeping between tries until a NOTIFY on the channels the attempt names, or at most
    `recheck_s` (default RECHECK_SECONDS, read at call time so a test can prove the NOTIFY path by
    making it long). `attempt` returns (result, channels to wait on); the last result is returned.

    After an empty try the waiter starts listening and tries once more before it sleeps, so a write
    that lands between the first try and the LISTEN is never missed."""
    recheck_s = RECHECK_SECONDS if recheck_s is None else recheck_s
    deadline = time.monotonic() + max(0.0, min(timeout_s, max_wait_seconds()))
    result, channels = attempt()
    while not done(result) and deadline > time.monotonic():
        listened = list(channels)
        with _listening(listened, deadline - time.monotonic()) as conn:
            result, channels = attempt()
            while not done(result) and list(channels) == listened:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return result
                _sleep(conn, min(remaining, recheck_s))
                result, channels = attempt()
    return result


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
    with _listening(channels, timeout_s) as conn:
        return _sleep(conn, timeout_s)


@contextmanager
def _listening(channels: Iterable[str], timeout_s: float) -> Iterator[psycopg.Connection | None]:
    """Register as a waiter on `channels` (so writers notify them) and LISTEN until the block ends."""
    names = list(dict.fromkeys(channels))
    if not names:
        yield None
        return
    waiter = uuid.uuid4()
    with db.listen_connection() as conn:  # on AWS a direct one: the proxy would pin a LISTEN
        if conn is None:  # none to be had: the waiter re-checks on its period alone
            yield None
            return
        try:
            for name in names:  # listening before registering: a registered waiter never misses a NOTIFY
                conn.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(name)))
            conn.execute(
                "INSERT INTO waiters (channel, waiter, until)"
                " SELECT c, %s, clock_timestamp() + %s * interval '1 second' FROM unnest(%s::text[]) c",
                (waiter, timeout_s + 1, names),
            )
            yield conn
        finally:
            _stop_listening(conn, waiter)


def _stop_listening(conn: psycopg.Connection, waiter: uuid.UUID) -> None:
    """UNLISTEN and unregister; on a connection that broke (the server went away) there is nothing
    to undo (its registration expires by itself), and the request's own outcome stands."""
    if conn.broken or conn.closed:
        return
    try:
        conn.execute("UNLISTEN *")
        conn.execute("DELETE FROM waiters WHERE waiter = %s", (waiter,))
    except psycopg.OperationalError:
        pass


def _sleep(conn: psycopg.Connection | None, timeout_s: float) -> bool:
    """Block until a notification arrives on the listening `conn` or `timeout_s` passes."""
    if conn is not None and not (conn.broken or conn.closed):
        started = time.monotonic()
        try:
            return any(True for _ in conn.notifies(timeout=max(0.0, timeout_s), stop_after=1))
        except psycopg.OperationalError:  # the listening connection broke: sleep out the period, and
            timeout_s -= time.monotonic() - started  # let the next attempt find whether the database is there
    time.sleep(max(0.0, timeout_s))
    return False
