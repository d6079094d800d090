"""The flows runner's calls over HTTP, on the client: register, get_state, due and cycle through
`Flows`, pop through `Partitioned` (retried and typed like every client call)."""

from __future__ import annotations

from typing import Any

from ..client import Client
from ..errors import NotFound


class HttpClient:
    """What a `Runner` needs, over HTTP with an API key (URL and key as for `Client`)."""

    def __init__(self, base_url: str | None = None, key: str | None = None, *, timeout_s: float = 60.0,
                 client: Client | None = None) -> None:
        self._own = client is None
        self.pb = client or Client(base_url, key, timeout_s=timeout_s)

    def close(self) -> None:
        if self._own:
            self.pb.close()

    def register(self, name: str, source_queue: str, sink_queue: str | None, config_hash: str,
                 reset: bool = False) -> dict[str, Any]:
        return self.pb.flows.register(name, source_queue, sink_queue, config_hash, reset)

    def get_state(self, query_id: str, partition_id: str, **filters: Any) -> list[dict[str, Any]]:
        return self.pb.flows.state(query_id, partition_id, **filters)

    def due(self, query_id: str, **filters: Any) -> list[str]:
        return self.pb.flows.due(query_id, **filters)

    def cycle(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.pb.flows.cycle(body)

    def resource(self, queue: str) -> dict[str, Any] | None:
        """The source queue's partitions and consumer groups' lag (None before the queue exists)."""
        try:
            return self.pb.partitioned.resource(queue)
        except NotFound:
            return None

    def pop(self, queue: str, *, batch: int, wait_ms: int, consumer_group: str) -> list[dict[str, Any]]:
        try:
            leased = self.pb.partitioned.pop(queue, batch=batch, wait_ms=wait_ms, consumer_group=consumer_group)
        except NotFound:
            return []  # the source queue does not exist yet: nothing to consume
        return [m.raw for m in leased]
