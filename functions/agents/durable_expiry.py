"""Agent: remove durable streams whose Stream-TTL or Stream-Expires-At has passed (a stream that
forks still read is soft-deleted instead). Requests already treat an expired stream as gone; this
frees its storage even when nobody asks for it again."""

from __future__ import annotations

from typing import Any

from functions.observability import instrument
from postbox.agents import recorded
from postbox.durable import lifecycle

logger, metrics, lambda_handler = instrument("durable-expiry")


@lambda_handler
@recorded("durable-expiry")
def handler(event: dict, context: Any) -> dict:
    removed = 0
    for _ in range(20):  # bounded: at most 20 batches per run
        n = lifecycle.sweep_expired(limit=200)
        removed += n
        if n < 200:
            break
    metrics.add_metric(name="DurableStreamsExpired", unit="Count", value=removed)
    return {"expired": removed}
