"""One HTTP call described once (`Call`), sent by a sync or an async transport with the same retries.

A surface method builds a `Call` and hands it to its runner; the sync runner returns the parsed
result, the async runner a coroutine of it. So each surface is written once and has both forms.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from .config import resolve
from .errors import ConnectionFailed, from_response
from .retry import RetryPolicy, retry_after_seconds
from .surfaces import surface_of

USER_AGENT = "postbox-client/0.1"
DEFAULT_TIMEOUT_S = 30.0


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


async def _asleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


def parse_json(response: httpx.Response) -> Any:
    return response.json() if response.content else None


@dataclass
class Call:
    """One request: `idempotent` says whether sending it twice is harmless (see retry.py)."""

    method: str
    path: str
    json: Any = None
    params: dict[str, Any] | None = None
    headers: dict[str, str] | None = None
    content: bytes | None = None
    idempotent: bool = False
    wait_s: float = 0.0  # a long poll: the read timeout grows by this much
    ok: tuple[int, ...] = ()  # statuses besides 2xx that are answers, not errors
    parse: Callable[[httpx.Response], Any] = field(default=parse_json)

    def request_args(self) -> dict[str, Any]:
        args: dict[str, Any] = {"params": {k: v for k, v in (self.params or {}).items() if v is not None}}
        if self.content is not None:
            args["content"] = self.content
        elif self.json is not None:
            args["json"] = self.json
        if self.headers:
            args["headers"] = self.headers
        return args


def _headers(key: str | None) -> dict[str, str]:
    headers = {"user-agent": USER_AGENT}
    if key:
        headers["apikey"] = key
    return headers


class _Base:
    def __init__(self, url: str | None, key: str | None, *, profile: str | None, timeout_s: float,
                 retry: RetryPolicy, urls: dict[str, str] | None = None) -> None:
        target = resolve(url, key, profile, urls)
        self.url, self.key, self.urls = target.url, target.key, target.urls
        self.timeout_s = timeout_s
        self.retry = retry

    def _target(self, call: Call) -> str:
        """The call's path, or its whole URL when its surface has a URL of its own."""
        base = self.urls.get(surface_of(call.path)) if self.urls else None
        return f"{base}{call.path}" if base else call.path

    def _full_url(self, call: Call) -> str:
        target = self._target(call)
        return target if target != call.path else f"{self.url}{call.path}"

    def _timeout(self, call: Call) -> httpx.Timeout:
        return httpx.Timeout(self.timeout_s, read=self.timeout_s + call.wait_s)

    def _answer(self, call: Call, response: httpx.Response) -> httpx.Response:
        if response.is_success or response.status_code in call.ok:
            return response
        raise from_response(response)

    def _failed(self, call: Call, error: Exception) -> ConnectionFailed:
        return ConnectionFailed(f"{type(error).__name__}: {error}", method=call.method,
                                url=self._full_url(call))


class Transport(_Base):
    """Sync: an httpx.Client with the key, sending `Call`s with retries."""

    def __init__(self, url: str | None = None, key: str | None = None, *, profile: str | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S, retry: RetryPolicy | None = None,
                 http: httpx.Client | None = None, urls: dict[str, str] | None = None) -> None:
        super().__init__(url, key, profile=profile, timeout_s=timeout_s, retry=retry or RetryPolicy(), urls=urls)
        self.http = http or httpx.Client(base_url=self.url)
        self.http.headers.update(_headers(self.key))

    def close(self) -> None:
        self.http.close()

    def send(self, call: Call) -> httpx.Response:
        attempt = 0
        while True:
            attempt += 1
            try:
                response = self.http.request(call.method, self._target(call), timeout=self._timeout(call),
                                             **call.request_args())
            except httpx.TransportError as error:
                if not self.retry.retry_error(attempt, error, call.idempotent):
                    raise self._failed(call, error) from error
                _sleep(self.retry.backoff(attempt))
                continue
            if self.retry.retry_status(attempt, response.status_code, call.idempotent):
                _sleep(self.retry.backoff(attempt, retry_after_seconds(response.headers.get("retry-after"))))
                continue
            return self._answer(call, response)

    def run(self, call: Call) -> Any:
        return call.parse(self.send(call))


class AsyncTransport(_Base):
    """Async: the same over an httpx.AsyncClient."""

    def __init__(self, url: str | None = None, key: str | None = None, *, profile: str | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S, retry: RetryPolicy | None = None,
                 http: httpx.AsyncClient | None = None, urls: dict[str, str] | None = None) -> None:
        super().__init__(url, key, profile=profile, timeout_s=timeout_s, retry=retry or RetryPolicy(), urls=urls)
        self.http = http or httpx.AsyncClient(base_url=self.url)
        self.http.headers.update(_headers(self.key))

    async def close(self) -> None:
        await self.http.aclose()

    async def send(self, call: Call) -> httpx.Response:
        attempt = 0
        while True:
            attempt += 1
            try:
                response = await self.http.request(call.method, self._target(call), timeout=self._timeout(call),
                                                   **call.request_args())
            except httpx.TransportError as error:
                if not self.retry.retry_error(attempt, error, call.idempotent):
                    raise self._failed(call, error) from error
                await _asleep(self.retry.backoff(attempt))
                continue
            if self.retry.retry_status(attempt, response.status_code, call.idempotent):
                retry_after = retry_after_seconds(response.headers.get("retry-after"))
                await _asleep(self.retry.backoff(attempt, retry_after))
                continue
            return self._answer(call, response)

    async def run(self, call: Call) -> Any:
        return call.parse(await self.send(call))
