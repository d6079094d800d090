"""How a runner talks to Postbox: over HTTP (what users run) or in process through the domain.

Both expose the same calls: register, get_state, due (the partitions holding ripe windows), cycle,
pop, and `close`. The cycle body is the wire body either way; the domain reads it (`cycle.parse`).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote


class CycleFailed(RuntimeError):
    """A cycle answered `success: false`: nothing was committed, the batch will redeliver. `code`
    says why (`not_quiet` and `state_changed` refuse an idle flush that lost a race)."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class HttpClient:
    """The `/streams/v1` routes and the partitioned-queue pop, over HTTP with an API key."""

    def __init__(self, base_url: str, key: str, *, timeout_s: float = 60.0) -> None:
        import httpx  # only HTTP runners need it

        self._http = httpx.Client(base_url=base_url.rstrip("/"), headers={"apikey": key}, timeout=timeout_s)

    def close(self) -> None:
        self._http.close()

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        r = self._http.post(path, json=body)
        data = r.json() if r.content else {}
        if r.status_code != 200:
            raise RuntimeError(f"POST {path}: {r.status_code} {data}")
        return data

    def register(self, name: str, source_queue: str, sink_queue: str | None, config_hash: str,
                 reset: bool = False) -> dict[str, Any]:
        return self._post("/streams/v1/queries", {"name": name, "source_queue": source_queue,
                                                  "sink_queue": sink_queue or "", "config_hash": config_hash,
                                                  "reset": reset})

    def get_state(self, query_id: str, partition_id: str, **filters: Any) -> list[dict[str, Any]]:
        body = {"query_id": query_id, "partition_id": partition_id,
                **{k: v for k, v in filters.items() if v is not None}}
        return self._post("/streams/v1/state/get", body)["rows"]

    def due(self, query_id: str, **filters: Any) -> list[str]:
        body = {"query_id": query_id, **{k: v for k, v in filters.items() if v is not None}}
        return self._post("/streams/v1/state/due", body)["partitions"]

    def cycle(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._post("/streams/v1/cycle", body)

    def pop(self, queue: str, *, batch: int, wait_ms: int, consumer_group: str) -> list[dict[str, Any]]:
        params = {"batch": batch, "consumerGroup": consumer_group}
        if wait_ms > 0:
            params.update({"wait": "true", "timeout": wait_ms})
        r = self._http.get(f"/api/v1/pop/queue/{quote(queue, safe='')}", params=params)
        if r.status_code == 204 or not r.content:
            return []
        if r.status_code == 404:
            return []  # the source queue does not exist yet: nothing to consume
        if r.status_code != 200:
            raise RuntimeError(f"pop {queue}: {r.status_code} {r.text[:200]}")
        data = r.json()
        return data if isinstance(data, list) else data.get("messages", [])


class LocalClient:
    """The same calls in process, through the domain functions (hosted queries, tests, benches)."""

    def __init__(self, principal: Any) -> None:
        self.principal = principal

    def close(self) -> None:
        pass

    def register(self, name: str, source_queue: str, sink_queue: str | None, config_hash: str,
                 reset: bool = False) -> dict[str, Any]:
        from .. import queries

        return queries.register(self.principal, name, source_queue, sink_queue, config_hash, reset)

    def get_state(self, query_id: str, partition_id: str, **filters: Any) -> list[dict[str, Any]]:
        from .. import state

        return state.get(self.principal, query_id, partition_id, **filters)["rows"]

    def due(self, query_id: str, **filters: Any) -> list[str]:
        from .. import state

        return state.due(self.principal, query_id, **filters)["partitions"]

    def cycle(self, body: dict[str, Any]) -> dict[str, Any]:
        from .. import cycle

        return cycle.run(self.principal, cycle.parse(body))

    def pop(self, queue: str, *, batch: int, wait_ms: int, consumer_group: str) -> list[dict[str, Any]]:
        from ...errors import NotFound
        from ...partitioned import service

        request = service.PopRequest(queue=queue, batch=batch, wait=wait_ms > 0, timeout_ms=wait_ms,
                                     consumer_group=consumer_group)
        try:
            return service.pop(self.principal, request)
        except NotFound:
            return []
