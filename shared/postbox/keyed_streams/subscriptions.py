"""Subscriptions: named consumer groups of a stream, each with its own delivery state.

A subscription receives every message that becomes available after it was created (or, created
with `start: "earliest"`, every available message still retained too).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

import psycopg

from .. import limits, names
from ..errors import Conflict, NotFound
from ..log_engine.retry import RetryPolicy
from .catalog import Stream
from .durations import iso

DEFAULT_MAX_DELIVERIES = 5
DEFAULT_LEASE_MS = 30_000
COUNT_CAP = 10_000


class Subscription(NamedTuple):
    id: int
    stream_id: int
    name: str
    max_deliveries: int
    lease_ms: int
    created_at: datetime
    pending: int
    acked: int
    dead: int

    @property
    def policy(self) -> RetryPolicy:
        """`max_deliveries` in the shared retry vocabulary: max_attempts (a nack names its delay)."""
        return RetryPolicy(self.max_deliveries)


_COLUMNS = "id, stream_id, name, max_deliveries, lease_ms, created_at, pending, acked, dead"


def find(conn: psycopg.Connection, stream: Stream, name: str) -> Subscription:
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM stream_subscriptions WHERE stream_id = %s AND name = %s", (stream.id, name)
    ).fetchone()
    if row is None:
        raise NotFound(f"no subscription named {name} on stream {stream.name}", code="subscription_not_found")
    return Subscription(*row)


def of_stream(conn: psycopg.Connection, stream_id: int) -> list[Subscription]:
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM stream_subscriptions WHERE stream_id = %s ORDER BY name", (stream_id,)
    ).fetchall()
    return [Subscription(*r) for r in rows]


def names_by_stream(conn: psycopg.Connection, stream_ids: list[int]) -> dict[int, list[str]]:
    rows = conn.execute(
        "SELECT stream_id, array_agg(name ORDER BY name) FROM stream_subscriptions"
        " WHERE stream_id = ANY(%s) GROUP BY stream_id",
        (stream_ids,),
    ).fetchall()
    return dict(rows)


def active_keys(conn: psycopg.Connection, stream_ids: list[int]) -> dict[int, int]:
    """Per stream: distinct keys with messages waiting or in flight in any subscription. The rows
    counted exist only while a key has work, so this is bounded by work in progress, not by history."""
    rows = conn.execute(
        "SELECT s.stream_id, count(DISTINCT k.unit) FROM stream_subscriptions s"
        " JOIN stream_sub_keys k ON k.sub_id = s.id"
        " WHERE s.stream_id = ANY(%s) AND k.unit LIKE 'k:%%' GROUP BY s.stream_id",
        (stream_ids,),
    ).fetchall()
    return dict(rows)


def in_flight(conn: psycopg.Connection, sub_id: int) -> int:
    return conn.execute(
        "SELECT count(*) FROM (SELECT 1 FROM stream_sub_keys WHERE sub_id = %s AND lease_token IS NOT NULL"
        " AND lease_until > clock_timestamp() LIMIT %s) x",
        (sub_id, COUNT_CAP),
    ).fetchone()[0]


def create(conn: psycopg.Connection, stream: Stream, name: str, max_deliveries: int, lease_ms: int) -> Subscription:
    names.SUBSCRIPTION.check(name, "name")
    limits.check(conn, stream.tenant_id, limits.KEYED_SUBSCRIPTIONS)
    row = conn.execute(
        "INSERT INTO stream_subscriptions (stream_id, name, max_deliveries, lease_ms) VALUES (%s, %s, %s, %s)"
        f" ON CONFLICT (stream_id, name) DO NOTHING RETURNING {_COLUMNS}",
        (stream.id, name, max_deliveries, lease_ms),
    ).fetchone()
    if row is None:
        raise Conflict(f"a subscription named {name} already exists on stream {stream.name}",
                       code="subscription_exists")
    return Subscription(*row)


def delete(conn: psycopg.Connection, sub: Subscription) -> None:
    conn.execute("DELETE FROM stream_pending WHERE sub_id = %s", (sub.id,))
    conn.execute("DELETE FROM stream_sub_keys WHERE sub_id = %s", (sub.id,))
    conn.execute("DELETE FROM stream_dead WHERE sub_id = %s", (sub.id,))
    conn.execute("DELETE FROM stream_subscriptions WHERE id = %s", (sub.id,))


def document(conn: psycopg.Connection, stream: Stream, sub: Subscription) -> dict[str, Any]:
    return {
        "name": sub.name,
        "stream": stream.name,
        "project": stream.project.name,
        "max_deliveries": sub.max_deliveries,
        "lease_ms": sub.lease_ms,
        "pending": sub.pending,
        "in_flight": in_flight(conn, sub.id),
        "acked": sub.acked,
        "dead": sub.dead,
        "created_at": iso(sub.created_at),
    }
