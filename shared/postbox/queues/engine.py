"""The message engine's statements, one round trip each, on an open connection.

Messages wait in `queue_messages` (visible when `vt <= clock_timestamp()`), move to `queue_archive`
when archived or dead, and are counted by triggers as they move. The engine knows queues only by
their internal id and knows nothing of any surface's wire format.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import psycopg

from ..log_engine.retry import RetryPolicy


class QueueRef(NamedTuple):
    """What the engine needs to know about a queue to hand out and dead-letter its messages."""

    id: int
    visibility_timeout_sec: int
    max_reads: int | None
    dead_letter_queue_id: int | None

    @property
    def policy(self) -> RetryPolicy:
        """`max_reads` in the shared retry vocabulary: max_attempts, with `read_ct` the attempts.
        The claim (SQL `queue_claim`) applies the decision: a message already read max_attempts
        times is dead-lettered instead of handed out."""
        return RetryPolicy(self.max_reads)


class Message(NamedTuple):
    msg_id: int
    read_ct: int
    enqueued_at: float
    vt: float
    message: Any
    headers: Any

    def as_dict(self) -> dict[str, Any]:
        return {
            "msg_id": self.msg_id,
            "read_ct": self.read_ct,
            "enqueued_at": self.enqueued_at,
            "vt": self.vt,
            "message": self.message,
            "headers": self.headers,
        }


_MESSAGE_COLUMNS = (
    "m.msg_id, m.read_ct, extract(epoch FROM m.enqueued_at)::float8,"
    " extract(epoch FROM m.vt)::float8, m.message, m.headers"
)

_MAX_ID = 2**63  # ids are positive bigints: any other number names no message


def int_array(values: list[int]) -> str:
    """An int[]/bigint[] literal: cheaper to build than psycopg's per-element array dump."""
    return "{" + ",".join(map(str, values)) + "}"


def id_array(ids: list[int]) -> str:
    """A bigint[] literal of `ids`, leaving out numbers no message can have (so they match nothing
    instead of failing the cast)."""
    return int_array([i for i in ids if 0 < i < _MAX_ID])


def _messages(cursor: psycopg.Cursor) -> list[Message]:
    out = [Message(*row) for row in cursor.fetchall()]
    out.sort(key=lambda m: m.msg_id)
    return out


def read(conn: psycopg.Connection, queue: QueueRef, qty: int, vt: float | None = None) -> list[Message]:
    """Claim up to `qty` visible messages for `vt` seconds, in msg_id order from the queue's claim
    head (SQL: queue_claim; queue_heads in the schema baseline for the head).

    A claimed message that used up the queue's attempts (read `max_reads` times) is dead-lettered
    by the same statement instead of being handed out: moved to the dead-letter queue (keeping its
    id) or archived as dead.
    """
    rows = conn.execute(
        "SELECT r_msg_id, r_read_ct, r_enqueued_at, r_vt, r_message, r_headers FROM queue_claim(%s, %s, %s, %s, %s)",
        (queue.id, qty, queue.visibility_timeout_sec if vt is None else vt, queue.policy.max_attempts,
         queue.dead_letter_queue_id),
    )
    return _messages(rows)


_POP = """
WITH cand AS (
    SELECT msg_id FROM queue_messages
    WHERE queue_id = %(q)s AND vt <= clock_timestamp()
    ORDER BY msg_id LIMIT %(qty)s FOR UPDATE SKIP LOCKED
)
DELETE FROM queue_messages m USING cand c
WHERE m.queue_id = %(q)s AND m.msg_id = c.msg_id
RETURNING m.msg_id, m.read_ct + 1, extract(epoch FROM m.enqueued_at)::float8,
          extract(epoch FROM m.vt)::float8, m.message, m.headers
"""


def pop(conn: psycopg.Connection, queue_id: int, qty: int) -> list[Message]:
    """Claim and delete at once: at-most-once delivery."""
    return _messages(conn.execute(_POP, {"q": queue_id, "qty": qty}))


def archive(conn: psycopg.Connection, queue_id: int, ids: list[int]) -> list[int]:
    """Move waiting messages to the archive; returns the ids that were waiting here."""
    return conn.execute("SELECT queue_archive_ids(%s, %s::bigint[])", (queue_id, id_array(ids))).fetchone()[0]


def delete(conn: psycopg.Connection, queue_id: int, ids: list[int]) -> list[int]:
    """Delete waiting messages; returns the ids that were waiting here."""
    rows = conn.execute(
        "DELETE FROM queue_messages WHERE queue_id = %s AND msg_id = ANY(%s::bigint[]) RETURNING msg_id",
        (queue_id, id_array(ids)),
    )
    return sorted(r[0] for r in rows)


def set_vt(conn: psycopg.Connection, queue_id: int, msg_id: int, vt: float) -> Message | None:
    """Hide a waiting message for `vt` more seconds from now (0 makes it visible now).

    Under a second pulls the queue's claim head back to the message, so the next read finds it."""
    if not 0 < msg_id < _MAX_ID:
        return None
    if vt < 1:
        conn.execute("SELECT queue_head_back(%s, %s, true)", (queue_id, msg_id))
    row = conn.execute(
        f"UPDATE queue_messages m SET vt = clock_timestamp() + %s * interval '1 second'"
        f" WHERE m.queue_id = %s AND m.msg_id = %s RETURNING {_MESSAGE_COLUMNS}",
        (vt, queue_id, msg_id),
    ).fetchone()
    return Message(*row) if row else None


def purge(conn: psycopg.Connection, queue_id: int, include_archived: bool = False) -> int:
    """Delete every waiting message (and the archive too when asked); returns the count."""
    n = conn.execute("DELETE FROM queue_messages WHERE queue_id = %s", (queue_id,)).rowcount
    if include_archived:
        n += conn.execute("DELETE FROM queue_archive WHERE queue_id = %s", (queue_id,)).rowcount
    return n


def browse(
    conn: psycopg.Connection, queue_id: int, state: str, limit: int, before: int | None
) -> list[dict[str, Any]]:
    """Look at messages newest first without claiming them; `before` pages by msg_id."""
    if state == "waiting":
        sql = (
            f"SELECT {_MESSAGE_COLUMNS}, NULL::float8, m.dead_from IS NOT NULL,"
            " m.read_ct > 0 AND m.vt > clock_timestamp()"
            " FROM queue_messages m WHERE m.queue_id = %s AND (%s::bigint IS NULL OR m.msg_id < %s)"
            " ORDER BY m.msg_id DESC LIMIT %s"
        )
    else:
        dead_only = " AND m.dead" if state == "dead" else ""
        sql = (
            f"SELECT {_MESSAGE_COLUMNS}, extract(epoch FROM m.archived_at)::float8, m.dead, false"
            " FROM queue_archive m WHERE m.queue_id = %s AND (%s::bigint IS NULL OR m.msg_id < %s)"
            f"{dead_only} ORDER BY m.msg_id DESC LIMIT %s"
        )
    out = []
    for *msg, archived_at, dead, in_flight in conn.execute(sql, (queue_id, before, before, limit)):
        item = Message(*msg).as_dict()
        item.update(archived_at=archived_at, dead_lettered=dead, in_flight=in_flight)
        out.append(item)
    return out


METRICS_COUNT_CAP = 100_000


class Counters(NamedTuple):
    sent: int
    removed: int
    live_bytes: int
    archived_total: int
    archive_rows: int
    archive_bytes: int
    dead_total: int

    @property
    def queue_length(self) -> int:
        return self.sent - self.removed

    @property
    def stored_bytes(self) -> int:
        return self.live_bytes + self.archive_bytes


def counters(conn: psycopg.Connection, queue_ids: list[int]) -> dict[int, Counters]:
    """Each queue's counters, summed over slots (a handful of rows per queue, never the messages)."""
    rows = conn.execute(
        "SELECT queue_id, sum(sent), sum(removed), sum(live_bytes), sum(archived_total),"
        " sum(archive_rows), sum(archive_bytes), sum(dead_total)"
        " FROM queue_counters WHERE queue_id = ANY(%s::bigint[]) GROUP BY queue_id",
        (queue_ids,),
    )
    found = {r[0]: Counters(*(int(v) for v in r[1:])) for r in rows}
    zero = Counters(0, 0, 0, 0, 0, 0, 0)
    return {q: found.get(q, zero) for q in queue_ids}


def ages(conn: psycopg.Connection, queue_id: int) -> tuple[float | None, float | None]:
    """Age in seconds of the oldest and newest waiting message (two index probes)."""
    row = conn.execute(
        "SELECT (SELECT extract(epoch FROM clock_timestamp() - enqueued_at)::float8 FROM queue_messages"
        "        WHERE queue_id = %(q)s ORDER BY msg_id LIMIT 1),"
        "       (SELECT extract(epoch FROM clock_timestamp() - enqueued_at)::float8 FROM queue_messages"
        "        WHERE queue_id = %(q)s ORDER BY msg_id DESC LIMIT 1)",
        {"q": queue_id},
    ).fetchone()
    return row[0], row[1]


def state_counts(conn: psycopg.Connection, queue_id: int) -> tuple[int, int, int]:
    """Visible, in-flight and delayed messages, each counted up to METRICS_COUNT_CAP."""
    row = conn.execute(
        "SELECT"
        " (SELECT count(*) FROM (SELECT 1 FROM queue_messages WHERE queue_id = %(q)s"
        "   AND vt <= clock_timestamp() LIMIT %(cap)s) v),"
        " (SELECT count(*) FROM (SELECT 1 FROM queue_messages WHERE queue_id = %(q)s"
        "   AND vt > clock_timestamp() AND read_ct > 0 LIMIT %(cap)s) f),"
        " (SELECT count(*) FROM (SELECT 1 FROM queue_messages WHERE queue_id = %(q)s"
        "   AND vt > clock_timestamp() AND read_ct = 0 LIMIT %(cap)s) d)",
        {"q": queue_id, "cap": METRICS_COUNT_CAP},
    ).fetchone()
    return row[0], row[1], row[2]
