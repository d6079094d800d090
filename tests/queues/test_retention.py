"""The retention agent deletes archived messages past their queue's (or plan's) retention."""

from __future__ import annotations

import threading

from functions.agents.queue_retention import handler
from functions.local.lambda_context import LocalContext
from postbox import db
from postbox.queues import retention, service


def _age_archive(tenant, name, days):
    """Archived `days` ago: as if sent then too, so no sweep's mark since may stand below them."""
    with db.connection() as conn:
        retention.forget_marks(conn)
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


def _archived(tenant, name, n):
    ids = service.send_messages(tenant.principal, name, list(range(n)))
    service.archive_messages(tenant.principal, name, ids)
    return ids


def _mark(at_days_ago, msg_id):
    """A sweep's mark as one taken `at_days_ago` would be, with the sequence at `msg_id`."""
    with db.transaction() as conn:
        retention.forget_marks(conn)
        conn.execute("INSERT INTO queue_archive_marks (at, msg_id) VALUES (clock_timestamp() - make_interval("
                     "secs => %s * 86400), %s)", (at_days_ago, msg_id))


def _archive_rows_walked() -> int:
    """The archived rows one pass of the sweep reads (kept or deleted), from its plan run and undone."""
    with db.connection() as conn, conn.transaction(force_rollback=True):
        plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + retention._SWEEP, {"batch": 5000}).fetchone()[0]
    walked, nodes = 0, [plan[0]["Plan"]]
    while nodes:
        node = nodes.pop()
        nodes.extend(node.get("Plans", []))
        if node.get("Relation Name") == "queue_archive" and node.get("Alias") == "x":  # the walk, however planned
            kept = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
            walked += round((kept + node.get("Rows Removed by Index Recheck", 0)) * node["Actual Loops"])
    return walked


def test_a_sweep_with_nothing_expired_walks_only_what_was_sent_before_the_cutoff(tenant):
    service.create_queue(tenant.principal, "fresh", {"retention_days": 1})
    earlier = _archived(tenant, "fresh", 5)  # sent before the mark below: stragglers a walk must read
    _mark(0.9, max(earlier))  # a sweep 22 hours ago, before the rest were sent
    _archived(tenant, "fresh", 2000)
    with db.connection() as conn:
        before = conn.execute("SELECT count(*) FROM queue_archive WHERE msg_id <= %s", (max(earlier),)).fetchone()[0]
    walked = _archive_rows_walked()
    # Without the marks the walk reads every archived row of every queue: these 2,000 too. (The plan's
    # figures are averages per loop, rounded to two places: with one loop per queue of the test
    # database, the 5 stragglers read may show as anything from 0 to a few more; the test of a straggler
    # kept, below, shows they are read.)
    assert walked < before + 1000
    assert retention.sweep() == 0
    assert service.queue_metrics(tenant.principal, "fresh")["archived"] == 2005


def test_a_straggler_archived_after_the_cutoff_is_kept_and_those_before_it_go(tenant):
    service.create_queue(tenant.principal, "q", {"retention_days": 1})
    old = _archived(tenant, "q", 10)
    late = service.send_messages(tenant.principal, "q", ["read a day later"])
    _mark(0.5, late[0])  # taken 12 hours ago, once all eleven were sent
    with db.transaction() as conn:
        conn.execute("UPDATE queue_archive SET archived_at = clock_timestamp() - interval '2 days'"
                     " WHERE msg_id = ANY (%s)", (old,))
    service.archive_messages(tenant.principal, "q", late)  # archived now: not expired
    assert retention.sweep(batch=3) == 10
    with db.connection() as conn:
        kept = conn.execute("SELECT a.msg_id FROM queue_archive a JOIN queues q ON q.id = a.queue_id"
                            " WHERE q.tenant_id = %s", (tenant.tenant_id,)).fetchall()
    assert [r[0] for r in kept] == late


def test_each_sweep_marks_the_sequence_and_drops_marks_past_every_plans_retention(database_url):
    with db.transaction() as conn:
        retention.forget_marks(conn)
        conn.execute("INSERT INTO queue_archive_marks VALUES (clock_timestamp() - interval '10 years', 1)")
        longest = conn.execute("SELECT max(retention_days) FROM plans").fetchone()[0]
        conn.execute("INSERT INTO queue_archive_marks VALUES (clock_timestamp() - make_interval(days => %s), 2)",
                     (longest,))
        position = conn.execute("SELECT last_value FROM queue_msg_id_seq").fetchone()[0]
    retention.sweep()
    with db.connection() as conn:
        marks = conn.execute("SELECT msg_id FROM queue_archive_marks ORDER BY at").fetchall()
    assert [m[0] for m in marks][:1] == [2] and len(marks) == 2 and marks[1][0] >= position

