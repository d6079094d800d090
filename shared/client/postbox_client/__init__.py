"""Postbox's Python client: queues, partitioned queues, flows, keyed streams, durable streams and work
queues over HTTP, sync and async, with typed results, typed errors and retries. Needs only httpx.

Names are loaded on first use, so `postbox_client.flows`' query builder and runner (pure Python) can
be imported where httpx is not installed (the server runs hosted flows queries with them).
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "Client": "client", "AsyncClient": "client",
    "Queues": "consume", "AsyncQueues": "consume",
    "Durable": "durable", "AsyncDurable": "durable",
    "Partitioned": "partitioned", "AsyncPartitioned": "partitioned", "item": "partitioned",
    "Streams": "keyed_streams", "AsyncStreams": "keyed_streams",
    "Work": "work", "AsyncWork": "work",
    "Flows": "flows.calls", "AsyncFlows": "flows.calls", "CycleFailed": "flows.runner",
    "RetryPolicy": "retry", "NO_RETRY": "retry",
    **{name: "models" for name in ("DurableInfo", "DurableRead", "Leased", "Message", "PublishResult", "PushResult",
                                   "Queue", "QueueMetrics", "Stream", "StreamMessage", "Subscription")},
    **{name: "errors" for name in ("BadRequest", "Conflict", "ConnectionFailed", "Forbidden", "Gone", "NotFound",
                                   "PayloadTooLarge", "PostboxError", "RateLimited", "ServerError", "Unauthorized",
                                   "ValidationFailed")},
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
