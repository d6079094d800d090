"""The queue clients users hold: every call of `QueueCalls`, plus `consume(handler)` and dead-letter
replay, in a sync (`Queues`) and an async (`AsyncQueues`) form.

consume: read a batch (long-polling), and for each message run the handler while a heartbeat keeps
the message hidden (`set_vt` every `vt / 2` seconds); archive it when the handler returns; when it
raises, leave it to come back after its visibility timeout (or after `retry_delay` seconds), where
it counts toward the queue's `max_reads` and so ends in the dead letters if it keeps failing.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .heartbeat import abeating, beating, run_handler
from .models import Message
from .queues import DEAD, QueueCalls, replay_plan

log = logging.getLogger("postbox_client")
Progress = Callable[[int], None]
REPLAY_CHUNK = 100


def _dead(where: str, state: str, messages: Iterable[Message], wanted: set[int] | None) -> list[Message]:
    out = []
    for m in messages:
        if state != DEAD and not m.dead_lettered:
            continue
        if wanted is None or m.msg_id in wanted:
            out.append(m)
    return out


def _chunks(items: list[Message], size: int = REPLAY_CHUNK) -> Iterator[list[Message]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


class Queues(QueueCalls):
    """Sync queue client."""

    def iter_messages(self, name: str, state: str = "waiting", *, page: int = 200) -> Iterator[Message]:
        """Every message in a state, newest first, page by page."""
        before = None
        while True:
            found = self.browse(name, state, limit=page, before=before)
            yield from found.messages
            if found.next_before is None:
                return
            before = found.next_before

    def receive(self, name: str, qty: int = 1, *, vt: float | None = None, wait_seconds: float = 20,
                timeout_s: float | None = None) -> list[Message]:
        """Long-poll until at least one message comes (or `timeout_s` passes: then [])."""
        import time

        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            wait = wait_seconds if deadline is None else max(0.0, min(wait_seconds, deadline - time.monotonic()))
            found = self.read(name, qty, vt=vt, wait_seconds=wait)
            if found or (deadline is not None and time.monotonic() >= deadline):
                return found

    def dead_letters(self, name: str, *, limit: int = 1000) -> list[Message]:
        where, state = replay_plan(self.get(name))
        out: list[Message] = []
        for m in _dead(where, state, self.iter_messages(where, state), None):
            out.append(m)
            if len(out) >= limit:
                break
        return out

    def replay_dead(self, name: str, msg_ids: Iterable[int] | None = None, *, limit: int = 10_000,
                    progress: Progress | None = None) -> list[int]:
        """Send dead letters back to `name`; from a dead-letter queue they are then deleted there.
        Returns the new msg_ids. At-least-once: a failure between the send and the delete leaves a
        copy in the dead letters, which a second replay sends again."""
        wanted = None if msg_ids is None else set(msg_ids)
        where, state = replay_plan(self.get(name))
        dead = _dead(where, state, self.iter_messages(where, state), wanted)[:limit]
        new_ids: list[int] = []
        for chunk in _chunks(dead):
            new_ids += self.send_batch(name, [m.message for m in chunk])
            if where != name:
                self.delete_messages(where, [m.msg_id for m in chunk])
            if progress:
                progress(len(chunk))
        return new_ids

    def consume(self, name: str, handler: Callable[[Message], Any], *, batch: int = 1, vt: float = 30,
                wait_seconds: float = 20, retry_delay: float | None = None, stop: threading.Event | None = None,
                max_messages: int | None = None, until_empty: bool = False) -> int:
        """Run `handler` on every message until `stop` is set, `max_messages` are handled, or (with
        `until_empty`) a read finds nothing. Returns how many messages the handler completed."""
        stop = stop or threading.Event()
        done = 0
        while not stop.is_set() and (max_messages is None or done < max_messages):
            want = batch if max_messages is None else min(batch, max_messages - done)
            found = self.read(name, want, vt=vt, wait_seconds=0 if until_empty else wait_seconds)
            if not found:
                if until_empty:
                    break
                continue
            for message in found:
                if self._handle(name, message, handler, vt, retry_delay):
                    done += 1
        return done

    def _handle(self, name: str, message: Message, handler: Callable[[Message], Any], vt: float,
                retry_delay: float | None) -> bool:
        try:
            with beating(lambda: self.set_vt(name, message.msg_id, vt), vt / 2, f"message {message.msg_id}"):
                handler(message)
        except Exception:
            log.exception("handler failed on message %s of %s", message.msg_id, name)
            if retry_delay is not None:
                self.set_vt(name, message.msg_id, retry_delay)
            return False
        self.archive(name, [message.msg_id])
        return True


class AsyncQueues(QueueCalls):
    """Async queue client: every call is awaited; handlers may be sync or async."""

    async def receive(self, name: str, qty: int = 1, *, vt: float | None = None,
                      wait_seconds: float = 20) -> list[Message]:
        while True:
            found = await self.read(name, qty, vt=vt, wait_seconds=wait_seconds)
            if found:
                return found

    async def consume(self, name: str, handler: Callable[[Message], Any], *, batch: int = 1, vt: float = 30,
                      wait_seconds: float = 20, retry_delay: float | None = None, stop: asyncio.Event | None = None,
                      max_messages: int | None = None, until_empty: bool = False) -> int:
        stop = stop or asyncio.Event()
        done = 0
        while not stop.is_set() and (max_messages is None or done < max_messages):
            want = batch if max_messages is None else min(batch, max_messages - done)
            found = await self.read(name, want, vt=vt, wait_seconds=0 if until_empty else wait_seconds)
            if not found:
                if until_empty:
                    break
                continue
            for message in found:
                if await self._handle(name, message, handler, vt, retry_delay):
                    done += 1
        return done

    async def _handle(self, name: str, message: Message, handler: Callable[[Message], Any], vt: float,
                      retry_delay: float | None) -> bool:
        try:
            async with abeating(lambda: self.set_vt(name, message.msg_id, vt), vt / 2, f"message {message.msg_id}"):
                await run_handler(handler, message)
        except Exception:
            log.exception("handler failed on message %s of %s", message.msg_id, name)
            if retry_delay is not None:
                await self.set_vt(name, message.msg_id, retry_delay)
            return False
        await self.archive(name, [message.msg_id])
        return True
