"""Catch-up reads: the appends from an offset, through a fork's source, bounded in bytes."""

from __future__ import annotations

import psycopg

from postbox import db
from postbox.errors import Gone
from postbox.log_engine import store as log

from . import catalog, store
from .model import OutOfRange, Read, Scope
from .store import Stream

READ_RECORDS = 1000  # log records one look at a partition returns


def read_range(
    conn: psycopg.Connection, stream: Stream, start: int, until: int, *, max_bytes: int | None = None
) -> list[tuple[int, bytes]]:
    """(offset, payload) of the appends in [start, until), through the fork chain, bounded in bytes
    (the first append always comes back)."""
    out: list[tuple[int, bytes]] = []
    if stream.source_id is not None and start < stream.base_offset:
        source = store.by_id(conn, stream.source_id)
        if source is not None:
            out = read_range(conn, source, start, min(until, stream.base_offset), max_bytes=max_bytes)
        if out and (out[-1][0] + 1 < min(until, stream.base_offset)):
            return out  # the byte bound stopped the inherited part
    used = sum(len(p) for _, p in out)
    own_start = max(start, stream.base_offset) - stream.base_offset
    own_until = until - stream.base_offset
    if own_until <= own_start:
        return out
    budget = None if max_bytes is None else max(max_bytes - used, 1 if not out else 0)
    if budget == 0:
        return out
    for entry in log.read(conn, stream.partition_id, own_start, max_records=READ_RECORDS, max_bytes=budget,
                          until_offset=own_until):
        if out and budget is not None and used + len(entry.payload) > max_bytes:
            break
        out.append((stream.base_offset + entry.offset, entry.payload))
        used += len(entry.payload)
    return out


def read(scope: Scope, name: str, start: int | None, *, max_bytes: int, now: bool = False,
         incarnation: str | None = None, strict: bool = False) -> Read:
    """A catch-up read from `start` (None: the stream's first retained offset; `now`: its tail).
    With `strict`, an offset past the tail is 416 rather than an empty answer at the tail."""
    with db.transaction() as conn:
        stream = catalog.get(conn, scope, name)
        catalog.check_incarnation(stream, incarnation)
        if strict and start is not None and start > stream.tail:
            raise OutOfRange("The offset is past the stream's tail.", incarnation=stream.incarnation)
        store.touch(conn, stream)
        return _read(conn, stream, start, max_bytes=max_bytes, now=now)


def _read(conn: psycopg.Connection, stream: Stream, start: int | None, *, max_bytes: int, now: bool) -> Read:
    if now:
        return Read(stream, stream.tail, [], stream.tail, True)
    begin = stream.retained_offset if start is None else start
    if begin < stream.retained_offset:
        raise Gone("Offsets below the retained offset were removed.", code="STREAM_GONE",
                   incarnation=stream.incarnation, retained_offset=stream.retained_offset)
    if begin >= stream.tail:
        return Read(stream, begin, [], stream.tail, True)
    entries = read_range(conn, stream, begin, stream.tail, max_bytes=max_bytes)
    nxt = entries[-1][0] + 1 if entries else begin
    return Read(stream, begin, [p for _, p in entries], nxt, nxt >= stream.tail)
