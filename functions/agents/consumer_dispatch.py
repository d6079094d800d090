"""Agent: deliver queue messages to their consumer functions in batches."""

from __future__ import annotations

from typing import Any

from functions.agents.consumer_invokers import choose_invoker
from functions.observability import instrument
from postbox.agents import recorded
from postbox.queues import consumers

logger, metrics, lambda_handler = instrument("consumer-dispatch")


@lambda_handler
@recorded("consumer-dispatch")
def handler(event: dict, context: Any) -> dict:
    remaining_s = context.get_remaining_time_in_millis() / 1000 if context else 60.0
    delivered = consumers.dispatch(choose_invoker(), budget_s=max(1.0, remaining_s - 10))
    metrics.add_metric(name="ConsumerMessagesDelivered", unit="Count", value=delivered)
    return {"delivered": delivered}
