"""Flows (`/streams/v1`): register a streaming query, read its state, find ripe partitions, commit a cycle.

These are the three calls a flows runner makes; the cycle is one server transaction guarded by the
source lease, so repeating it after a lost answer is harmless (it fails on the released lease).
"""

from __future__ import annotations

from typing import Any

from ..transport import Call


class FlowCalls:
    def __init__(self, transport: Any) -> None:
        self._t = transport

    def register(self, name: str, source_queue: str, sink_queue: str | None, config_hash: str,
                 reset: bool = False) -> dict[str, Any]:
        """Register (or re-register) a query by name; the answer carries its `query_id`."""
        body = {"name": name, "source_queue": source_queue, "sink_queue": sink_queue or "",
                "config_hash": config_hash, "reset": reset}
        return self._t.run(Call("POST", "/streams/v1/queries", json=body, idempotent=True))

    def state(self, query_id: str, partition_id: str, **filters: Any) -> list[dict[str, Any]]:
        """The query's state rows on one source partition, ordered by key; filters as the route takes
        them (keys, key_prefix, ripe_at_or_before)."""
        body = {"query_id": query_id, "partition_id": partition_id,
                **{k: v for k, v in filters.items() if v is not None}}
        return self._t.run(Call("POST", "/streams/v1/state/get", json=body, idempotent=True,
                                parse=lambda r: r.json()["rows"]))

    def due(self, query_id: str, **filters: Any) -> list[str]:
        """The source partitions holding state rows ripe for an idle flush."""
        body = {"query_id": query_id, **{k: v for k, v in filters.items() if v is not None}}
        return self._t.run(Call("POST", "/streams/v1/state/due", json=body, idempotent=True,
                                parse=lambda r: r.json()["partitions"]))

    def cycle(self, body: dict[str, Any]) -> dict[str, Any]:
        """Commit state ops, sink pushes and the source ack together. Read `success` in the answer."""
        return self._t.run(Call("POST", "/streams/v1/cycle", json=body, idempotent=True))


class Flows(FlowCalls):
    """Sync flows client."""


class AsyncFlows(FlowCalls):
    """Async flows client: every call is awaited."""
