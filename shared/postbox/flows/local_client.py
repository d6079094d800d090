"""How a flows runner talks to Postbox in process, through the domain functions: hosted queries,
tests and benchmarks. (Over HTTP it is `postbox_client.flows.HttpClient`.) The calls are the
runner's: register, get_state, due, cycle, pop, resource (its lag) and `close`; the cycle body is
the wire body.
"""

from __future__ import annotations

from typing import Any


class LocalClient:
    """The same calls in process, through the domain functions (hosted queries, tests, benches)."""

    def __init__(self, principal: Any) -> None:
        self.principal = principal

    def close(self) -> None:
        pass

    def register(self, name: str, source_queue: str, sink_queue: str | None, config_hash: str,
                 reset: bool = False) -> dict[str, Any]:
        from . import queries

        return queries.register(self.principal, name, source_queue, sink_queue, config_hash, reset)

    def get_state(self, query_id: str, partition_id: str, **filters: Any) -> list[dict[str, Any]]:
        from . import state

        return state.get(self.principal, query_id, partition_id, **filters)["rows"]

    def due(self, query_id: str, **filters: Any) -> list[str]:
        from . import state

        return state.due(self.principal, query_id, **filters)["partitions"]

    def cycle(self, body: dict[str, Any]) -> dict[str, Any]:
        from . import cycle

        return cycle.run(self.principal, cycle.parse(body))

    def resource(self, queue: str) -> dict[str, Any] | None:
        """The source queue's partitions and consumer groups' lag (None before the queue exists)."""
        from ..errors import NotFound
        from ..partitioned import service

        try:
            return service.queue_resource(self.principal, queue)
        except NotFound:
            return None

    def pop(self, queue: str, *, batch: int, wait_ms: int, consumer_group: str) -> list[dict[str, Any]]:
        from ..errors import NotFound
        from ..partitioned import service

        request = service.PopRequest(queue=queue, batch=batch, wait=wait_ms > 0, timeout_ms=wait_ms,
                                     consumer_group=consumer_group)
        try:
            return service.pop(self.principal, request)
        except NotFound:
            return []
