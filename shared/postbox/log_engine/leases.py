"""Leases on log-engine work: grant, extend, fail (retry or dead letter), expire. One lifecycle.

Every surface that hands log records to consumers leases them the same way:
- a lease is a token with an expiry on the database's clock; a consumer proves it holds the work
  by the token, and may extend it while it is live;
- a failed delivery (a nack, an error ack, or a lease that ran out) adds one to the work's
  `attempts`, and the surface's `RetryPolicy` decides: deliver again after the retry delay, or,
  once `max_attempts` is reached, dead-letter it and move past it;
- dead letters are handed to the surface's own store (`DeadLetters`), because what a dead letter
  keeps differs: a partitioned queue copies the record (it outlives retention and is replayed),
  a keyed stream keeps its offset into the retained log.

Two shapes of leased work share this lifecycle:
- a cursor batch: [committed, batch_end) of one partition for one consumer group, one lease at a
  time per (partition, group), kept on the `log_cursors` row (partitioned queues; their hot
  paths grant and commit the same columns in SQL functions);
- the head message of an ordering unit (a key): one lease per (group, unit), kept in the
  surface's per-unit row (keyed-stream subscriptions); `triage` applies the policy to heads.
Nothing here commits; time comes from the database; no wire format here.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import NamedTuple

import psycopg

from .cursors import COLUMNS, Cursor, commit, read_window
from .frames import Entry
from .retry import RetryPolicy

# Where a surface records records that used up their attempts: (conn, cursor, the records, their
# attempts, the last error). None drops them (a queue configured not to keep dead letters).
DeadLetters = Callable[[psycopg.Connection, Cursor, list[Entry], int, "str | None"], None]


# ---- cursor batches ---------------------------------------------------------------------------


def grant(conn: psycopg.Connection, cursor: Cursor, batch_end: int, lease_seconds: float,
          last_id: str | None = None, lease_id: str | None = None) -> tuple[str, datetime]:
    """Lease [committed, batch_end) on a claimed cursor (`last_id`: its last record's id); returns
    (lease id, expiry). The batch keeps the cursor's attempts. `lease_id`: a lease id other cursors
    hold too (one lease over several partitions); a new one when None."""
    lease_id = lease_id or str(uuid.uuid4())
    expires = conn.execute(
        "UPDATE log_cursors SET lease_id = %(l)s, lease_expires_at = clock_timestamp() + %(s)s * interval '1 second',"
        " batch_start = committed, batch_end = %(e)s, batch_last_id = %(last)s,"
        " available_at = NULL, served_at = clock_timestamp()"
        " WHERE partition_id = %(p)s AND consumer_group = %(g)s RETURNING lease_expires_at",
        {"l": lease_id, "s": lease_seconds, "e": batch_end, "last": last_id, "p": cursor.partition_id,
         "g": cursor.group},
    ).fetchone()[0]
    return lease_id, expires


def held(conn: psycopg.Connection, lease_id: str, partition_id: int | str | None = None) -> Cursor | None:
    """The cursor holding `lease_id` (live or expired) on `partition_id` (None: the first, by
    partition, of the cursors holding it: one lease may cover several partitions), locked for the
    caller's transaction."""
    found = holders(conn, lease_id, partition_id)
    return found[0] if found else None


def holders(conn: psycopg.Connection, lease_id: str, partition_id: int | str | None = None) -> list[Cursor]:
    """Every cursor holding `lease_id` (one per partition it covers; only `partition_id`'s when
    given), in partition order, locked (a fixed lock order) for the caller's transaction."""
    try:
        uuid.UUID(str(lease_id))
    except ValueError:
        return []
    if partition_id is not None and not str(partition_id).isdigit():
        return []
    partition_id = None if partition_id is None else int(partition_id)
    rows = conn.execute(
        f"SELECT {COLUMNS} FROM log_cursors c JOIN log_partitions p ON p.id = c.partition_id"
        " WHERE c.lease_id = %s AND (%s::bigint IS NULL OR c.partition_id = %s::bigint)"
        " ORDER BY c.partition_id FOR UPDATE OF c",
        (str(lease_id), partition_id, partition_id),
    ).fetchall()
    return [Cursor(*r) for r in rows]


def extend(conn: psycopg.Connection, cursor: Cursor, seconds: float) -> datetime:
    """Push a live lease's expiry to `seconds` from now."""
    return conn.execute(
        "UPDATE log_cursors SET lease_expires_at = clock_timestamp() + %s * interval '1 second'"
        " WHERE partition_id = %s AND consumer_group = %s RETURNING lease_expires_at",
        (seconds, cursor.partition_id, cursor.group),
    ).fetchone()[0]


def extend_lease(conn: psycopg.Connection, lease_id: str, seconds: float) -> datetime | None:
    """Push every live cursor of `lease_id` (all the partitions it covers) to `seconds` from now;
    the earliest expiry among them, or None when none is live."""
    return conn.execute(
        "WITH renewed AS (UPDATE log_cursors SET lease_expires_at = clock_timestamp() + %s * interval '1 second'"
        " WHERE lease_id = %s AND lease_expires_at > clock_timestamp() RETURNING lease_expires_at)"
        " SELECT min(lease_expires_at) FROM renewed",
        (seconds, str(lease_id)),
    ).fetchone()[0]


def shorten(conn: psycopg.Connection, cursor: Cursor, seconds: float) -> None:
    """A live lease ends `seconds` from now, unless it ends sooner: the rest of its batch is
    offered again then (its expiry is a redelivery, as any lease's)."""
    conn.execute(
        "UPDATE log_cursors"
        " SET lease_expires_at = least(lease_expires_at, clock_timestamp() + %s * interval '1 second')"
        " WHERE partition_id = %s AND consumer_group = %s",
        (seconds, cursor.partition_id, cursor.group),
    )


def release(conn: psycopg.Connection, cursor: Cursor, *, attempts: int, delay_ms: int = 0) -> None:
    """Drop the lease without committing: the same records redeliver, after `delay_ms`."""
    conn.execute(
        "UPDATE log_cursors SET lease_id = NULL, lease_expires_at = NULL, batch_start = NULL, batch_end = NULL,"
        " batch_last_id = NULL,"
        " retry_count = %(r)s,"
        " available_at = CASE WHEN %(d)s > 0 THEN clock_timestamp() + %(d)s * interval '1 millisecond' END"
        " WHERE partition_id = %(p)s AND consumer_group = %(g)s",
        {"r": attempts, "d": delay_ms, "p": cursor.partition_id, "g": cursor.group},
    )


def expired(conn: psycopg.Connection, owner_kind: str, limit: int) -> list[Cursor]:
    """Cursors whose lease ran out, locked (SKIP LOCKED, so overlapping sweeps share the work)."""
    rows = conn.execute(
        f"SELECT {COLUMNS} FROM log_cursors c JOIN log_partitions p ON p.id = c.partition_id"
        " WHERE c.lease_id IS NOT NULL AND c.lease_expires_at <= clock_timestamp() AND p.owner_kind = %s"
        " ORDER BY c.lease_expires_at LIMIT %s FOR UPDATE OF c SKIP LOCKED",
        (owner_kind, limit),
    ).fetchall()
    return [Cursor(*r) for r in rows]


def fail(conn: psycopg.Connection, cursor: Cursor, start: int, attempts: int, policy: RetryPolicy,
         dead_letters: DeadLetters | None, error: str | None) -> bool:
    """The leased batch from `start` failed for the `attempts`-th time: apply the policy's
    decision. Retry releases the lease (redelivery after the retry delay); dead letter hands
    [start, batch_end) to `dead_letters` and commits past it. True when it dead-lettered."""
    end = cursor.batch_end if cursor.batch_end is not None else start
    if policy.decide(attempts).dead_letter and end > start:
        if dead_letters is not None:
            entries = read_window(conn, cursor.partition_id, start, end - start, end)
            if entries:
                dead_letters(conn, cursor, entries, attempts, error)
        commit(conn, cursor, end, release=True, consumed=0)
        return True
    release(conn, cursor, attempts=attempts, delay_ms=policy.retry_delay_ms)
    return False


def fail_rest(conn: psycopg.Connection, cursor: Cursor, upto: int, policy: RetryPolicy,
              dead_letters: DeadLetters | None, error: str | None) -> bool:
    """A nack at `upto` inside the leased batch: commit what precedes it and fail the rest. Progress
    starts the attempts again (the records now first in line were never failed before); without
    progress the batch fails once more. True when the rest was dead-lettered."""
    if upto > cursor.committed:
        commit(conn, cursor, upto, release=False)
    attempts = (0 if upto > cursor.committed else cursor.attempts) + 1
    return fail(conn, cursor, upto, attempts, policy, dead_letters, error)


def expire(conn: psycopg.Connection, cursor: Cursor, policy: RetryPolicy, dead_letters: DeadLetters | None) -> bool:
    """An expired lease is a failed delivery of its whole batch; True when it dead-lettered."""
    return fail(conn, cursor, cursor.committed, cursor.attempts + 1, policy, dead_letters, "lease expired")


# ---- the head message of an ordering unit ----------------------------------------------------


class Delivery(NamedTuple):
    """One leased message: its offset, which delivery this is, the receipt proving the lease."""

    offset: int
    attempt: int
    receipt: str
    lease_until: datetime


def receipt(offset: int, token: uuid.UUID) -> str:
    return f"{offset}.{token.hex}"


def parse_receipts(receipts: list[str]) -> list[tuple[int, uuid.UUID]] | None:
    """`<offset>.<lease token>` pairs, or None when one is malformed."""
    out = []
    for text in receipts:
        offset, _, token = text.partition(".")
        try:
            out.append((int(offset), uuid.UUID(hex=token)))
        except ValueError:
            return None
    return out


class Triage(NamedTuple):
    """What to do with the heads of free units: lease `deliver` (unit -> offset), dead-letter
    `dead`, drop `gone` (no longer deliverable); `again` are the units whose next head to look at."""

    deliver: dict[str, int]
    dead: list[int]
    gone: list[int]
    again: list[str]


def triage(heads: Iterable[tuple[str, int, int, bool]], policy: RetryPolicy) -> Triage:
    """Apply the policy to (unit, offset, attempts, gone) heads whose lease is free or ran out.
    A head still pending after `attempts` deliveries failed them all (acked work is not pending),
    so one that used up `max_attempts` is dead-lettered and its unit moves on."""
    deliver: dict[str, int] = {}
    dead: list[int] = []
    gone: list[int] = []
    again: list[str] = []
    for unit, offset, attempts, is_gone in heads:
        if is_gone:
            gone.append(offset)
            again.append(unit)
        elif policy.exhausted(attempts):
            dead.append(offset)
            again.append(unit)
        else:
            deliver[unit] = offset
    return Triage(deliver, dead, gone, again)

