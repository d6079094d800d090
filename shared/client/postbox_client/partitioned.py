"""Partitioned queues (`/api/v1/push`, `/pop`, `/ack`, `/lease`, `/transaction`, `/dlq`, `/resources`).

A push whose every item carries a `transactionId` is deduplicated by the server, so it is retried
like a read; without one it is not retried once it may have landed.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from .models import LEASED_RENAMES, PUSH_RENAMES, Leased, PushResult, build
from .transport import Call


def _leased(response: Any) -> list[Leased]:
    if response.status_code == 204 or not response.content:
        return []
    data = response.json()
    items = data if isinstance(data, list) else data.get("messages", [])
    return [build(Leased, m, **LEASED_RENAMES) for m in items]


def item(queue: str, payload: Any, *, partition: str | None = None, transaction_id: str | None = None) -> dict:
    """One push item as the API takes it."""
    out: dict[str, Any] = {"queue": queue, "payload": payload}
    if partition:
        out["partition"] = partition
    if transaction_id:
        out["transactionId"] = transaction_id
    return out


class PartitionedCalls:
    def __init__(self, transport: Any) -> None:
        self._t = transport

    def configure(self, queue: str, **options: Any) -> dict[str, Any]:
        """Create the queue or change options (leaseTime, retryLimit, retryDelay, ...)."""
        return self._t.run(Call("POST", "/api/v1/configure", json={"queue": queue, "options": options},
                                idempotent=True))

    def push(self, items: list[dict[str, Any]]) -> list[PushResult]:
        """Push items (see `item()`); auto-creates queues and partitions."""
        idempotent = all(i.get("transactionId") for i in items)
        return self._t.run(Call("POST", "/api/v1/push", json={"items": items}, idempotent=idempotent,
                                parse=lambda r: [build(PushResult, x, **PUSH_RENAMES) for x in _results(r.json())]))

    def pop(self, queue: str, *, partition: str | None = None, batch: int = 1, wait_ms: int = 0,
            consumer_group: str | None = None, auto_ack: bool = False, **extra: Any) -> list[Leased]:
        """Lease up to `batch` messages of one partition; `wait_ms` long-polls. [] when none."""
        path = f"/api/v1/pop/queue/{quote(queue, safe='')}"
        if partition:
            path += f"/partition/{quote(partition, safe='')}"
        params: dict[str, Any] = {"batch": batch, "consumerGroup": consumer_group, **extra}
        if wait_ms:
            params.update(wait="true", timeout=wait_ms)
        if auto_ack:
            params["autoAck"] = "true"
        return self._t.run(Call("GET", path, params=params, wait_s=wait_ms / 1000, parse=_leased))

    def ack(self, message: Leased | None = None, *, status: str = "completed", error: str | None = None,
            **fields: Any) -> dict[str, Any]:
        """Ack a popped message (commits the group's cursor up to it) or fail it (`status="failed"`)."""
        body: dict[str, Any] = {"status": status}
        if message is not None:
            body.update(transactionId=message.transaction_id, leaseId=message.lease_id,
                        partitionId=message.partition_id)
            if message.consumer_group:
                body["consumerGroup"] = message.consumer_group
        if error:
            body["error"] = error
        body.update(fields)
        return self._t.run(Call("POST", "/api/v1/ack", json=body, idempotent=True))

    def extend(self, lease_id: str, seconds: int | None = None) -> dict[str, Any]:
        body = {} if seconds is None else {"seconds": seconds}
        return self._t.run(Call("POST", f"/api/v1/lease/{quote(lease_id, safe='')}/extend", json=body,
                                idempotent=True))

    def transaction(self, operations: list[dict[str, Any]]) -> dict[str, Any]:
        return self._t.run(Call("POST", "/api/v1/transaction", json={"operations": operations}))

    def dead_letters(self, queue: str, *, partition: str | None = None, consumer_group: str | None = None,
                     limit: int = 100, offset: int = 0) -> dict[str, Any]:
        params = {"queue": queue, "partition": partition, "consumerGroup": consumer_group, "limit": limit,
                  "offset": offset}
        return self._t.run(Call("GET", "/api/v1/dlq", params=params, idempotent=True))

    def replay(self, ids: list[str]) -> dict[str, Any]:
        """Append dead letters again at the end of their partitions."""
        return self._t.run(Call("POST", "/api/v1/dlq/replay", json={"ids": list(ids)}))

    def resource(self, queue: str) -> dict[str, Any]:
        """Options, counters, partitions and per-group lag of a queue."""
        return self._t.run(Call("GET", f"/api/v1/resources/queues/{quote(queue, safe='')}", idempotent=True))

    def history(self, queue: str, window: str = "hour") -> dict[str, Any]:
        """Depth, oldest age and messages in and out per minute, a point a minute over the last `window`
        ("hour" or "day"), as columns (`t`, `depth`, ...); recorded once a minute."""
        return self._t.run(Call("GET", f"/api/v1/resources/queues/{quote(queue, safe='')}/history",
                                params={"window": window}, idempotent=True))


def _results(data: Any) -> list[dict[str, Any]]:
    if isinstance(data, list):
        return data
    return data.get("results") or data.get("items") or []


class Partitioned(PartitionedCalls):
    """Sync partitioned-queue client."""


class AsyncPartitioned(PartitionedCalls):
    """Async partitioned-queue client: every call is awaited."""
