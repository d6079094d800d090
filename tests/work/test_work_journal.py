"""The work journal on real PostgreSQL: `_events` materialised from it exactly once under concurrent
writers and readers, actors of work API keys, and the agents' moments."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import replace

from postbox import db
from postbox.work import audit, browse, messages, queues, scopes, sweeps


def _events(principal, scope):
    return browse.list_messages(principal, scope["id"], scope["system_queues"]["_events"], "pending", limit=200)[0]


def _all_events(principal, scope):
    """Every pending event of the scope, page after page."""
    found, cursor = [], None
    while True:
        page, cursor = browse.list_messages(principal, scope["id"], scope["system_queues"]["_events"], "pending",
                                            limit=200, cursor=cursor)
        found += page
        if not cursor:
            return found


def test_events_are_materialised_exactly_once_while_completions_and_event_claims_race(tenant):
    """Four threads complete 2,000 messages in batches while two threads claim `_events` (each
    claim materialising what was journalled since): every completion becomes exactly one event."""
    p = tenant.principal
    s = scopes.create_scope(p, {"slug": "race"})
    q = queues.create_queue(p, s["id"], {"slug": "jobs"})
    events_q = s["system_queues"]["_events"]
    with db.connection() as conn:
        conn.execute("SELECT work_publish(%s, %s, %s, jsonb_build_object('body', i), 'test')"
                     " FROM generate_series(1, 2000) i", (tenant.tenant_id, s["id"], q["id"]))
    completed: Counter[str] = Counter()
    seen: Counter[str] = Counter()
    lock = threading.Lock()
    errors: list[BaseException] = []
    done = threading.Event()

    def completer() -> None:
        try:
            while batch := messages.claim(p, s["id"], q["id"], 50, 60):
                items = [{"id": m["id"], "claim_token": m["claim_token"]} for m in batch]
                answers = messages.finish_batch(p, s["id"], "complete", items)
                assert all(a["ok"] for a in answers)
                with lock:
                    completed.update(m["id"] for m in batch)
        except BaseException as e:  # surfaced below
            errors.append(e)

    def reader() -> None:
        try:
            while True:
                finished = done.is_set()  # read before the claim: after it, one last claim sees all
                batch = messages.claim(p, s["id"], events_q, 100, 600)
                with lock:
                    seen.update(e["body"]["payload"]["message_id"] for e in batch)
                if finished and not batch:
                    return
        except BaseException as e:
            errors.append(e)

    writers = [threading.Thread(target=completer) for _ in range(4)]
    readers = [threading.Thread(target=reader) for _ in range(2)]
    for t in writers + readers:
        t.start()
    for t in writers:
        t.join()
    done.set()
    for t in readers:
        t.join()
    assert not errors, errors
    assert len(completed) == 2000 and set(completed.values()) == {1}
    assert seen == completed  # each completion's event claimed once: none lost, none doubled
    assert queues.stats(p, s["id"], events_q)["published_total"] == 2000


def test_completing_an_event_emits_no_event_about_it(tenant):
    p = tenant.principal
    s = scopes.create_scope(p, {"slug": "quiet"})
    q = queues.create_queue(p, s["id"], {"slug": "jobs"})
    messages.publish(p, s["id"], q["id"], {"body": 1})
    [m] = messages.claim(p, s["id"], q["id"], 1, None)
    messages.finish(p, s["id"], m["id"], "complete", {})
    [event] = messages.claim(p, s["id"], s["system_queues"]["_events"], 10, None)
    assert event["type"] == "scaiqueue.message.completed" and event["body"]["payload"]["message_id"] == m["id"]
    messages.finish(p, s["id"], event["id"], "complete", {})
    assert _events(p, s) == []  # a consumer of `_events` does not feed itself
    # but its completion is in the audit log
    assert audit.query(p, s["id"], event_type="scaiqueue.message.completed")[0][0]["resource_id"] == event["id"]


def test_a_work_api_keys_subject_is_the_actor_and_the_messages_source(tenant):
    agent = replace(tenant.principal, subject_type="agent", subject_id="bot-7")
    s = scopes.create_scope(tenant.principal, {"slug": "subjects"})
    q = queues.create_queue(tenant.principal, s["id"], {"slug": "jobs"})
    msg, _ = messages.publish(agent, s["id"], q["id"], {"body": 1, "correlation_id": "c"})
    assert (msg["source_type"], msg["source_id"]) == ("agent", "bot-7")
    [claimed] = messages.claim(agent, s["id"], q["id"], 1, None)
    assert claimed["claimed_by"] == tenant.principal.key_id  # the key that claimed it
    messages.finish_batch(agent, s["id"], "release", [{"id": msg["id"]}])
    trail = audit.trace(tenant.principal, s["id"], "c")
    assert [(e["event_type"], e["actor_type"], e["actor_id"]) for e in trail] == [
        ("scaiqueue.message.published", "agent", "bot-7"), ("scaiqueue.message.claimed", "agent", "bot-7"),
        ("scaiqueue.message.released", "agent", "bot-7")]
    assert audit.query(tenant.principal, s["id"], actor_id="bot-7")[0][0]["event_type"] == \
        "scaiqueue.message.released"


def test_the_agents_moments_are_journalled_by_the_system(tenant):
    p = tenant.principal
    s = scopes.create_scope(p, {"slug": "agents"})
    q = queues.create_queue(p, s["id"], {"slug": "jobs", "max_retries": 2})
    expiring, _ = messages.publish(p, s["id"], q["id"], {"body": 1, "correlation_id": "e", "ttl_seconds": 60})
    timed_out, _ = messages.publish(p, s["id"], q["id"], {"body": 2, "correlation_id": "t"})
    dying, _ = messages.publish(p, s["id"], q["id"], {"body": 3, "correlation_id": "d", "max_retries": 1})
    messages.claim(p, s["id"], q["id"], 3, 60)
    with db.connection() as conn:  # the clock moves on: the ttl and the claims run out
        conn.execute("UPDATE work_messages SET expires_at = clock_timestamp() - interval '1 s' WHERE id = %s",
                     (expiring["id"],))
        conn.execute("UPDATE work_messages SET visible_at = clock_timestamp() - interval '1 s' WHERE id = ANY(%s)",
                     ([timed_out["id"], dying["id"]],))
    sweeps.expire()  # (the sweeps are global: other tests' messages may be swept too)
    sweeps.recover_claims()

    def trail(c):
        return [(e["event_type"], e["actor_type"], e["actor_id"]) for e in audit.trace(p, s["id"], c)][2:]

    assert trail("e") == [("scaiqueue.message.expired", "system", "work-expiry")]
    assert trail("t") == [("scaiqueue.message.released", "system", "work-visibility-timeout")]
    assert trail("d") == [("scaiqueue.message.dead_lettered", "system", "scaiqueue")]
    assert [e["type"] for e in _events(p, s)] == ["scaiqueue.message.dead_lettered"]


def test_the_archiver_keeps_90_days_of_journal_and_loses_no_event(tenant):
    p = tenant.principal
    s = scopes.create_scope(p, {"slug": "old"})
    q = queues.create_queue(p, s["id"], {"slug": "jobs"})
    kept, _ = messages.publish(p, s["id"], q["id"], {"body": 1})
    old, _ = messages.publish(p, s["id"], q["id"], {"body": 2})
    [m] = messages.claim(p, s["id"], q["id"], 1, None)
    messages.finish(p, s["id"], m["id"], "complete", {})  # an event not yet brought into `_events`
    with db.connection() as conn:  # everything but the first publish is 91 days old
        conn.execute("UPDATE work_journal SET at = at - interval '91 days' WHERE scope_id = %s AND NOT"
                     " (event_type = 'scaiqueue.message.published' AND message_ids = ARRAY[%s::uuid])",
                     (s["id"], kept["id"]))
    sweeps.archive()
    left = audit.query(p, s["id"], limit=200)[0]
    assert [(e["event_type"], e["resource_id"]) for e in left] == [("scaiqueue.message.published", kept["id"])]
    [event] = _events(p, s)  # brought in before its journal row went
    assert event["type"] == "scaiqueue.message.completed" and event["body"]["payload"]["message_id"] == m["id"]


def _completions(tenant, scope, rows: int, per_row: int) -> None:
    """Completions journalled as the hot path writes them: a row per call of `per_row` messages."""
    with db.connection() as conn:
        conn.execute("INSERT INTO work_journal (scope_id, tenant_id, event_type, message_ids, attempts, emit)"
                     " SELECT %s, %s, 'scaiqueue.message.completed',"
                     "        ARRAY(SELECT gen_random_uuid() FROM generate_series(1, %s) WHERE g > 0), '{1}', true"
                     " FROM generate_series(1, %s) g", (scope["id"], tenant.tenant_id, per_row, rows))


def test_a_read_brings_in_at_most_10000_events_and_the_next_read_the_rest(tenant):
    p = tenant.principal
    s = scopes.create_scope(p, {"slug": "backlog"})
    events_q = s["system_queues"]["_events"]
    _completions(tenant, s, 1429, 7)  # 10,003 completions: the 10,000th is inside a row
    with db.connection() as conn:
        assert [conn.execute("SELECT work_events_sync(%s)", (s["id"],)).fetchone()[0] for _ in range(3)] == \
            [10000, 3, 0]
    assert queues.stats(p, s["id"], events_q)["depth_pending"] == 10003
    ids = [e["body"]["payload"]["message_id"] for e in _all_events(p, s)]
    assert len(ids) == len(set(ids)) == 10003  # the row cut at the 10,000th brought in once, its rest later


def test_stats_of_events_bring_in_all_of_them_a_bounded_read_at_a_time(tenant):
    p = tenant.principal
    s = scopes.create_scope(p, {"slug": "stats"})
    events_q = s["system_queues"]["_events"]
    _completions(tenant, s, 20001, 1)
    assert queues.stats(p, s["id"], events_q)["depth_pending"] == 20001
