"""Agent: delete archived queue messages past their retention."""

from __future__ import annotations

from typing import Any

from functions.observability import instrument
from postbox.agents import recorded
from postbox.queues import retention

logger, metrics, lambda_handler = instrument("queue-retention")


@lambda_handler
@recorded("queue-retention")
def handler(event: dict, context: Any) -> dict:
    deleted = retention.sweep()
    metrics.add_metric(name="ArchivedMessagesExpired", unit="Count", value=deleted)
    return {"deleted": deleted}
