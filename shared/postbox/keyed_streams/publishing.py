"""Publishing one message or a batch of up to 100 in one round trip: the SQL function
keyed_stream_publish checks each message by the database clock, replays idempotent repeats,
enforces the backlog cap, appends what is new to the stream's log as one segment, indexes and
counts it and hands it to the subscriptions, under the stream row's lock (so an idempotency key
cannot be used twice by racing publishers and the backlog check cannot be overtaken). Framing,
compression and the message documents stay here.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, NamedTuple

import psycopg

from .. import jsoncodec
from ..log_engine.frames import ZSTD, Entry, Record, compress, decode, frame_each, unpack
from . import catalog, messages
from .durations import default_max_backlog, default_retention, parse_duration

MAX_BATCH = 100


class Outgoing(NamedTuple):
    payload: Any
    key: str | None = None
    headers: dict[str, Any] | None = None
    idempotency_key: str | None = None
    deliver_at: datetime | None = None
    expires_at: datetime | None = None


class Refused(NamedTuple):
    """A message of a batch that was not published, with the code and message (and status) a
    single publish of it would have answered."""

    code: str
    message: str
    status: int = 400


Answer = tuple[dict[str, Any], bool]  # (the message document, whether an earlier publish answered)


def encode(value: Any) -> bytes:
    return jsoncodec.dumps(value)


def max_backlog(stream: catalog.Stream) -> int | None:
    return stream.max_backlog if stream.max_backlog is not None else default_max_backlog()


_PUBLISH = (
    "SELECT * FROM keyed_stream_publish(%b::uuid, %b::uuid, %b::text, %b::text, %b::bigint, %b::bigint, %b::boolean,"
    " %b::text[], %b::text[], %b::timestamptz[], %b::timestamptz[], %b::int[], %b::text[], %b::bytea[],"
    " %b::smallint, %b::int, %b::bytea, %b::boolean)"
)
_STATUS = {"PB400": 400, "PB413": 413}


def publish(conn: psycopg.Connection, tenant_id: str, key_project: str | None, project: str, name: str,
            batch: list[Outgoing], *, strict: bool, documents: bool = True) -> list[Answer | Refused]:
    """One answer per message, in input order. `strict`: the first refused message raises its
    error (the call changes nothing); otherwise it is answered as Refused and the rest land.
    Each answer holds the message document, or with `documents` false only its id, offset and
    status (a batch's answer: what a caller needs to find it again, without its payload)."""
    payloads = [encode(o.payload) for o in batch]
    records = [Record(raw, key=o.key, headers=encode(o.headers) if o.headers is not None else None)
               for raw, o in zip(payloads, batch, strict=True)]
    frames = frame_each(records)
    raw = b"".join(frames)
    codec, packed = compress(raw)
    rows = conn.execute(_PUBLISH, (
        tenant_id, key_project, project, name, parse_duration(default_retention()), default_max_backlog(), strict,
        [o.key for o in batch], [o.idempotency_key for o in batch], [o.deliver_at for o in batch],
        [o.expires_at for o in batch], [len(p) for p in payloads], messages.new_ids(len(batch)), frames,
        codec, len(raw), packed if codec == ZSTD else None, documents,
    )).fetchall()
    if not documents:
        return [_summary(row) for row in rows if row[0] == "item"]
    entries: dict[int, Entry] = {}
    for row in rows:
        if row[0] == "segment":
            first, seg_codec, seg_frames, ts = row[8], row[16], row[17], row[18]
            for entry in decode(unpack(seg_codec, seg_frames), first, ts):
                entries[entry.offset] = entry
    return [_answer(row, name, batch, entries) for row in rows if row[0] == "item"]


def _summary(row: tuple) -> Answer | Refused:
    _, _, outcome, state, code, message, _, _, offset, msg_id, _, status, *_ = row
    if outcome == "refused":
        return Refused(code, message, _STATUS.get(state, 400))
    return {"id": msg_id, "offset": offset, "status": status}, outcome == "replayed"


def _answer(row: tuple, stream: str, batch: list[Outgoing], entries: dict[int, Entry]) -> Answer | Refused:
    (_, index, outcome, state, code, message, same, project, offset, msg_id, key, status, idempotency_key,
     deliver_at, expires_at, published_at, *_) = row
    if outcome == "refused":
        return Refused(code, message, _STATUS.get(state, 400))
    stored = messages.Row(offset, msg_id, key, messages.unit_of(key, offset), status, idempotency_key, deliver_at,
                          expires_at, published_at)
    if outcome == "published" or same is not None:
        original = batch[(same or index) - 1]
        return messages.shaped(stream, project, stored, original.payload, original.headers), outcome == "replayed"
    entry = entries.get(offset)
    payload = json.loads(entry.payload) if entry is not None else None
    headers = json.loads(entry.headers) if entry is not None and entry.headers is not None else None
    return messages.shaped(stream, project, stored, payload, headers), True
