"""The retention agent deletes archived messages past their queue's (or plan's) retention."""

from __future__ import annotations

import threading

from functions.agents.queue_retention import handler
from functions.local.lambda_context import LocalContext
from postbox import db
from postbox.queues import retention, service


def _age_archive(tenant, name, days):
    with db.transaction() as conn:
        conn.execute(
            "UPDATE queue_archive a SET archived_at = clock_timestamp() - make_interval(days => %s)"
            " FROM queues q WHERE q.id = a.queue_id AND q.tenant_id = %s AND q.name = %s",
            (days, tenant.tenant_id, name),
        )


def test_sweep_honours_queue_and_plan_retention(tenant):
    service.create_queue(tenant.principal, "short", {"retention_days": 1})
    service.create_queue(tenant.principal, "plan", {})  # pro plan: 90 days
    for name in ("short", "plan"):
        ids = service.send_messages(tenant.principal, name, list(range(10)))
        service.archive_messages(tenant.principal, name, ids)
        _age_archive(tenant, name, 2)
    retention.sweep(batch=3)
    assert service.queue_metrics(tenant.principal, "short")["archived"] == 0
    assert service.queue_metrics(tenant.principal, "plan")["archived"] == 10
    assert service.queue_metrics(tenant.principal, "short")["stored_bytes"] == 0


def test_overlapping_sweeps_delete_each_row_once(tenant):
    service.create_queue(tenant.principal, "q", {"retention_days": 1})
    for _ in range(20):
        ids = service.send_messages(tenant.principal, "q", list(range(100)))
        service.archive_messages(tenant.principal, "q", ids)
    _age_archive(tenant, "q", 3)
    results = []
    threads = [threading.Thread(target=lambda: results.append(retention.sweep(batch=50))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert service.queue_metrics(tenant.principal, "q")["archived"] == 0
    assert sum(results) >= 2000


def test_agent_handler_runs(database_url):
    assert "deleted" in handler({}, LocalContext("queue-retention"))
