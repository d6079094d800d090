"""Agent: move the messages of running SQS message move tasks at their rate. EventBridge runs it
once a minute, so each run moves for up to 50 s (less when its function has less time left);
locally it runs every second, for a second."""

from __future__ import annotations

from typing import Any

from functions.observability import instrument
from postbox.agents import recorded
from postbox.sqs import mover

logger, metrics, lambda_handler = instrument("sqs-move-tasks")

BUDGET_S = 50.0
MARGIN_S = 10.0  # left of the function's time when the run ends


@lambda_handler
@recorded("sqs-move-tasks")
def handler(event: dict, context: Any) -> dict:
    budget = BUDGET_S
    if context is not None and hasattr(context, "get_remaining_time_in_millis"):
        budget = min(budget, max(context.get_remaining_time_in_millis() / 1000 - MARGIN_S, 1.0))
    moved = mover.run(budget)
    metrics.add_metric(name="SqsMessagesMoved", unit="Count", value=moved)
    return {"moved": moved}
