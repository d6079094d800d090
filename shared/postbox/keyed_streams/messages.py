"""Stream messages: the per-message rows (status, schedule, expiry, idempotency key), the payloads
read back from the log, and the message documents the API answers with.

A message's record (key, headers, payload) is immutable in the stream's log partition; its row in
`stream_messages` holds what changes. Browse walks the row indexes newest first and fetches the
records of one page in as few log reads as the offsets allow.
"""

from __future__ import annotations

import json
import secrets
from datetime import datetime
from typing import Any, NamedTuple

import psycopg

from ..log_engine import store
from ..log_engine.frames import Entry
from .catalog import Stream
from .durations import iso

STATUSES = ("scheduled", "available", "cancelled", "expired")
SCAN_BUDGET = 5000     # rows a `q` browse inspects per request before it answers with a cursor
_ID_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"


_ID_TABLE = bytes(_ID_ALPHABET.encode()[b & 31] for b in range(256))  # a random byte's low 5 bits


def new_ids(n: int) -> list[str]:
    """`msg_` + 21 base32 characters (105 random bits) each, as the spec's ids look: the random
    bytes of a whole batch drawn and mapped at once (each byte gives one character)."""
    text = secrets.token_bytes(21 * n).translate(_ID_TABLE).decode()
    return ["msg_" + text[21 * i: 21 * i + 21] for i in range(n)]


def unit_of(key: str | None, offset: int) -> str:
    """The ordering unit: one per key; an unkeyed message is ordered with nothing but itself."""
    return f"k:{key}" if key is not None else f"m:{offset}"


class Row(NamedTuple):
    offset: int
    msg_id: str
    key: str | None
    unit: str
    status: str
    idempotency_key: str | None
    deliver_at: datetime | None
    expires_at: datetime | None
    published_at: datetime


_ROW = 'm."offset", m.msg_id, m.key, m.unit, m.status, m.idempotency_key, m.deliver_at, m.expires_at, m.published_at'


def by_offsets(conn: psycopg.Connection, stream_id: int, offsets: list[int]) -> dict[int, Row]:
    rows = conn.execute(
        f'SELECT {_ROW} FROM stream_messages m WHERE m.stream_id = %s AND m."offset" = ANY(%s)',
        (stream_id, offsets),
    ).fetchall()
    return {r[0]: Row(*r) for r in rows}


def page(conn: psycopg.Connection, stream_id: int, *, key: str | None, status: str | None,
         before_offset: int | None, limit: int) -> list[Row]:
    """Rows newest first, on the index that matches the filters (key, status, or the primary key)."""
    where = ["m.stream_id = %(s)s"]
    if key is not None:
        where.append("m.key = %(k)s")
    if status is not None:
        where.append("m.status = %(st)s")
    if before_offset is not None:
        where.append('m."offset" < %(b)s')
    rows = conn.execute(
        f"SELECT {_ROW} FROM stream_messages m WHERE {' AND '.join(where)} ORDER BY m.\"offset\" DESC LIMIT %(n)s",
        {"s": stream_id, "k": key, "st": status, "b": before_offset, "n": limit},
    ).fetchall()
    return [Row(*r) for r in rows]


def entries_at(conn: psycopg.Connection, partition_id: int, offsets: list[int]) -> dict[int, Entry]:
    """The log records at these offsets (one index probe each, each segment unpacked once)."""
    return store.read_at(conn, partition_id, offsets)


def _json(raw: bytes | None) -> Any:
    return json.loads(raw) if raw is not None else None


def document(stream: Stream, row: Row, entry: Entry) -> dict[str, Any]:
    """A message as the spec shows it, its record read from the log."""
    return shaped(stream.name, stream.project.name, row, _json(entry.payload), _json(entry.headers))


def shaped(stream: str, project: str, row: Row, payload: Any, headers: Any) -> dict[str, Any]:
    """A message as the spec shows it, from its row and its record's (decoded) payload and headers."""
    return {
        "id": row.msg_id,
        "stream": stream,
        "project": project,
        "key": row.key,
        "payload": payload,
        "headers": headers,
        "idempotency_key": row.idempotency_key,
        "deliver_at": iso(row.deliver_at),
        "expires_at": iso(row.expires_at),
        "published_at": iso(row.published_at),
        "offset": row.offset,
        "status": row.status,
    }


def documents(conn: psycopg.Connection, stream: Stream, rows: list[Row]) -> list[dict[str, Any]]:
    """Documents for rows, in the rows' order; a row whose record retention just removed is left out."""
    entries = entries_at(conn, stream.partition_id, [r.offset for r in rows]) if rows else {}
    return [document(stream, r, entries[r.offset]) for r in rows if r.offset in entries]


def browse(conn: psycopg.Connection, stream: Stream, *, key: str | None, status: str | None, q: str | None,
           limit: int, before_offset: int | None) -> tuple[list[dict[str, Any]], int | None]:
    """(messages newest first, the `before_offset` to continue from or None when there is no more).

    Without `q` this is one index range. With `q` it inspects pages of rows and their payloads,
    at most SCAN_BUDGET rows per call, and hands back a cursor when the budget runs out."""
    if not q:
        rows = page(conn, stream.id, key=key, status=status, before_offset=before_offset, limit=limit)
        docs = documents(conn, stream, rows)
        return docs, (rows[-1].offset if len(rows) == limit else None)
    found: list[dict[str, Any]] = []
    cursor, scanned = before_offset, 0
    while scanned < SCAN_BUDGET:
        rows = page(conn, stream.id, key=key, status=status, before_offset=cursor, limit=200)
        if not rows:
            return found, None
        entries = entries_at(conn, stream.partition_id, [r.offset for r in rows])
        for r in rows:
            entry = entries.get(r.offset)
            scanned += 1
            cursor = r.offset
            if entry is not None and q in entry.payload.decode("utf-8", "replace"):
                found.append(document(stream, r, entry))
                if len(found) == limit:
                    return found, cursor
        if len(rows) < 200:
            return found, None
    return found, cursor


def set_status(conn: psycopg.Connection, stream_id: int, offset: int, frm: str, to: str) -> Row | None:
    row = conn.execute(
        f"UPDATE stream_messages m SET status = %s WHERE m.stream_id = %s AND m.\"offset\" = %s AND m.status = %s"
        f" RETURNING {_ROW}",
        (to, stream_id, offset, frm),
    ).fetchone()
    return Row(*row) if row else None
