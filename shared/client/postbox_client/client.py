"""`Client` and `AsyncClient`: one connection (URL, key, retries) and one attribute per surface."""

from __future__ import annotations

from typing import Any

from .consume import AsyncQueues, Queues
from .durable import AsyncDurable, Durable
from .flows.calls import AsyncFlows, Flows
from .keyed_streams import AsyncStreams, Streams
from .partitioned import AsyncPartitioned, Partitioned
from .retry import RetryPolicy
from .transport import DEFAULT_TIMEOUT_S, AsyncTransport, Transport
from .work import AsyncWork, Work


class Client:
    """Sync client. URL and key come from the arguments, else POSTBOX_URL / POSTBOX_KEY, else the
    config file (see `postbox_client.config`); `urls` (or POSTBOX_URLS) gives each surface its own
    URL, for a stack whose front door is the surfaces' function URLs.

        with Client() as pb:
            pb.queues.send("welcome", {"to": "ada@example.com"})
    """

    def __init__(self, url: str | None = None, key: str | None = None, *, profile: str | None = None,
                 project: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                 retry: RetryPolicy | None = None, urls: dict[str, str] | None = None, **http: Any) -> None:
        self.transport = Transport(url, key, profile=profile, timeout_s=timeout_s, retry=retry, urls=urls, **http)
        self.url, self.key = self.transport.url, self.transport.key
        self.queues = Queues(self.transport)
        self.partitioned = Partitioned(self.transport)
        self.streams = Streams(self.transport, project)
        self.durable = Durable(self.transport)
        self.flows = Flows(self.transport)
        self.work = Work(self.transport)

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()


class AsyncClient:
    """Async client: the same surfaces, every call awaited.

        async with AsyncClient() as pb:
            await pb.queues.send("welcome", {"to": "ada@example.com"})
    """

    def __init__(self, url: str | None = None, key: str | None = None, *, profile: str | None = None,
                 project: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                 retry: RetryPolicy | None = None, urls: dict[str, str] | None = None, **http: Any) -> None:
        self.transport = AsyncTransport(url, key, profile=profile, timeout_s=timeout_s, retry=retry, urls=urls,
                                        **http)
        self.url, self.key = self.transport.url, self.transport.key
        self.queues = AsyncQueues(self.transport)
        self.partitioned = AsyncPartitioned(self.transport)
        self.streams = AsyncStreams(self.transport, project)
        self.durable = AsyncDurable(self.transport)
        self.flows = AsyncFlows(self.transport)
        self.work = AsyncWork(self.transport)

    async def close(self) -> None:
        await self.transport.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: Any) -> None:
        await self.close()
