"""Agent: scheduled stream messages become available on time; messages past expires_at are marked expired."""

from __future__ import annotations

from typing import Any

from functions.observability import instrument
from postbox.agents import recorded
from postbox.keyed_streams import lifecycle

logger, metrics, lambda_handler = instrument("keyed-streams-schedules")


@lambda_handler
@recorded("keyed-streams-schedules")
def handler(event: dict, context: Any) -> dict:
    done = lifecycle.sweep_schedules()
    metrics.add_metric(name="StreamMessagesMadeAvailable", unit="Count", value=done["available"])
    metrics.add_metric(name="StreamMessagesExpired", unit="Count", value=done["expired"])
    return done
