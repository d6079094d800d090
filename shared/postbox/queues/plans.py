"""Plan limits and usage for a tenant: Python reads and checks them through the same SQL functions
(plan_usage, plan_check) that queue_send calls, so a limit has one definition."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from .. import db


@dataclass(frozen=True)
class Limits:
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


@dataclass(frozen=True)
class Usage:
    queues: int
    stored_bytes: int
    messages_month: int


def limits_and_usage(conn: psycopg.Connection, tenant_id: str) -> tuple[Limits, Usage]:
    """The plan's limits and the tenant's usage (SQL: plan_usage, which queue_send's checks share)."""
    row = conn.execute("SELECT * FROM plan_usage(%s)", (tenant_id,)).fetchone()
    return Limits(*row[:5]), Usage(int(row[5]), int(row[6]), int(row[7]))


def check_new_queue(conn: psycopg.Connection, tenant_id: str) -> None:
    """Refuse a queue over the plan's max_queues (SQL: plan_check, the one limit check)."""
    with db.domain_errors():
        conn.execute("SELECT plan_check(%s, 0, 0, 1)", (tenant_id,))
