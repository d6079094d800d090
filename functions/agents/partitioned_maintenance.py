"""Agent: partitioned queues' expired leases (redeliver or dead-letter) and retention."""

from __future__ import annotations

from typing import Any

from functions.observability import instrument
from postbox.agents import recorded
from postbox.partitioned import maintenance

logger, metrics, lambda_handler = instrument("partitioned-maintenance")


@lambda_handler
@recorded("partitioned-maintenance")
def handler(event: dict, context: Any) -> dict:
    leases = maintenance.sweep_leases()
    removed = maintenance.sweep_retention()
    metrics.add_metric(name="LeasesExpired", unit="Count", value=leases["released"] + leases["deadLettered"])
    metrics.add_metric(name="MessagesDeadLettered", unit="Count", value=leases["deadLettered"])
    metrics.add_metric(name="MessagesRetentionRemoved", unit="Count", value=removed)
    return {**leases, "retentionRemoved": removed}
