"""Live traffic for the moves' tests: requests through a surface's real handler, as a client makes
them (a 503 waited out by its Retry-After and sent again), from a producer and a consumer thread."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

from functions.local.lambda_context import LocalContext
from support.events import api_event


class Surface:
    """One tenant's client of one surface's handler, counting the 503s a freeze answered."""

    def __init__(self, handler: Callable, name: str, key: str) -> None:
        self.handler, self.ctx, self.key, self.refused = handler, LocalContext(name), key, 0

    def raw(self, method: str, path: str, body: Any = None, **event: Any) -> dict:
        while True:
            answer = self.handler(api_event(method, path, key=self.key, body=body, **event), self.ctx)
            if answer["statusCode"] != 503:
                return answer
            assert "Retry-After" in answer["headers"], answer
            self.refused += 1
            time.sleep(0.05)

    def call(self, method: str, path: str, body: Any = None, **event: Any) -> tuple[int, Any]:
        answer = self.raw(method, path, body, **event)
        return answer["statusCode"], json.loads(answer["body"]) if answer.get("body") else None


class Live:
    """A producer and a consumer running until stopped (the consumer until it finds nothing three
    times after the stop); their errors kept for the test to assert on."""

    def __init__(self, produce: Callable[[], None], consume: Callable[[], bool]) -> None:
        self.stop, self.errors = threading.Event(), []
        self._produce, self._consume = produce, consume
        self.threads = [threading.Thread(target=self._guard, args=(f,)) for f in (self._producer, self._consumer)]

    def _guard(self, work: Callable[[], None]) -> None:
        try:
            work()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.errors.append(e)

    def _producer(self) -> None:
        while not self.stop.is_set():
            self._produce()

    def _consumer(self) -> None:
        empty = 0
        while not (self.stop.is_set() and empty >= 3):
            found = self._consume()
            empty = 0 if found else empty + 1
            if not found:
                time.sleep(0.02)

    def __enter__(self) -> Live:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)
