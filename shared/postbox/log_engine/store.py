"""The log engine's statements on an open connection: partitions, appends, reads, retention.

Appends to one partition are serialised by the partition row's lock (taken by the UPDATE that
allocates offsets), so offsets commit in order and a reader never sees a gap that fills later.
The engine knows partitions by id and owners by (kind, id); it knows nothing of wire formats.
"""

from __future__ import annotations

from typing import NamedTuple

import psycopg

from .frames import Entry, Record, decode, id_hash, pack, unpack


class Partition(NamedTuple):
    id: int
    name: str
    next_offset: int
    start_offset: int
    stored_bytes: int


class Appended(NamedTuple):
    """Offsets given to the records appended, and the records skipped as duplicates."""

    first_offset: int
    offsets: list[int | None]          # per input record: its offset, or None for a duplicate
    duplicates: dict[int, int]         # input index -> offset of the record it duplicates
    next_offset: int


_PARTITION_COLUMNS = "id, name, next_offset, start_offset, stored_bytes"


def ensure_partition(conn: psycopg.Connection, tenant_id: str, owner_kind: str, owner_id: int, name: str) -> Partition:
    """The owner's partition called `name`, created on first use."""
    row = conn.execute(
        f"SELECT {_PARTITION_COLUMNS} FROM log_partitions WHERE owner_kind = %s AND owner_id = %s AND name = %s",
        (owner_kind, owner_id, name),
    ).fetchone()
    if row is None:
        row = conn.execute(
            "INSERT INTO log_partitions (tenant_id, owner_kind, owner_id, name) VALUES (%s, %s, %s, %s)"
            " ON CONFLICT (owner_kind, owner_id, name) DO UPDATE SET name = excluded.name"
            f" RETURNING {_PARTITION_COLUMNS}",
            (tenant_id, owner_kind, owner_id, name),
        ).fetchone()
    return Partition(*row)


def find_partition(conn: psycopg.Connection, owner_kind: str, owner_id: int, name: str) -> Partition | None:
    row = conn.execute(
        f"SELECT {_PARTITION_COLUMNS} FROM log_partitions WHERE owner_kind = %s AND owner_id = %s AND name = %s",
        (owner_kind, owner_id, name),
    ).fetchone()
    return Partition(*row) if row else None


def partitions_of(conn: psycopg.Connection, owner_kind: str, owner_id: int) -> list[Partition]:
    rows = conn.execute(
        f"SELECT {_PARTITION_COLUMNS} FROM log_partitions WHERE owner_kind = %s AND owner_id = %s ORDER BY name",
        (owner_kind, owner_id),
    )
    return [Partition(*r) for r in rows]


def append(conn: psycopg.Connection, partition_id: int, records: list[Record], *, dedup: bool = False) -> Appended:
    """Append records as one segment, in order; with `dedup`, records whose id was already appended
    to this partition (or earlier in the batch) are skipped and reported with that record's offset."""
    if not records:
        raise ValueError("append needs at least one record")
    keep = list(range(len(records)))
    earlier: dict[int, int] = {}  # duplicate input index -> offset already stored
    repeats: dict[int, int] = {}  # duplicate input index -> index of its first copy in this batch
    hashes: list[bytes] = []
    if dedup:
        # Lock the partition first so two appenders of the same id cannot both miss each other.
        conn.execute("SELECT 1 FROM log_partitions WHERE id = %s FOR UPDATE", (partition_id,))
        hashes = [id_hash(r.id) for r in records]
        stored = dict(conn.execute(
            'SELECT hash, "offset" FROM log_dedup WHERE partition_id = %s AND hash = ANY(%s)',
            (partition_id, hashes),
        ).fetchall())
        first_index: dict[bytes, int] = {}
        keep = []
        for i, h in enumerate(hashes):
            if h in stored:
                earlier[i] = stored[h]
            elif h in first_index:
                repeats[i] = first_index[h]
            else:
                first_index[h] = i
                keep.append(i)
    offsets: list[int | None] = [None] * len(records)
    if not keep:
        nxt = conn.execute("SELECT next_offset FROM log_partitions WHERE id = %s", (partition_id,)).fetchone()[0]
        return Appended(nxt, offsets, earlier, nxt)
    codec, stored_frames, raw = pack([records[i] for i in keep])
    first = conn.execute(
        "SELECT log_append(%s, %s, %s::smallint, %s, %s)", (partition_id, len(keep), codec, raw, stored_frames)
    ).fetchone()[0]
    for n, i in enumerate(keep):
        offsets[i] = first + n
    duplicates = {**earlier, **{i: offsets[j] for i, j in repeats.items()}}
    if dedup:
        conn.execute(
            'INSERT INTO log_dedup (partition_id, hash, "offset")'
            " SELECT %s, h, o FROM unnest(%s::bytea[], %s::bigint[]) AS u(h, o)",
            (partition_id, [hashes[i] for i in keep], [offsets[i] for i in keep]),
        )
    return Appended(first, offsets, duplicates, first + len(keep))


_READ = """
SELECT first_offset, codec, frames, (extract(epoch FROM created_at) * 1000)::bigint
FROM log_segments
WHERE partition_id = %(p)s AND end_offset > %(from)s AND first_offset < %(until)s
ORDER BY end_offset
LIMIT %(segments)s
"""


def read(
    conn: psycopg.Connection,
    partition_id: int,
    from_offset: int,
    *,
    max_records: int = 1000,
    max_bytes: int | None = None,
    until_offset: int | None = None,
) -> list[Entry]:
    """Records at offsets >= from_offset (and < until_offset), in order, up to the limits.

    `max_bytes` bounds the payload bytes returned, but the first record is always returned.
    """
    out: list[Entry] = []
    size = 0
    cursor = from_offset
    until = until_offset if until_offset is not None else 2**62
    while len(out) < max_records and cursor < until:
        rows = conn.execute(_READ, {"p": partition_id, "from": cursor, "until": until, "segments": 16}).fetchall()
        if not rows:
            break
        for first, codec, frames, ts in rows:
            for entry in decode(unpack(codec, frames), first, ts):
                if entry.offset < cursor or entry.offset >= until:
                    continue
                if len(out) >= max_records or (max_bytes is not None and out and size + len(entry.payload) > max_bytes):
                    return out
                out.append(entry)
                size += len(entry.payload)
                cursor = entry.offset + 1
        if len(rows) < 16:
            break
    return out


_READ_AT = "SELECT * FROM log_segments_at(%(p)s, %(offsets)s::bigint[])"


def read_at(conn: psycopg.Connection, partition_id: int, offsets: list[int]) -> dict[int, Entry]:
    """The records at scattered offsets: one index probe per offset, each segment unpacked once.

    Offsets removed by retention (or never written) are absent from the answer.
    """
    wanted = set(offsets)
    if not wanted:
        return {}
    out: dict[int, Entry] = {}
    for first, codec, frames, ts in conn.execute(_READ_AT, {"p": partition_id, "offsets": sorted(wanted)}):
        for entry in decode(unpack(codec, frames), first, ts):
            if entry.offset in wanted:
                out[entry.offset] = entry
    return out


def drop_before(conn: psycopg.Connection, partition_id: int, offset: int) -> int:
    """Retention: drop whole segments that end at or below `offset`; returns records removed."""
    row = conn.execute(
        """
        WITH gone AS (
            DELETE FROM log_segments WHERE partition_id = %(p)s AND end_offset <= %(o)s
            RETURNING end_offset - first_offset AS n, octet_length(frames) AS b, end_offset
        ), moved AS (
            UPDATE log_partitions SET
                start_offset = greatest(start_offset, (SELECT max(end_offset) FROM gone)),
                stored_bytes = stored_bytes - (SELECT coalesce(sum(b), 0) FROM gone)
            WHERE id = %(p)s AND EXISTS (SELECT 1 FROM gone)
        )
        SELECT coalesce(sum(n), 0) FROM gone
        """,
        {"p": partition_id, "o": offset},
    ).fetchone()
    conn.execute('DELETE FROM log_dedup WHERE partition_id = %s AND "offset" < %s', (partition_id, offset))
    return int(row[0])


def drop_older_than(conn: psycopg.Connection, partition_id: int, seconds: float) -> int:
    """Retention by age: drop whole segments committed more than `seconds` ago."""
    row = conn.execute(
        "SELECT max(end_offset) FROM log_segments WHERE partition_id = %s"
        " AND created_at < clock_timestamp() - %s * interval '1 second'",
        (partition_id, seconds),
    ).fetchone()
    return drop_before(conn, partition_id, row[0]) if row[0] is not None else 0


def delete_partitions(conn: psycopg.Connection, owner_kind: str, owner_id: int) -> int:
    """Remove an owner's partitions and everything in them; returns records removed."""
    ids = [r[0] for r in conn.execute(
        "DELETE FROM log_partitions WHERE owner_kind = %s AND owner_id = %s RETURNING id", (owner_kind, owner_id))]
    if not ids:
        return 0
    n = conn.execute(
        "WITH gone AS (DELETE FROM log_segments WHERE partition_id = ANY(%s) RETURNING end_offset - first_offset AS n)"
        " SELECT coalesce(sum(n), 0) FROM gone", (ids,)).fetchone()[0]
    conn.execute("DELETE FROM log_dedup WHERE partition_id = ANY(%s)", (ids,))
    return int(n)
