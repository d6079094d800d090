"""Plan limits and usage for a tenant, read in one statement."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg


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


_LIMITS_AND_USAGE = """
SELECT p.max_queues, p.messages_month, p.max_message_bytes, p.storage_bytes, p.retention_days,
       (SELECT count(*) FROM queues WHERE tenant_id = t.id),
       (SELECT coalesce(sum(stored_bytes), 0) FROM tenant_storage WHERE tenant_id = t.id),
       (SELECT coalesce(sum(messages), 0) FROM tenant_monthly_messages
         WHERE tenant_id = t.id AND month = date_trunc('month', clock_timestamp())::date)
FROM tenants t JOIN plans p ON p.name = t.plan
WHERE t.id = %s
"""


def limits_and_usage(conn: psycopg.Connection, tenant_id: str) -> tuple[Limits, Usage]:
    row = conn.execute(_LIMITS_AND_USAGE, (tenant_id,)).fetchone()
    return Limits(*row[:5]), Usage(int(row[5]), int(row[6]), int(row[7]))
