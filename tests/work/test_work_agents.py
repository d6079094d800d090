"""The work surface's agents: each sweep does its job once, overlapping runs split the work, and
every agent's runs are recorded the same way."""

from __future__ import annotations

import threading
from datetime import timedelta

import psycopg
import pytest

from functions.local.lambda_context import LocalContext
from postbox import agents, db
from postbox.work import browse, messages, queues, scopes, sweeps
from support.clock import db_now, wait_for_db_clock


def _setup(tenant, **queue_fields):
    s = scopes.create_scope(tenant.principal, {"slug": "agents"})
    q = queues.create_queue(tenant.principal, s["id"], {"slug": "jobs", **queue_fields})
    return s, q


def _publish_many(tenant, s, q, n, **fields):
    return [messages.publish(tenant.principal, s["id"], q["id"], {"body": str(i), **fields})[0] for i in range(n)]


def _in_both(fn):
    """Run `fn` in two threads at once; the sum of what they did."""
    results: list[int] = []
    threads = [threading.Thread(target=lambda: results.append(fn())) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(results)


def test_overlapping_expiry_sweeps_expire_each_message_once(tenant):
    s, q = _setup(tenant)
    _publish_many(tenant, s, q, 300, ttl_seconds=1)
    claimed = messages.claim(tenant.principal, s["id"], q["id"], 50, 600)
    assert len(claimed) == 50
    wait_for_db_clock(db_now() + timedelta(seconds=1.1))
    assert messages.claim(tenant.principal, s["id"], q["id"], 10, None) == []  # expired, not claimable
    assert _in_both(sweeps.expire) >= 300  # this test's messages (other tests' may expire too)
    st = queues.stats(tenant.principal, s["id"], q["id"])
    assert st["depth_current"] == 0
    expired, _ = browse.list_messages(tenant.principal, s["id"], q["id"], "expired", limit=200)
    assert len(expired) == 200


def test_overlapping_visibility_sweeps_recover_each_claim_once(tenant):
    s, q = _setup(tenant)
    _publish_many(tenant, s, q, 200, max_retries=5)
    _publish_many(tenant, s, q, 20, max_retries=1)
    claimed = []
    for _ in range(3):
        claimed += messages.claim(tenant.principal, s["id"], q["id"], 100, 1)
    assert len(claimed) == 220
    wait_for_db_clock(db_now() + timedelta(seconds=1.1))
    assert _in_both(sweeps.recover_claims) >= 220
    st = queues.stats(tenant.principal, s["id"], q["id"])
    assert (st["depth_pending"], st["depth_claimed"], st["dead_lettered_total"]) == (200, 0, 20)
    dead = queues.stats(tenant.principal, s["id"], s["system_queues"]["_dead_letter"])
    assert dead["depth_pending"] == 20


def test_priority_aging_lets_a_long_waiting_low_message_pass_newer_normal_ones(tenant):
    s, q = _setup(tenant, ordering="priority")
    old = messages.publish(tenant.principal, s["id"], q["id"], {"body": "old", "priority": {"tier": "low"}})[0]
    for _ in range(3):
        messages.publish(tenant.principal, s["id"], q["id"], {"body": "new", "priority": {"tier": "normal"}})
    messages.publish(tenant.principal, s["id"], q["id"], {"body": "crit", "priority": {"tier": "critical"}})
    # A one-second step stands for the minute: the low message (rank 3*1024+500) needs 11 steps of
    # 102 points to pass normal ones (2*1024+500); its wait is set back 12 s, as if it were older.
    with db.connection() as conn:
        conn.execute("UPDATE work_messages SET aged_at = aged_at - interval '12 seconds' WHERE id = %s", (old["id"],))
    assert sweeps.age_priorities(step_s=1) >= 1
    order = [m["body"] for m in messages.claim(tenant.principal, s["id"], q["id"], 10, None)]
    assert order == ["crit", "old", "new", "new", "new"]


def test_priority_aging_stops_at_the_top_of_high(tenant):
    s, q = _setup(tenant, ordering="priority")
    old = messages.publish(tenant.principal, s["id"], q["id"], {"body": "old", "priority": {"tier": "background"}})[0]
    messages.publish(tenant.principal, s["id"], q["id"], {"body": "crit", "priority": {"tier": "critical", "score": 0}})
    with db.connection() as conn:
        conn.execute("UPDATE work_messages SET aged_at = aged_at - interval '1 hour' WHERE id = %s", (old["id"],))
    sweeps.age_priorities(step_s=1)
    order = [m["body"] for m in messages.claim(tenant.principal, s["id"], q["id"], 10, None)]
    assert order == ["crit", "old"]


def test_dead_letter_monitor_alerts_once_per_crossing(tenant):
    s = scopes.create_scope(tenant.principal, {"slug": "dlm", "dead_letter_alert_threshold": 2})
    q = queues.create_queue(tenant.principal, s["id"], {"slug": "jobs", "max_retries": 1})
    _publish_many(tenant, s, q, 2, max_retries=1)
    for m in messages.claim(tenant.principal, s["id"], q["id"], 10, None):
        messages.finish(tenant.principal, s["id"], m["id"], "fail", {"reason": "x"})
    _in_both(sweeps.watch_dead_letters)
    sweeps.watch_dead_letters()
    events = browse.list_messages(tenant.principal, s["id"], s["system_queues"]["_events"], "pending")[0]
    alerts = [e for e in events if e["type"] == "scaiqueue.dead_letter.threshold_exceeded"]
    assert len(alerts) == 1 and alerts[0]["body"]["payload"]["depth"] == 2


def test_archiver_removes_ended_messages_past_retention_only(tenant):
    s, q = _setup(tenant)
    _publish_many(tenant, s, q, 3)
    done = messages.claim(tenant.principal, s["id"], q["id"], 2, None)
    for m in done:
        messages.finish(tenant.principal, s["id"], m["id"], "complete", {})
    with db.connection() as conn:
        conn.execute("UPDATE work_messages SET ended_at = ended_at - interval '8 days' WHERE id = %s",
                     (done[0]["id"],))
    assert _in_both(sweeps.archive) >= 1
    completed = browse.list_messages(tenant.principal, s["id"], q["id"], "completed")[0]
    assert [m["id"] for m in completed] == [done[1]["id"]]
    assert len(browse.list_messages(tenant.principal, s["id"], q["id"], "pending")[0]) == 1


def test_one_archiver_run_removes_every_ended_message_past_retention_within_its_budget(tenant):
    s, q = _setup(tenant)
    _publish_many(tenant, s, q, 120)
    for m in messages.claim(tenant.principal, s["id"], q["id"], 120, None):
        messages.finish(tenant.principal, s["id"], m["id"], "complete", {})
    with db.connection() as conn:
        conn.execute("UPDATE work_messages SET ended_at = ended_at - interval '8 days' WHERE scope_id = %s",
                     (s["id"],))
    assert sweeps.archive(batch=2) == 120  # 60 full batches: more than any fixed cap of 50 lets through
    assert browse.list_messages(tenant.principal, s["id"], q["id"], "completed")[0] == []


def test_every_agent_run_is_recorded(database_url):
    from functions.agents import queue_retention, work

    names = ["work-expiry", "queue-retention", "boom", "never"]
    before = {a["name"]: a for a in agents.status(names)}
    work.expiry({}, LocalContext("work-expiry", 60))
    queue_retention.handler({}, LocalContext("queue-retention", 60))

    @agents.recorded("boom")
    def failing():
        raise RuntimeError("it broke")

    with pytest.raises(RuntimeError):
        failing()
    after = {a["name"]: a for a in agents.status(names)}
    for name in ("work-expiry", "queue-retention"):
        assert after[name]["total_runs"] == before[name]["total_runs"] + 1
        assert after[name]["status"] == "healthy" and after[name]["last_run_at"] is not None
        assert after[name]["last_run_duration_ms"] >= 0
    assert after["boom"]["total_errors"] == before["boom"]["total_errors"] + 1
    assert after["boom"]["status"] == "error" and after["boom"]["last_error"] == "RuntimeError"  # not its text
    assert after["never"]["status"] == "never_run" and after["never"]["total_runs"] == 0


def test_an_agents_failure_shows_its_kind_never_its_text(database_url):
    """Every tenant's key may read GET /system-agents, and an agent works for every tenant: what it
    shows of a failure is the error's kind (a database error's SQLSTATE), not a message that can
    carry another tenant's values."""
    from postbox import db

    @agents.recorded("leaky")
    def failing():
        with db.connection() as conn:
            conn.execute("CREATE TEMP TABLE IF NOT EXISTS leaky (v text UNIQUE)")
            conn.execute("INSERT INTO leaky VALUES ('another-tenants-secret'), ('another-tenants-secret')")

    with pytest.raises(psycopg.errors.UniqueViolation, match="another-tenants-secret"):
        failing()
    (shown,) = agents.status(["leaky"])
    assert shown["status"] == "error" and shown["last_error"] == "UniqueViolation (SQLSTATE 23505)"


def test_the_journal_agent_folds_the_counters_and_is_recorded(tenant):
    from functions.agents import work

    s, q = _setup(tenant)
    _publish_many(tenant, s, q, 5)
    before = agents.status(["work-journal"])[0]
    with db.connection() as conn:
        unfolded = conn.execute("SELECT count(*) FROM work_journal_moves WHERE txid >= (SELECT upto FROM"
                                " work_counts_folded)").fetchone()[0]
    assert unfolded >= 5  # this test's publishes at least (the fold is global)
    done = work.journal({}, LocalContext("work-journal", 60))
    assert done["folded"] >= 5 and done["partitions"] >= 0
    after = agents.status(["work-journal"])[0]
    assert after["total_runs"] == before["total_runs"] + 1 and after["status"] == "healthy"
    assert after["total_processed"] == before["total_processed"] + done["folded"]
    with db.connection() as conn:
        counted = conn.execute("SELECT sum(k.pending), sum(k.published) FROM work_queue_counters k"
                               " JOIN work_queues w ON w.id = k.queue_id WHERE w.queue_id = %s", (q["id"],)).fetchone()
    assert counted == (5, 5)  # in the counters themselves now
    assert queues.stats(tenant.principal, s["id"], q["id"])["depth_pending"] == 5
