"""Typed results. Each keeps the answer's full JSON in `raw`, so a field added by the server is never
lost to a client that does not know it yet."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

T = TypeVar("T")


def build(cls: type[T], data: dict[str, Any], **renamed: str) -> T:
    """An instance of the dataclass `cls` from an answer: known fields picked (`renamed` maps a
    field to its wire name), the whole answer kept in `raw`."""
    names = {f.name for f in fields(cls)} - {"raw"}  # type: ignore[arg-type]
    values = {name: data.get(renamed.get(name, name)) for name in names}
    return cls(**values, raw=data)  # type: ignore[call-arg]


# queues ------------------------------------------------------------------------------------------
@dataclass
class Queue:
    name: str
    queue_length: int | None = None
    visibility_timeout_sec: int | None = None
    max_reads: int | None = None
    dead_letter_queue: str | None = None
    retention_days: int | None = None
    sent_total: int | None = None
    dead_total: int | None = None
    metrics: dict[str, Any] | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def oldest_age_sec(self) -> float | None:
        return (self.metrics or {}).get("oldest_msg_age_sec")


@dataclass
class QueueMetrics:
    queue_name: str
    queue_length: int = 0
    visible: int = 0
    in_flight: int = 0
    delayed: int = 0
    oldest_msg_age_sec: float | None = None
    archived: int = 0
    dead_lettered: int = 0
    total_messages: int = 0
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class Message:
    msg_id: int
    message: Any = None
    read_ct: int = 0
    enqueued_at: float | None = None
    vt: float | None = None
    headers: Any = None
    dead_lettered: bool | None = None
    in_flight: bool | None = None
    archived_at: float | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


# partitioned queues ------------------------------------------------------------------------------
@dataclass
class PushResult:
    queue: str
    partition: str | None = None
    partition_id: str | None = None
    transaction_id: str | None = None
    status: str | None = None
    offset: int | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


PUSH_RENAMES = {"partition_id": "partitionId", "transaction_id": "transactionId"}


@dataclass
class Leased:
    """A message popped from a partitioned queue, with what an ack needs."""

    transaction_id: str
    lease_id: str | None
    partition_id: str
    queue: str | None = None
    partition: str | None = None
    consumer_group: str | None = None
    payload: Any = None
    offset: int | None = None
    retry_count: int = 0
    created_at: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


LEASED_RENAMES = {"transaction_id": "transactionId", "lease_id": "leaseId", "partition_id": "partitionId",
                  "consumer_group": "consumerGroup", "retry_count": "retryCount", "created_at": "createdAt"}


# keyed streams -----------------------------------------------------------------------------------
@dataclass
class Stream:
    name: str
    project: str | None = None
    messages: int | None = None
    active_keys: int | None = None
    scheduled: int | None = None
    subscriptions: list[str] | None = None
    retention: str | None = None
    max_backlog: int | None = None
    created_at: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class StreamMessage:
    id: str
    offset: int
    key: str | None = None
    payload: Any = None
    headers: Any = None
    status: str | None = None
    published_at: str | None = None
    idempotency_key: str | None = None
    receipt: str | None = None  # set on consumed messages
    attempt: int | None = None
    lease_expires_at: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class PublishResult:
    """One message of a batch publish, in its place: `ok` with the message's id, offset and status
    (`replayed` when an earlier publish with its idempotency key answered: that message's), or
    refused with `error` {code, message}."""

    ok: bool
    id: str | None = None
    offset: int | None = None
    status: str | None = None
    replayed: bool = False
    error: dict[str, str] | None = None


@dataclass
class Subscription:
    name: str
    stream: str | None = None
    max_deliveries: int | None = None
    lease_ms: int | None = None
    pending: int | None = None
    in_flight: int | None = None
    acked: int | None = None
    dead: int | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


# durable streams ---------------------------------------------------------------------------------
@dataclass
class DurableRead:
    """What one read of a durable stream gave: the messages, and where to continue."""

    messages: list[Any]
    next_offset: str | None
    up_to_date: bool
    closed: bool
    cursor: str | None = None


@dataclass
class DurableInfo:
    name: str
    next_offset: str | None
    closed: bool
    content_type: str | None
    headers: dict[str, str] = field(default_factory=dict, repr=False)
