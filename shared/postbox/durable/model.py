"""The durable domain's values: whose streams a request names (`Scope`), what a create asks for,
what a write or a read did, and the content-type rules both share. No SQL, no HTTP."""

from __future__ import annotations

import json
from datetime import datetime
from typing import NamedTuple

from postbox.errors import PostboxError

from . import jsontext
from .store import Stream

DEFAULT_CONTENT_TYPE = "application/octet-stream"


class OutOfRange(PostboxError):
    """An offset past the stream's tail, where the caller asked for strict offsets (416)."""

    status, code = 416, "OFFSET_OUT_OF_RANGE"


class Scope(NamedTuple):
    """Whose streams a request names: a tenant's project."""

    tenant_id: str
    project_id: str


class Producer(NamedTuple):
    id: str
    epoch: int
    seq: int

    @property
    def token(self) -> str:
        """What a close by this producer records, so the same close again is a duplicate."""
        return json.dumps([self.id, self.epoch, self.seq])


class CreateSpec(NamedTuple):
    content_type: str | None = None
    ttl_seconds: int | None = None
    expires_at: datetime | None = None
    expires_at_text: str | None = None
    closed: bool = False
    source_name: str | None = None
    fork_offset: int | None = None
    fork_sub_offset: int = 0
    body: bytes = b""
    public: bool = False


class Created(NamedTuple):
    stream: Stream
    created: bool


class Written(NamedTuple):
    """What a write did: `next_offset` is the tail after it; `offset` where its data starts."""

    next_offset: int
    offset: int | None = None
    closed: bool = False
    producer: Producer | None = None
    duplicate: bool = False
    last_seq: int | None = None
    incarnation: str = ""


class Read(NamedTuple):
    stream: Stream
    start: int
    payloads: list[bytes]
    next_offset: int = 0
    up_to_date: bool = True

    @property
    def closed_at_tail(self) -> bool:
        return self.stream.closed and self.up_to_date and self.next_offset >= self.stream.tail

    @property
    def waits(self) -> bool:
        """Nothing to answer yet: no data, and the stream is open at this position's tail."""
        return not self.payloads and not self.stream.closed and self.start >= self.stream.tail


def media_type(content_type: str | None) -> str:
    return (content_type or "").split(";")[0].strip().lower()


def is_json(content_type: str | None) -> bool:
    return media_type(content_type) == "application/json"


def payload_of(content_type: str | None, body: bytes, *, allow_empty: bool = False) -> bytes:
    """What one append stores: a JSON stream's messages validated and packed, other bytes as sent."""
    if is_json(content_type):
        return jsontext.pack(jsontext.messages_of(body, allow_empty=allow_empty))
    return body
