"""Plan limits and usage of a tenant's queues: Python reads them through the same SQL function
(plan_usage) that queue_send's checks share, so a limit has one definition."""

from __future__ import annotations

from typing import NamedTuple

import psycopg


class Limits(NamedTuple):
    max_queues: int
    messages_month: int
    max_message_bytes: int
    storage_bytes: int
    retention_days: int

    def as_dict(self) -> dict[str, int]:
        return {
            "max_queues": self.max_queues,
            "messages_month": self.messages_month,
            "max_message_bytes": self.max_message_bytes,
            "storage_bytes": self.storage_bytes,
            "retention_days": self.retention_days,
        }


class Usage(NamedTuple):
    queues: int
    stored_bytes: int
    messages_month: int


def limits_and_usage(conn: psycopg.Connection, tenant_id: str) -> tuple[Limits, Usage]:
    """The plan's limits and the tenant's usage (SQL: plan_usage, which queue_send's checks share)."""
    row = conn.execute("SELECT * FROM plan_usage(%s)", (tenant_id,)).fetchone()
    return Limits(*row[:5]), Usage(int(row[5]), int(row[6]), int(row[7]))

