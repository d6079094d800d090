"""Agent: delete archived queue messages past their retention, and waiting messages past their
queue's SQS MessageRetentionPeriod."""

from __future__ import annotations

from typing import Any

from functions.observability import instrument
from postbox.agents import recorded
from postbox.queues import retention
from postbox.sqs import retention as sqs_retention

logger, metrics, lambda_handler = instrument("queue-retention")


@lambda_handler
@recorded("queue-retention")
def handler(event: dict, context: Any) -> dict:
    deleted = retention.sweep()
    expired = sqs_retention.sweep()
    metrics.add_metric(name="ArchivedMessagesExpired", unit="Count", value=deleted)
    metrics.add_metric(name="WaitingMessagesExpired", unit="Count", value=expired)
    return {"deleted": deleted, "expired": expired}
