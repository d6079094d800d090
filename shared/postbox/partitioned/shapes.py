"""How a partitioned queue shows what it hands out: message documents, timestamps, ack statuses."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ..log_engine.frames import Entry
from . import QUEUE_MODE, payloads

OK_STATUSES = frozenset({"completed", "success", "acked", "ok"})


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def is_ok(status: str | None) -> bool:
    """Success for `completed`, `success`, `acked`, `ok` and an absent status; anything else fails."""
    return status is None or status.lower() in OK_STATUSES


def is_dead_letter(status: str | None) -> bool:
    """`dlq`: the message goes to the dead letters at once, whatever retries are left (Queen's)."""
    return status is not None and status.lower() == "dlq"


def messages(queue: str, partition: str, partition_id: int, group: str, entries: list[Entry],
             lease_id: str | None, retries: int) -> list[dict[str, Any]]:
    """A leased batch as the API shows it, with the payloads decoded together. `retryCount` is the
    batch's failed deliveries so far (its attempts)."""
    values = payloads.decode_many([e.payload for e in entries], [e.headers for e in entries])
    pid, shown_group = str(partition_id), None if group == QUEUE_MODE else group
    stamps: dict[int, str] = {}
    out = []
    for e, data in zip(entries, values, strict=True):
        created = stamps.get(e.ts_ms)
        if created is None:
            created = stamps[e.ts_ms] = iso(e.ts_ms)
        out.append({"id": e.key, "messageId": e.key, "transactionId": e.id, "queue": queue, "partition": partition,
                    "partitionId": pid, "consumerGroup": shown_group, "leaseId": lease_id, "offset": e.offset,
                    "retryCount": retries, "createdAt": created, "data": data, "payload": data})
    return out
