"""Long polling, one implementation for every surface: a waiter is woken by a NOTIFY on the channels
it names; a writer NOTIFYs a channel only if someone is registered as waiting on it (an
unconditional NOTIFY would serialise every writer's commit).

A waiting request holds no database connection: the process LISTENs on one connection of its own
(`postbox.listener`), and each try borrows a pooled connection for its one query. It holds one of its
caller's wait slots (`postbox.wait_slots`: over the caller's cap it is refused at once).

NOTIFY is only a hint: `long_poll` also re-checks on a short period, which catches what no write
announces (a visibility timeout or a lease running out, a delayed message coming due).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from typing import TypeVar

import psycopg

from . import config, listener, wait_slots
from .wait_slots import Caller

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
    """The longest any request may wait: POSTBOX_LONG_POLL_MS, on AWS behind API Gateway also inside
    its HTTP API's 30 s integration timeout. Behind function URLs only the function's own timeout
    bounds a request, and a stack keeps POSTBOX_LONG_POLL_MS below it (`longPollMs`)."""
    settings = config.settings()
    seconds = settings.long_poll_ms / 1000.0
    if settings.on_lambda and not settings.function_url_door:
        seconds = min(seconds, AWS_MAX_WAIT_SECONDS)
    return seconds


def long_poll(
    attempt: Callable[[], tuple[T, Iterable[str]]],
    timeout_s: float,
    *,
    caller: Caller | None,
    done: Callable[[T], bool] = bool,
    recheck_s: float | None = None,
) -> T:
    """Call `attempt` until its result is `done` or `timeout_s` (bounded by `max_wait_seconds`)
    has passed, sleeping between tries until a NOTIFY on the channels the attempt names, or at most
    `recheck_s` (default RECHECK_SECONDS, read at call time so a test can prove the NOTIFY path by
    making it long). `attempt` returns (result, channels to wait on); the last result is returned.

    A first try that is not `done` goes to wait as one of `caller`'s waits (TooManyRequests over its
    cap); `caller` None: the request holds its caller's slot already (an open SSE answer). The waiter
    is listened for before it tries again and sleeps, so a write that lands between the first try and
    the LISTEN is never missed."""
    recheck_s = RECHECK_SECONDS if recheck_s is None else recheck_s
    deadline = time.monotonic() + max(0.0, min(timeout_s, max_wait_seconds()))
    result, channels = attempt()
    if done(result) or deadline <= time.monotonic():
        return result
    slot = wait_slots.held(caller, deadline - time.monotonic()) if caller is not None else nullcontext()
    with slot:
        while not done(result) and deadline > time.monotonic():
            listened = list(channels)
            with listener.current().waiting(listened, deadline) as waiter:
                result, channels = attempt()
                while not done(result) and list(channels) == listened:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return result
                    _sleep(waiter, min(remaining, recheck_s))
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
    """Wait up to `timeout_s` for a notification on any of `channels`; True if woken by one. It takes
    no caller's slot: a request waits through `long_poll`."""
    with listener.current().waiting(list(channels), time.monotonic() + timeout_s) as waiter:
        return _sleep(waiter, timeout_s)


def _sleep(waiter: listener.Waiter, timeout_s: float) -> bool:
    """Block until a notification on the waiter's channels or `timeout_s`; whether one came."""
    return waiter.sleep(timeout_s)
