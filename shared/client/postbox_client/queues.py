"""Queues (`/api/v1/queues`): pgmq-style queues with visibility timeouts and dead letters.

`Queues` (sync) and `AsyncQueues` share every call; each adds its own `consume` loop and dead-letter
replay, which need to wait and run handlers in its own way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from .models import Message, Queue, QueueMetrics, build
from .transport import Call

BASE = "/api/v1/queues"
DEAD = "dead"


def _q(name: str) -> str:
    return f"{BASE}/{quote(name, safe='')}"


@dataclass
class Page:
    messages: list[Message]
    next_before: int | None


def _messages(data: dict[str, Any]) -> list[Message]:
    return [build(Message, m) for m in data.get("messages", [])]


class QueueCalls:
    """The routes, one method each. Returns the value, or (async) a coroutine of it."""

    def __init__(self, transport: Any) -> None:
        self._t = transport

    def list(self) -> list[Queue]:
        return self._t.run(Call("GET", BASE, idempotent=True,
                                parse=lambda r: [build(Queue, q) for q in r.json()["queues"]]))

    def create(self, name: str, **settings: Any) -> Queue:
        """Create a queue; settings as the API names them (visibility_timeout_sec, max_reads,
        dead_letter_queue, retention_days, app_send, consumer, description)."""
        return self._t.run(Call("POST", BASE, json={"name": name, **settings}, parse=lambda r: build(Queue, r.json())))

    def get(self, name: str) -> Queue:
        return self._t.run(Call("GET", _q(name), idempotent=True, parse=lambda r: build(Queue, r.json())))

    def update(self, name: str, **settings: Any) -> Queue:
        return self._t.run(Call("PATCH", _q(name), json=settings, idempotent=True,
                                parse=lambda r: build(Queue, r.json())))

    def delete(self, name: str) -> dict[str, Any]:
        return self._t.run(Call("DELETE", _q(name), idempotent=True))

    def metrics(self, name: str) -> QueueMetrics:
        return self._t.run(Call("GET", _q(name) + "/metrics", idempotent=True,
                                parse=lambda r: build(QueueMetrics, r.json())))

    def history(self, name: str, window: str = "hour") -> dict[str, Any]:
        """Depth, oldest age and messages in and out per minute, a point a minute over the last `window`
        ("hour" or "day"), as columns (`t`, `depth`, ...); recorded once a minute."""
        return self._t.run(Call("GET", _q(name) + "/history", params={"window": window}, idempotent=True))

    def send(self, name: str, message: Any, *, delay: float = 0, headers: dict[str, Any] | None = None) -> int:
        """Send one message; its msg_id. Not retried once it may have landed (a send has no idempotency key)."""
        body = {"message": message, "delay": delay, **({"headers": headers} if headers else {})}
        return self._t.run(Call("POST", _q(name) + "/send", json=body, parse=lambda r: r.json()["msg_id"]))

    def send_batch(self, name: str, messages: list[Any], *, delay: float = 0,
                   headers: dict[str, Any] | None = None) -> list[int]:
        body = {"messages": messages, "delay": delay, **({"headers": headers} if headers else {})}
        return self._t.run(Call("POST", _q(name) + "/send_batch", json=body, parse=lambda r: r.json()["msg_ids"]))

    def read(self, name: str, qty: int = 1, *, vt: float | None = None, wait_seconds: float = 0) -> list[Message]:
        """Claim up to `qty` messages for `vt` seconds; `wait_seconds` (≤ 20) long-polls."""
        body: dict[str, Any] = {"qty": qty, "wait_seconds": wait_seconds}
        if vt is not None:
            body["vt"] = vt
        return self._t.run(Call("POST", _q(name) + "/read", json=body, wait_s=wait_seconds,
                                parse=lambda r: _messages(r.json())))

    def pop(self, name: str, qty: int = 1) -> list[Message]:
        """Read and delete at once (at-most-once)."""
        return self._t.run(Call("POST", _q(name) + "/pop", json={"qty": qty}, parse=lambda r: _messages(r.json())))

    def archive(self, name: str, msg_ids: list[int]) -> list[int]:
        return self._t.run(Call("POST", _q(name) + "/archive", json={"msg_ids": list(msg_ids)}, idempotent=True,
                                parse=lambda r: r.json()["archived"]))

    def delete_messages(self, name: str, msg_ids: list[int]) -> list[int]:
        return self._t.run(Call("POST", _q(name) + "/delete", json={"msg_ids": list(msg_ids)}, idempotent=True,
                                parse=lambda r: r.json()["deleted"]))

    def set_vt(self, name: str, msg_id: int, vt: float) -> Message:
        """Hide a message for `vt` more seconds from now (0: visible again at once)."""
        return self._t.run(Call("POST", _q(name) + "/set_vt", json={"msg_id": msg_id, "vt": vt}, idempotent=True,
                                parse=lambda r: build(Message, r.json()["message"])))

    def purge(self, name: str, *, include_archived: bool = False) -> int:
        return self._t.run(Call("POST", _q(name) + "/purge", json={"include_archived": include_archived},
                                idempotent=True, parse=lambda r: r.json()["purged"]))

    def browse(self, name: str, state: str = "waiting", *, limit: int = 50, before: int | None = None) -> Page:
        """Look at messages newest first without claiming them: state waiting, archived or dead."""
        params = {"state": state, "limit": limit, "before": before}
        return self._t.run(Call("GET", _q(name) + "/messages", params=params, idempotent=True,
                                parse=lambda r: Page(_messages(r.json()), r.json().get("next_before"))))


def replay_plan(queue: Queue) -> tuple[str, str]:
    """Where a queue's dead letters are and in which state: its dead-letter queue's waiting messages,
    or (without one) its own archive's dead ones."""
    return (queue.dead_letter_queue, "waiting") if queue.dead_letter_queue else (queue.name, DEAD)
