"""Agent: once a minute, record each queue's, work queue's, partitioned queue's and keyed stream's
counters, depth and oldest message's age for the console's charts, and delete what is over a day old."""

from __future__ import annotations

from typing import Any

from functions.observability import instrument
from postbox import history
from postbox.agents import recorded

logger, metrics, lambda_handler = instrument("history")


@lambda_handler
@recorded("history", count="recorded")
def handler(event: dict, context: Any) -> dict:
    recorded_rows = history.record()
    trimmed = history.trim()
    metrics.add_metric(name="HistoryRowsRecorded", unit="Count", value=recorded_rows)
    return {"recorded": recorded_rows, "trimmed": trimmed}
