"""The append: one SQL call (`durable_append`) on an autocommit connection, so the row lock, the
protocol's checks, the log append, producer state, close and the wake-up commit together in one
round trip. The body is validated (JSON mode) and framed here first; the function raises each
refusal as a `PB4xx` error in the order the protocol documents its checks, an invalid body in its
place among them, and answers only the kinds of success."""

from __future__ import annotations

from postbox import db
from postbox.errors import Invalid
from postbox.log_engine.frames import Record, pack

from .model import Producer, Scope, Written, media_type, payload_of

MAX_PRODUCERS = 10_000  # producers one stream remembers (429 PRODUCER_LIMIT beyond)
_APPEND = "SELECT * FROM durable_append(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %b)"


def append(
    scope: Scope,
    name: str,
    body: bytes,
    *,
    content_type: str | None,
    seq: str | None = None,
    close: bool = False,
    producer: Producer | None = None,
    incarnation: str | None = None,
) -> Written:
    """Append `body` (empty: only close), checking Stream-Seq, the producer's (epoch, seq) and the
    stream's state under its row lock."""
    invalid: Invalid | None = None
    codec = raw = frames = None
    if body:
        try:
            payload = payload_of(content_type, body)  # the request's type: the stream's, or a mismatch
        except Invalid as e:
            invalid = e
        else:
            codec, frames, raw = pack([Record(payload)])
    params = (
        scope.project_id, name, media_type(content_type), incarnation, seq, close,
        producer.id if producer else None, producer.epoch if producer else None,
        producer.seq if producer else None, producer.token if producer else None, MAX_PRODUCERS,
        invalid.message if invalid else None, invalid.code if invalid else None, codec, raw, frames,
    )
    with db.domain_errors(), db.connection() as conn:
        outcome, tail, offset, stream_incarnation, last_seq = conn.execute(_APPEND, params).fetchone()
    if outcome == "appended":
        return Written(tail, offset=offset, closed=close, producer=producer, incarnation=stream_incarnation)
    if outcome == "closed_now":
        return Written(tail, closed=True, producer=producer, incarnation=stream_incarnation)
    if outcome == "duplicate":
        return Written(tail, producer=producer, duplicate=True, last_seq=last_seq, incarnation=stream_incarnation)
    if outcome == "closed_duplicate":
        return Written(tail, closed=True, producer=producer, duplicate=True, last_seq=producer.seq,
                       incarnation=stream_incarnation)
    if outcome == "closed_again":  # closing a closed stream, with no body and no producer
        return Written(tail, closed=True, incarnation=stream_incarnation)
    raise RuntimeError(f"durable_append answered {outcome!r}")
