"""Agent: remove stream messages (rows and log segments) older than their stream's retention."""

from __future__ import annotations

from typing import Any

from functions.observability import instrument
from postbox.agents import recorded
from postbox.keyed_streams import lifecycle

logger, metrics, lambda_handler = instrument("keyed-streams-retention")


@lambda_handler
@recorded("keyed-streams-retention")
def handler(event: dict, context: Any) -> dict:
    removed = lifecycle.sweep_retention()
    metrics.add_metric(name="StreamMessagesRemoved", unit="Count", value=removed)
    return {"removed": removed}
