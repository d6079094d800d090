"""Consumer-group cursors on log partitions: where each group reads, and reading from there.

One row per (partition, group). Everything below `committed` is consumed by the group; a lease
(see `leases`) covers the batch [batch_start, batch_end) until it expires. A claim locks the row
with SKIP LOCKED, so a partition serves one lease per group at a time while other partitions and
other groups are served in parallel. Time comes from the database. No wire format here.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

import psycopg

from . import frames

# The segments holding [from, from + need) (below `until`), skipping what retention removed.
# Offsets are gapless from the partition's start_offset up, so the segment holding the last
# offset wanted bounds the index range scanned: the cost does not grow with the log behind it.
_SEGMENTS = """
WITH r AS (
    SELECT least(%(until)s, greatest(%(from)s, start_offset) + %(need)s) AS upto
    FROM log_partitions WHERE id = %(p)s
)
SELECT first_offset, codec, frames, (extract(epoch FROM created_at) * 1000)::bigint
FROM log_segments, r
WHERE partition_id = %(p)s AND end_offset > %(from)s
  AND end_offset <= coalesce((SELECT min(end_offset) FROM log_segments
                              WHERE partition_id = %(p)s AND end_offset >= r.upto), 9223372036854775807)
ORDER BY end_offset
"""


def cut(rows: list[tuple], cursor: int, until: int, max_records: int, out: list[frames.Entry]) -> int:
    """Append the entries at offsets >= cursor (and < until) of these segments to `out`, up to
    `max_records`; frames before the cursor are skipped by their headers, never decoded.
    `rows` are (first_offset, codec, frames, created_at ms) in log order, as a surface's own SQL
    function returns them. Returns the offset after the last frame looked at."""
    header, size = frames._HEADER, frames._HEADER.size
    no_key, no_headers = frames._NO_KEY, frames._NO_HEADERS
    for first, codec, stored, seg_ts in rows:
        raw = frames.unpack(codec, stored)
        pos, offset, length = 0, first, len(raw)
        while pos < length and offset < until and len(out) < max_records:
            ts, id_len, key_len, headers_len, payload_len = header.unpack_from(raw, pos)
            body = pos + size
            key_size = 0 if key_len == no_key else key_len
            headers_size = 0 if headers_len == no_headers else headers_len
            nxt = body + id_len + key_size + headers_size + payload_len
            if offset >= cursor:
                p = body + id_len
                key = raw[p : p + key_len].decode() if key_len != no_key else None
                p += key_size
                hdrs = raw[p : p + headers_len] if headers_len != no_headers else None
                p += headers_size
                out.append(frames.Entry(offset, ts or seg_ts, raw[body : body + id_len].decode(), key, hdrs,
                                        raw[p : p + payload_len]))
            pos, offset = nxt, offset + 1
        cursor = max(cursor, offset)
        if len(out) >= max_records or offset >= until:
            break
    return cursor


def read_window(conn: psycopg.Connection, partition_id: int, from_offset: int, max_records: int,
                until_offset: int | None = None) -> list[frames.Entry]:
    """store.read for consumers: the same entries, but only the segments covering the range are
    fetched, frames before `from_offset` are skipped by their headers and decoding stops at
    `max_records`: reading one record of a 1,000-frame segment decodes one frame, not a thousand.
    (Proposed for store.read itself.)"""
    out: list[frames.Entry] = []
    until = until_offset if until_offset is not None else 2**62
    cursor = from_offset
    while len(out) < max_records and cursor < until:
        rows = conn.execute(_SEGMENTS, {"p": partition_id, "from": cursor, "until": until,
                                        "need": max_records - len(out)}).fetchall()
        if not rows:
            break
        cursor = cut(rows, cursor, until, max_records, out)
    return out


# Where a group that meets a partition for the first time starts: every retained record, only
# records appended from now on, or records appended at or after a time.
Start = str | datetime  # "all" | "new" | a timestamp


class Cursor(NamedTuple):
    partition_id: int
    partition: str               # the partition's name
    group: str
    committed: int
    lease_id: str | None
    lease_live: bool             # a lease is held and has not expired
    batch_start: int | None
    batch_end: int | None
    batch_last_id: str | None    # the id of the leased batch's last record (acks name it)
    attempts: int                # failed deliveries of the batch at `committed` (column retry_count)
    next_offset: int             # the partition's next offset (its end)
    now_ms: int                  # the database's clock when the row was read
    tenant_id: str
    owner_kind: str
    owner_id: int


COLUMNS = """
c.partition_id, p.name, c.consumer_group, c.committed, c.lease_id::text,
coalesce(c.lease_id IS NOT NULL AND c.lease_expires_at > clock_timestamp(), false),
c.batch_start, c.batch_end, c.batch_last_id, c.retry_count, p.next_offset,
(extract(epoch FROM clock_timestamp()) * 1000)::bigint, p.tenant_id::text, p.owner_kind, p.owner_id
"""

_START = """
CASE WHEN %(mode)s = 'new' THEN p.next_offset
     WHEN %(mode)s = 'time' THEN coalesce((
         SELECT s.first_offset FROM log_segments s
         WHERE s.partition_id = p.id AND s.created_at >= %(since)s ORDER BY s.end_offset LIMIT 1), p.next_offset)
     ELSE p.start_offset END
"""


def _start_params(start: Start) -> dict:
    if isinstance(start, datetime):
        return {"mode": "time", "since": start}
    return {"mode": "new" if start == "new" else "all", "since": None}


def ensure(conn: psycopg.Connection, owner_kind: str, owner_id: int, group: str, start: Start = "all",
           partition_ids: list[int] | None = None) -> int:
    """Create the group's missing cursors on the owner's partitions (or only on `partition_ids`);
    returns how many were created. Existing cursors are never moved."""
    return conn.execute(
        "INSERT INTO log_cursors (partition_id, consumer_group, committed)"
        f" SELECT p.id, %(g)s, {_START} FROM log_partitions p"
        " WHERE p.owner_kind = %(k)s AND p.owner_id = %(o)s"
        " AND (%(ids)s::bigint[] IS NULL OR p.id = ANY(%(ids)s::bigint[]))"
        " AND NOT EXISTS (SELECT 1 FROM log_cursors x WHERE x.partition_id = p.id AND x.consumer_group = %(g)s)"
        " ON CONFLICT DO NOTHING",
        {"g": group, "k": owner_kind, "o": owner_id, "ids": partition_ids, **_start_params(start)},
    ).rowcount


_CLAIM = f"""
WITH c AS (
    SELECT {COLUMNS}, greatest(c.committed, p.start_offset) AS read_from
    FROM log_cursors c JOIN log_partitions p ON p.id = c.partition_id
    WHERE p.owner_kind = %(k)s AND p.owner_id = %(o)s AND c.consumer_group = %(g)s
      AND (%(pid)s::bigint IS NULL OR p.id = %(pid)s::bigint)
      AND p.id <> ALL(%(skip)s::bigint[])
      AND c.committed < p.next_offset
      AND (c.lease_id IS NULL OR c.lease_expires_at <= clock_timestamp())
      AND (c.available_at IS NULL OR c.available_at <= clock_timestamp())
    ORDER BY c.served_at
    LIMIT 1
    FOR UPDATE OF c SKIP LOCKED
)
SELECT c.*, s.first_offset, s.codec, s.frames, s.ts
FROM c LEFT JOIN LATERAL (
    SELECT first_offset, end_offset, codec, frames, (extract(epoch FROM created_at) * 1000)::bigint AS ts
    FROM log_segments
    WHERE partition_id = c.partition_id AND end_offset > c.read_from
      AND end_offset <= coalesce((SELECT min(x.end_offset) FROM log_segments x
                                  WHERE x.partition_id = c.partition_id AND x.end_offset >= c.read_from + %(need)s),
                                 9223372036854775807)
    ORDER BY end_offset
) s ON true
ORDER BY s.end_offset
"""
_CURSOR_FIELDS = 15


def claim(conn: psycopg.Connection, owner_kind: str, owner_id: int, group: str, max_records: int, *,
          partition_id: int | None = None, skip: list[int] | None = None) -> tuple[Cursor, list[frames.Entry]] | None:
    """Lock the group's least recently served cursor that has records, no live lease and no retry
    delay pending, with up to `max_records` records from its committed offset (one round trip);
    None when there is none. The caller then grants a lease or commits, in the same transaction.
    A cursor returned with `lease_id` set held a lease that expired."""
    rows = conn.execute(_CLAIM, {"k": owner_kind, "o": owner_id, "g": group, "pid": partition_id,
                                 "skip": skip or [], "need": max_records}).fetchall()
    if not rows:
        return None
    cursor = Cursor(*rows[0][:_CURSOR_FIELDS])
    segments = [r[_CURSOR_FIELDS + 1:] for r in rows if r[_CURSOR_FIELDS + 1] is not None]
    entries: list[frames.Entry] = []
    cut(segments, cursor.committed, 2**62, max_records, entries)
    return cursor, entries


def commit(conn: psycopg.Connection, cursor: Cursor, upto: int, *, release: bool, consumed: int | None = None) -> None:
    """Move the committed offset forward to `upto` (never back). With `release`, drop the lease."""
    conn.execute(
        "UPDATE log_cursors SET"
        " total_consumed = total_consumed + coalesce(%(n)s, greatest(%(u)s - committed, 0)),"
        " retry_count = CASE WHEN %(u)s > committed THEN 0 ELSE retry_count END,"
        " committed = greatest(committed, %(u)s), served_at = clock_timestamp(),"
        " lease_id = CASE WHEN %(r)s THEN NULL ELSE lease_id END,"
        " lease_expires_at = CASE WHEN %(r)s THEN NULL ELSE lease_expires_at END,"
        " batch_start = CASE WHEN %(r)s THEN NULL ELSE batch_start END,"
        " batch_end = CASE WHEN %(r)s THEN NULL ELSE batch_end END,"
        " batch_last_id = CASE WHEN %(r)s THEN NULL ELSE batch_last_id END,"
        " available_at = NULL"
        " WHERE partition_id = %(p)s AND consumer_group = %(g)s",
        {"n": consumed, "u": upto, "r": release, "p": cursor.partition_id, "g": cursor.group},
    )


def slowest(conn: psycopg.Connection, partition_id: int) -> int | None:
    """The lowest committed offset over the partition's groups (None when no group reads it)."""
    return conn.execute("SELECT min(committed) FROM log_cursors WHERE partition_id = %s", (partition_id,)).fetchone()[0]


