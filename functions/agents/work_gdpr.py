"""The work surface's GDPR agent: erasure and export jobs in bounded batches (`postbox.work.gdpr`),
recorded in `agent_runs` like every agent."""

from __future__ import annotations

from typing import Any

from functions.observability import instrument
from postbox.agents import recorded
from postbox.work import gdpr

logger, metrics, lambda_handler = instrument("work-gdpr-agent")


@lambda_handler
@recorded("work-gdpr", count="processed")
def handler(event: dict, context: Any) -> dict:
    return gdpr.run()
