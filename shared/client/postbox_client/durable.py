"""Durable streams (`/v1/stream/{name}`): the Durable Streams protocol, read by offset, tailed live.

An append with a producer (`Producer-Id`, `-Epoch`, `-Seq`) is deduplicated by the server, so it is
retried like a read; without one it is not retried once it may have landed.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import quote

import httpx

from .models import DurableInfo, DurableRead
from .transport import Call

JSON = "application/json"
START = "-1"
LONG_POLL = "long-poll"


def path(name: str) -> str:
    return f"/v1/stream/{quote(name, safe='')}"


def _flag(headers: httpx.Headers, name: str) -> bool:
    return headers.get(name, "").lower() == "true"


def _read(response: httpx.Response) -> DurableRead:
    messages: list[Any] = []
    if response.status_code == 200 and response.content:
        if response.headers.get("content-type", "").startswith(JSON):
            data = response.json()
            messages = data if isinstance(data, list) else [data]
        else:
            messages = [response.content]
    h = response.headers
    return DurableRead(messages, h.get("stream-next-offset"), _flag(h, "stream-up-to-date"),
                       _flag(h, "stream-closed"), h.get("stream-cursor"))


def _info(name: str, response: httpx.Response) -> DurableInfo:
    h = response.headers
    return DurableInfo(name, h.get("stream-next-offset"), _flag(h, "stream-closed"), h.get("content-type"), dict(h))


class DurableCalls:
    def __init__(self, transport: Any) -> None:
        self._t = transport

    def create(self, name: str, *, content_type: str = JSON, ttl_s: int | None = None,
               public: bool = False) -> DurableInfo:
        """Create (201) or confirm (200, same configuration) a stream."""
        headers = {"content-type": content_type}
        if ttl_s is not None:
            headers["stream-ttl"] = str(ttl_s)
        if public:
            headers["postbox-public"] = "true"
        return self._t.run(Call("PUT", path(name), headers=headers, content=b"", idempotent=True,
                                parse=lambda r: _info(name, r)))

    def append(self, name: str, data: Any, *, content_type: str = JSON,
               producer: tuple[str, int, int] | None = None) -> str | None:
        """Append one message (a JSON array: one message per element); the next offset."""
        body = data if isinstance(data, bytes) else json.dumps(data, separators=(",", ":")).encode()
        headers = {"content-type": content_type}
        if producer:
            headers.update({"producer-id": producer[0], "producer-epoch": str(producer[1]),
                            "producer-seq": str(producer[2])})
        return self._t.run(Call("POST", path(name), headers=headers, content=body, idempotent=producer is not None,
                                parse=lambda r: r.headers.get("stream-next-offset")))

    def read(self, name: str, offset: str = START, *, live: bool = False, cursor: str | None = None) -> DurableRead:
        """Messages from `offset` (`-1` the start, `now` the tail); `live` long-polls for new ones."""
        params = {"offset": offset, "live": LONG_POLL if live else None, "cursor": cursor}
        return self._t.run(Call("GET", path(name), params=params, idempotent=True, wait_s=30 if live else 0,
                                parse=_read))

    def head(self, name: str) -> DurableInfo:
        return self._t.run(Call("HEAD", path(name), idempotent=True, parse=lambda r: _info(name, r)))

    def close(self, name: str) -> None:
        return self._t.run(Call("POST", path(name), headers={"stream-closed": "true"}, content=b"", idempotent=True,
                                parse=lambda r: None))

    def delete(self, name: str) -> None:
        return self._t.run(Call("DELETE", path(name), idempotent=True, parse=lambda r: None))


class Durable(DurableCalls):
    """Sync durable-stream client."""

    def tail(self, name: str, offset: str = START, *, stop: Any = None) -> Iterator[Any]:
        """Every message from `offset` on, then new ones as they are appended, until the stream
        closes or `stop` (a threading.Event) is set (checked between long polls)."""
        cursor, live = None, False  # catch up first, then long-poll
        while stop is None or not stop.is_set():
            got = self.read(name, offset, live=live, cursor=cursor)
            yield from got.messages
            offset, cursor, live = got.next_offset or offset, got.cursor or cursor, True
            if got.closed:
                return


class AsyncDurable(DurableCalls):
    """Async durable-stream client: every call is awaited."""

    async def tail(self, name: str, offset: str = START) -> AsyncIterator[Any]:
        cursor, live = None, False
        while True:
            got = await self.read(name, offset, live=live, cursor=cursor)
            for message in got.messages:
                yield message
            offset, cursor, live = got.next_offset or offset, got.cursor or cursor, True
            if got.closed:
                return
