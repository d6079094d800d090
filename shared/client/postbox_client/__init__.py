"""Postbox's Python client: queues, partitioned queues, flows, keyed streams and durable streams over
HTTP, sync and async, with typed results, typed errors and retries. Needs only httpx."""

from .client import AsyncClient, Client
from .consume import AsyncQueues, Queues
from .durable import AsyncDurable, Durable
from .errors import (
    BadRequest,
    Conflict,
    ConnectionFailed,
    Forbidden,
    Gone,
    NotFound,
    PayloadTooLarge,
    PostboxError,
    RateLimited,
    ServerError,
    Unauthorized,
    ValidationFailed,
)
from .flows import AsyncFlows, CycleFailed, Flows
from .models import DurableInfo, DurableRead, Leased, Message, PushResult, Queue, QueueMetrics, Stream, StreamMessage
from .partitioned import AsyncPartitioned, Partitioned, item
from .retry import NO_RETRY, RetryPolicy
from .streams import AsyncStreams, Streams

__all__ = [
    "NO_RETRY", "AsyncClient", "AsyncDurable", "AsyncFlows", "AsyncPartitioned", "AsyncQueues", "AsyncStreams",
    "BadRequest", "Client", "Conflict", "ConnectionFailed", "CycleFailed", "Durable", "DurableInfo", "DurableRead",
    "Flows", "Forbidden", "Gone", "Leased", "Message", "NotFound", "Partitioned", "PayloadTooLarge", "PostboxError",
    "PushResult", "Queue", "QueueMetrics", "Queues", "RateLimited", "RetryPolicy", "ServerError", "Stream",
    "StreamMessage", "Streams", "Unauthorized", "ValidationFailed", "item",
]
