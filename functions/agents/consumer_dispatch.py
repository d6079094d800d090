"""Agent: deliver queue messages to their consumer functions in batches.

Two callers: the schedule (every queue with a consumer: the mop-up), and a send that found its
queue's consumer idle (`{"queue_id": ...}`, invoked asynchronously: that queue alone, at once).
"""

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
    budget_s = max(1.0, remaining_s - 10)
    invoke = choose_invoker(timeout_s=consumers.invoke_timeout_s(budget_s))  # every invoke ends within the run
    queue_id = (event or {}).get("queue_id")
    if queue_id is not None:
        delivered = consumers.dispatch_queue(int(queue_id), invoke, budget_s=budget_s)
        metrics.add_metric(name="ConsumerDispatchesStarted", unit="Count", value=1)
    else:
        delivered = consumers.dispatch(invoke, budget_s=budget_s)
        # Back-pressure: how long the oldest deliverable message has waited (the stack alarms on it).
        metrics.add_metric(name="ConsumerOldestMessageAge", unit="Seconds", value=consumers.oldest_waiting_age_s())
    metrics.add_metric(name="ConsumerMessagesDelivered", unit="Count", value=delivered)
    return {"delivered": delivered}
