"""Keeping a claimed message hidden while a handler runs: `extend()` every few seconds until the
handler is done, on a thread (sync) or a task (async). One piece for every surface's consume loop."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

log = logging.getLogger("postbox_client")


@contextlib.contextmanager
def beating(extend: Callable[[], Any], every_s: float, what: str) -> Iterator[None]:
    """Call `extend()` every `every_s` seconds while the block runs. A failed extension (the message
    is gone, the server away) stops the beat with a warning: the block still finishes."""
    finished = threading.Event()

    def beat() -> None:
        while not finished.wait(every_s):
            try:
                extend()
            except Exception as error:
                log.warning("could not extend %s: %s", what, error)
                return

    thread = threading.Thread(target=beat, daemon=True, name=f"postbox-heartbeat-{what}")
    thread.start()
    try:
        yield
    finally:
        finished.set()
        thread.join()


@contextlib.asynccontextmanager
async def abeating(extend: Callable[[], Awaitable[Any]], every_s: float, what: str) -> AsyncIterator[None]:
    """The async form: a task awaiting `extend()` every `every_s` seconds while the block runs."""

    async def beat() -> None:
        while True:
            await asyncio.sleep(every_s)
            try:
                await extend()
            except Exception as error:
                log.warning("could not extend %s: %s", what, error)
                return

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()


async def run_handler(handler: Callable[[Any], Any], item: Any) -> Any:
    """Await an async handler; run a blocking one on a thread, so the heartbeat keeps beating."""
    if inspect.iscoroutinefunction(handler):
        return await handler(item)
    return await asyncio.to_thread(handler, item)
