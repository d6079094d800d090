"""Chunk streams: long outputs published as ordered chunks (messages carrying `stream`
{id, seq, final}) and read back assembled.

Chunks are recorded by the publish function (`work_stream_chunk`), one stream at a time, so
duplicates and out-of-order arrivals are settled there; this module lists, describes, cancels and
assembles streams. A chunk lives as long as its message (the archiver's retention).
"""

from __future__ import annotations

import json
from typing import Any

import psycopg

from .. import db
from ..errors import Conflict, NotFound
from ..tenancy import Principal, require
from . import acl, audit
from .common import INVALID_TRANSITION, MANAGE, SCOPE_NOT_FOUND, VIEW, decode_cursor, page, parse_id

STREAM_NOT_FOUND = "SCAIQUEUE_STREAM_NOT_FOUND"
STATES = ("open", "complete", "cancelled")
MODES = ("concatenate", "lines", "json")
MAX_ASSEMBLED = 10_000  # chunks
MAX_MISSING = 1000

_DOC = """jsonb_build_object('id', st.stream_key, 'scope_id', st.scope_id,
    'queue_id', (SELECT queue_id FROM work_queues WHERE id = st.queue_id), 'state', st.state,
    'chunks_received', st.chunks, 'final_seq', st.final_seq, 'created_at', st.created_at,
    'updated_at', st.updated_at, 'ended_at', st.ended_at)"""

_SUMMARY = """
SELECT count(*), min(c.seq), max(c.seq), coalesce(sum(octet_length(m.body::text)), 0),
       (SELECT array_agg(g ORDER BY g) FROM (
            SELECT g FROM generate_series(0, coalesce(%(final)s, max(c.seq))) g
            WHERE NOT EXISTS (SELECT 1 FROM work_stream_chunks x WHERE x.stream = %(id)s AND x.seq = g)
            ORDER BY g LIMIT %(n)s) missing)
FROM work_stream_chunks c JOIN work_messages m ON m.id = c.message_id WHERE c.stream = %(id)s
"""


def _missing() -> NotFound:
    return NotFound("Stream not found.", code=STREAM_NOT_FOUND)


def _row(conn: psycopg.Connection, scope_id: str, key: str, *, lock: bool = False) -> tuple[int, dict[str, Any]]:
    row = conn.execute(f"SELECT st.id, {_DOC} FROM work_streams st WHERE st.scope_id = %s AND st.stream_key = %s"
                       + (" FOR UPDATE" if lock else ""), (scope_id, key)).fetchone()
    if row is None:
        raise _missing()
    return row[0], row[1]


def list_streams(principal: Principal, scope_id: str, state: str | None, limit: int = 50,
                 cursor: str | None = None) -> tuple[list[dict], str | None]:
    """The scope's streams, newest first, optionally in one state."""
    tenant_id = require(principal, VIEW)
    scope_id = parse_id(scope_id, SCOPE_NOT_FOUND)
    before = decode_cursor(cursor, "streams")
    with db.connection() as conn:
        acl.load_scope(conn, principal, tenant_id, scope_id, VIEW)
        rows = conn.execute(
            f"SELECT st.id, {_DOC} FROM work_streams st WHERE st.scope_id = %s"
            " AND (%s::text IS NULL OR st.state = %s) AND (%s::bigint IS NULL OR st.id < %s)"
            " ORDER BY st.id DESC LIMIT %s", (scope_id, state, state, before, before, limit + 1)).fetchall()
    rows, nxt = page(rows, limit, "streams", lambda r: r[0])
    return [r[1] for r in rows], nxt


def get_stream(principal: Principal, scope_id: str, key: str) -> dict[str, Any]:
    """The stream with a summary of its chunks: how many, the first and last seq, the bytes of
    their bodies, and the sequence numbers still missing (up to the final one, or the highest seen)."""
    tenant_id = require(principal, VIEW)
    scope_id = parse_id(scope_id, SCOPE_NOT_FOUND)
    with db.connection() as conn:
        acl.load_scope(conn, principal, tenant_id, scope_id, VIEW)
        ident, doc = _row(conn, scope_id, key)
        n, first, last, size, gaps = conn.execute(_SUMMARY, {"id": ident, "final": doc["final_seq"],
                                                             "n": MAX_MISSING}).fetchone()
    return {**doc, "chunks": {"received": n, "first_seq": first, "last_seq": last, "bytes": int(size),
                              "missing": gaps or []}}


def cancel(principal: Principal, scope_id: str, key: str) -> dict[str, Any]:
    """An open stream becomes `cancelled`: no further chunk is accepted. Its chunks stay."""
    tenant_id = require(principal, MANAGE)
    scope_id = parse_id(scope_id, SCOPE_NOT_FOUND)
    with db.transaction() as conn:
        acl.load_scope(conn, principal, tenant_id, scope_id, MANAGE)
        ident, doc = _row(conn, scope_id, key, lock=True)
        if doc["state"] != "open":
            raise Conflict(f"Only an open stream can be cancelled; this one is {doc['state']}.",
                           code=INVALID_TRANSITION)
        conn.execute("UPDATE work_streams SET state = 'cancelled', ended_at = clock_timestamp(),"
                     " updated_at = clock_timestamp() WHERE id = %s", (ident,))
        audit.record(conn, principal, "scaiqueue.stream.cancelled", "stream", key, scope_id=scope_id)
        return _row(conn, scope_id, key)[1]


def _text(body: Any) -> str:
    return body if isinstance(body, str) else json.dumps(body, separators=(",", ":"), ensure_ascii=False)


def assembled(principal: Principal, scope_id: str, key: str, mode: str = "concatenate") -> dict[str, Any]:
    """The chunks' bodies in seq order, from 0 up to the first gap: `concatenate` joins them as
    text (objects as JSON), `lines` joins them with newlines, `json` lists them. `complete` says
    whether that is the whole stream; `missing` lists the gaps that stop it."""
    summary = get_stream(principal, scope_id, key)
    with db.connection() as conn:
        bodies = conn.execute(
            "SELECT c.seq, m.body FROM work_stream_chunks c JOIN work_messages m ON m.id = c.message_id"
            " JOIN work_streams st ON st.id = c.stream WHERE st.scope_id = %s AND st.stream_key = %s"
            " ORDER BY c.seq LIMIT %s", (parse_id(scope_id, SCOPE_NOT_FOUND), key, MAX_ASSEMBLED)).fetchall()
    parts = []
    for expected, (seq, body) in enumerate(bodies):
        if seq != expected:
            break
        parts.append(body)
    separator = "\n" if mode == "lines" else ""
    content: Any = parts if mode == "json" else separator.join(_text(p) for p in parts)
    complete = summary["final_seq"] is not None and len(parts) == summary["final_seq"] + 1
    return {"id": key, "mode": mode, "state": summary["state"], "complete": complete, "chunks": len(parts),
            "missing": summary["chunks"]["missing"], "content": content}
