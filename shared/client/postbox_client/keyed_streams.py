"""Keyed streams (`/v1/streams`): publish with a key, consume through named subscriptions, ack.

A publish that carries an `idempotency_key` is retried like a read (the server answers the first
message again); without one it is not retried once it may have landed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from .models import PublishResult, Stream, StreamMessage, Subscription, build
from .transport import Call


def _s(stream: str) -> str:
    return f"/v1/streams/{quote(stream, safe='')}"


def _sub(stream: str, subscription: str) -> str:
    return f"{_s(stream)}/subscriptions/{quote(subscription, safe='')}"


def _messages(data: dict[str, Any]) -> list[StreamMessage]:
    return [build(StreamMessage, m) for m in data.get("messages", [])]


def _result(data: dict[str, Any]) -> PublishResult:
    if not data.get("ok"):
        return PublishResult(False, error=data.get("error"))
    return PublishResult(True, data.get("id"), data.get("offset"), data.get("status"), bool(data.get("replayed")))


class StreamCalls:
    def __init__(self, transport: Any, project: str | None = None) -> None:
        self._t = transport
        self.project = project

    def _p(self, **params: Any) -> dict[str, Any]:
        return {"project": self.project, **params}

    def list(self) -> list[Stream]:
        return self._t.run(Call("GET", "/v1/streams", params=self._p(), idempotent=True,
                                parse=lambda r: [build(Stream, s) for s in r.json()["streams"]]))

    def create(self, name: str, *, retention: str | None = None, max_backlog: int | None = None) -> dict[str, Any]:
        body = {"name": name, "retention": retention, "max_backlog": max_backlog, "project": self.project}
        return self._t.run(Call("POST", "/v1/streams", json={k: v for k, v in body.items() if v is not None}))

    def get(self, stream: str) -> Stream:
        return self._t.run(Call("GET", _s(stream), params=self._p(), idempotent=True,
                                parse=lambda r: build(Stream, r.json())))

    def history(self, stream: str, window: str = "hour") -> dict[str, Any]:
        """Depth, oldest age and messages in and out per minute, a point a minute over the last `window`
        ("hour" or "day"), as columns (`t`, `depth`, ...); recorded once a minute."""
        return self._t.run(Call("GET", _s(stream) + "/history", params=self._p(window=window), idempotent=True))

    def update(self, stream: str, **changes: Any) -> dict[str, Any]:
        return self._t.run(Call("PATCH", _s(stream), params=self._p(), json=changes, idempotent=True))

    def delete(self, stream: str) -> dict[str, Any]:
        return self._t.run(Call("DELETE", _s(stream), params=self._p(), idempotent=True))

    def publish(self, stream: str, payload: Any, *, key: str | None = None, headers: dict[str, Any] | None = None,
                idempotency_key: str | None = None, deliver_at: str | None = None,
                expires_at: str | None = None) -> tuple[StreamMessage, bool]:
        """Publish one message; (the message, whether an earlier publish with this idempotency key answered)."""
        body = {"payload": payload, "key": key, "headers": headers, "idempotency_key": idempotency_key,
                "deliver_at": deliver_at, "expires_at": expires_at}
        return self._t.run(Call(
            "POST", _s(stream) + "/messages", params=self._p(), json={k: v for k, v in body.items() if v is not None},
            idempotent=idempotency_key is not None,
            parse=lambda r: (build(StreamMessage, r.json()["message"]), bool(r.json().get("replayed")))))

    def publish_batch(self, stream: str, messages: list[dict[str, Any]]) -> list[PublishResult]:
        """Publish up to 100 messages in one request, each a dict of a publish's fields (`payload`,
        and optionally `key`, `headers`, `idempotency_key`, `deliver_at`, `expires_at`). One result
        per message, in order: a refused message (its code says why) does not stop the others. Retried
        like a read only when every message carries an idempotency_key."""
        body = {"messages": list(messages)}
        return self._t.run(Call(
            "POST", _s(stream) + "/messages/batch", params=self._p(), json=body,
            idempotent=bool(body["messages"]) and all(isinstance(m, dict) and m.get("idempotency_key")
                                                      for m in body["messages"]),
            parse=lambda r: [_result(x) for x in r.json()["results"]]))

    def browse(self, stream: str, *, key: str | None = None, status: str | None = None, q: str | None = None,
               limit: int = 100, before_offset: int | None = None) -> tuple[list[StreamMessage], int | None]:
        """Messages newest first, and the offset to continue from (None at the start)."""
        params = self._p(key=key, status=status, q=q, limit=limit, before_offset=before_offset)
        return self._t.run(Call("GET", _s(stream) + "/messages", params=params, idempotent=True,
                                parse=lambda r: (_messages(r.json()), r.json().get("next_before_offset"))))

    def message(self, stream: str, offset: int) -> StreamMessage:
        return self._t.run(Call("GET", f"{_s(stream)}/messages/{offset}", params=self._p(), idempotent=True,
                                parse=lambda r: build(StreamMessage, r.json().get("message", r.json()))))

    def cancel(self, stream: str, offset: int) -> StreamMessage:
        return self._t.run(Call("POST", f"{_s(stream)}/messages/{offset}/cancel", params=self._p(), idempotent=True,
                                parse=lambda r: build(StreamMessage, r.json()["message"])))

    def subscriptions(self, stream: str) -> list[Subscription]:
        return self._t.run(Call("GET", _s(stream) + "/subscriptions", params=self._p(), idempotent=True,
                                parse=lambda r: [build(Subscription, s) for s in r.json()["subscriptions"]]))

    def subscribe(self, stream: str, name: str, *, max_deliveries: int | None = None, lease_ms: int | None = None,
                  start: str | None = None) -> Subscription:
        body = {"name": name, "max_deliveries": max_deliveries, "lease_ms": lease_ms, "start": start}
        return self._t.run(Call("POST", _s(stream) + "/subscriptions", params=self._p(),
                                json={k: v for k, v in body.items() if v is not None},
                                parse=lambda r: build(Subscription, r.json())))

    def subscription(self, stream: str, name: str) -> Subscription:
        return self._t.run(Call("GET", _sub(stream, name), params=self._p(), idempotent=True,
                                parse=lambda r: build(Subscription, r.json())))

    def unsubscribe(self, stream: str, name: str) -> dict[str, Any]:
        return self._t.run(Call("DELETE", _sub(stream, name), params=self._p(), idempotent=True))

    def consume(self, stream: str, subscription: str, *, max_messages: int = 10, lease_ms: int | None = None,
                wait_ms: int = 0) -> list[StreamMessage]:
        """Lease up to `max_messages` (one per key); `wait_ms` (≤ 20 s) long-polls."""
        body = {"max_messages": max_messages, "wait_ms": wait_ms, **({"lease_ms": lease_ms} if lease_ms else {})}
        return self._t.run(Call("POST", _sub(stream, subscription) + "/consume", params=self._p(), json=body,
                                wait_s=wait_ms / 1000, parse=lambda r: _messages(r.json())))

    def ack(self, stream: str, subscription: str, receipts: list[str]) -> dict[str, Any]:
        return self._t.run(Call("POST", _sub(stream, subscription) + "/ack", params=self._p(),
                                json={"receipts": list(receipts)}, idempotent=True))

    def nack(self, stream: str, subscription: str, receipts: list[str], *, delay_ms: int = 0) -> dict[str, Any]:
        return self._t.run(Call("POST", _sub(stream, subscription) + "/nack", params=self._p(),
                                json={"receipts": list(receipts), "delay_ms": delay_ms}, idempotent=True))

    def dead(self, stream: str, subscription: str, *, limit: int = 100) -> dict[str, Any]:
        return self._t.run(Call("GET", _sub(stream, subscription) + "/dead", params=self._p(limit=limit),
                                idempotent=True))


class Streams(StreamCalls):
    """Sync keyed-stream client."""

    def tail(self, stream: str, *, key: str | None = None, after: int | None = None, from_start: bool = False,
             interval_s: float = 1.0, stop: Any = None) -> Iterator[StreamMessage]:
        """Follow a stream, oldest first, polling every `interval_s`: the messages after offset `after`,
        else every one retained (`from_start`), else those published from now on. `stop` (a
        threading.Event) ends it."""
        newest = after if after is not None else None if from_start else self._newest_offset(stream, key)
        while stop is None or not stop.is_set():
            fresh = self._after(stream, key, newest)
            yield from fresh
            if fresh:
                newest = fresh[-1].offset
            elif stop is not None:
                stop.wait(interval_s)
            else:
                time.sleep(interval_s)

    def _newest_offset(self, stream: str, key: str | None) -> int:
        found, _ = self.browse(stream, key=key, limit=1)
        return found[0].offset if found else -1

    def _after(self, stream: str, key: str | None, newest: int | None) -> list[StreamMessage]:
        out: list[StreamMessage] = []
        before = None
        while True:
            page, before = self.browse(stream, key=key, limit=200, before_offset=before)
            fresh = [m for m in page if newest is None or m.offset > newest]
            out += fresh
            if len(fresh) < len(page) or before is None:
                return sorted(out, key=lambda m: m.offset)


class AsyncStreams(StreamCalls):
    """Async keyed-stream client: every call is awaited."""
