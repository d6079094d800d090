"""The work journal on real PostgreSQL: `_events` materialised from it exactly once under concurrent
writers and readers, actors of work API keys, and the agents' moments."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from datetime import timedelta

import psycopg

from postbox import db
from postbox.work import audit, browse, messages, queues, scopes, sweeps
from support import database as session_db


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
    agent = tenant.principal._replace(subject_type="agent", subject_id="bot-7")
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


# ---- a row per call ------------------------------------------------------------------------------

def test_a_batch_is_one_row_and_each_message_keeps_its_own_reason_attempts_and_correlation(tenant):
    p = tenant.principal
    s = scopes.create_scope(p, {"slug": "rows"})
    q = queues.create_queue(p, s["id"], {"slug": "jobs"})
    sent = [messages.publish(p, s["id"], q["id"], {"body": i, "correlation_id": f"c{i % 2}"})[0] for i in range(4)]
    claimed = messages.claim(p, s["id"], q["id"], 4, 60)
    messages.finish_batch(p, s["id"], "fail", [{"id": m["id"], "reason": f"r{i}"} for i, m in enumerate(claimed)])
    with db.connection() as conn:
        rows = conn.execute("SELECT event_type, cardinality(message_ids) FROM work_journal WHERE scope_id = %s"
                            " AND resource_type IS NULL ORDER BY seq", (s["id"],)).fetchall()
    assert rows == [("scaiqueue.message.published", 1)] * 4 + [("scaiqueue.message.claimed", 4),
                                                               ("scaiqueue.message.failed", 4)]
    failed = audit.query(p, s["id"], event_type="scaiqueue.message.failed")[0]
    assert [(e["resource_id"], e["details"], e["correlation_id"], e["attempts"]) for e in reversed(failed)] == [
        (m["id"], {"reason": f"r{i}", "retry": True}, f"c{i % 2}", 1) for i, m in enumerate(sent)]
    assert len({e["id"] for e in audit.query(p, s["id"], limit=200)[0]}) == 4 + 4 + 4 + 2  # and the scope, queue


def test_audit_pages_cut_inside_a_row_lose_and_repeat_nothing(tenant):
    p = tenant.principal
    s = scopes.create_scope(p, {"slug": "pages"})
    q = queues.create_queue(p, s["id"], {"slug": "jobs"})
    for i in range(25):
        messages.publish(p, s["id"], q["id"], {"body": i})
    claimed = messages.claim(p, s["id"], q["id"], 25, 60)
    messages.finish_batch(p, s["id"], "complete", [{"id": m["id"]} for m in claimed])
    whole = audit.query(p, s["id"], limit=200)[0]
    paged, cursor = [], None
    while True:
        page, cursor = audit.query(p, s["id"], limit=7, cursor=cursor)  # 7 does not divide the rows of 25
        paged += page
        if not cursor:
            break
    assert paged == whole and len(whole) == 25 * 3 + 2
    assert [int(e["id"]) for e in whole] == sorted((int(e["id"]) for e in whole), reverse=True)


# ---- partitions and retention -------------------------------------------------------------------

def _partition_of(conn, scope_id) -> set[str]:
    return {r[0] for r in conn.execute("SELECT DISTINCT tableoid::regclass::text FROM work_journal"
                                       " WHERE scope_id = %s", (scope_id,))}


def test_the_agent_makes_the_weeks_ahead_and_takes_a_weeks_rows_out_of_the_default_partition(tenant):
    p = tenant.principal
    s = scopes.create_scope(p, {"slug": "ahead"})
    q = queues.create_queue(p, s["id"], {"slug": "jobs"})
    messages.publish(p, s["id"], q["id"], {"body": 1})
    with db.connection() as conn:  # a row written six weeks ahead, past every week made: the default takes it
        conn.execute("UPDATE work_journal SET at = at + interval '6 weeks' WHERE scope_id = %s", (s["id"],))
        assert _partition_of(conn, s["id"]) == {"work_journal_default"}
        week = conn.execute("SELECT 'work_journal_p' || to_char(date_trunc('week', (at AT TIME ZONE 'UTC')),"
                            " 'YYYYMMDD') FROM work_journal WHERE scope_id = %s", (s["id"],)).fetchone()[0]
    assert sweeps.keep_journal()["partitions"] == 0  # the four weeks ahead are there already
    with db.connection() as conn:
        assert conn.execute("SELECT work_journal_partitions(7)").fetchone()[0] >= 1
        assert _partition_of(conn, s["id"]) == {week}
        assert conn.execute("SELECT work_journal_partitions(7)").fetchone()[0] == 0
    assert [e["event_type"] for e in audit.query(p, s["id"])[0]][0] == "scaiqueue.message.published"


def test_a_week_is_not_attached_while_a_read_holds_the_journal_it_is_made_by_a_later_run(database_url):
    """Attaching a week locks the default partition, which every read of the journal holds while it
    runs: the agent waits a moment for it, leaves the week to its next run, and never queues the
    journal's readers behind it for long."""
    with db.connection() as conn:
        weeks = [r[0] for r in conn.execute(
            "SELECT 'work_journal_p' || to_char(date_trunc('week', clock_timestamp() AT TIME ZONE 'UTC')"
            " + make_interval(weeks => w), 'YYYYMMDD') FROM generate_series(9, 10) w")]
        assert conn.execute("SELECT count(to_regclass(w)) FROM unnest(%s::text[]) w", (weeks,)).fetchone()[0] == 0
    with psycopg.connect(database_url) as reader:  # a read of the journal in an open transaction
        reader.execute("SELECT count(*) FROM work_journal")
        with db.connection() as conn:  # (waiting for the reader would end in the session's lock timeout)
            assert conn.execute("SELECT work_journal_partitions(10)").fetchone()[0] == 0
        reader.rollback()
    with db.connection() as conn:
        assert conn.execute("SELECT work_journal_partitions(10)").fetchone()[0] >= 2
        assert conn.execute("SELECT count(to_regclass(w)) FROM unnest(%s::text[]) w", (weeks,)).fetchone()[0] == 2


def test_the_archiver_drops_a_week_past_retention_once_its_events_are_in(tenant, database_url):

    p = tenant.principal
    s = scopes.create_scope(p, {"slug": "dropped"})
    q = queues.create_queue(p, s["id"], {"slug": "jobs"})
    messages.publish(p, s["id"], q["id"], {"body": 1})
    [m] = messages.claim(p, s["id"], q["id"], 1, None)
    messages.finish(p, s["id"], m["id"], "complete", {})  # its event not yet in `_events`
    with psycopg.connect(session_db.OWNER_URL or database_url, autocommit=True) as owner:
        week = owner.execute("SELECT date_trunc('week', clock_timestamp() AT TIME ZONE 'UTC')::date - 15 * 7"
                             ).fetchone()[0]
        name = f"work_journal_p{week:%Y%m%d}"
        owner.execute(f"CREATE TABLE IF NOT EXISTS {name} PARTITION OF work_journal FOR VALUES"
                      f" FROM ('{week} 00:00+00') TO ('{week + timedelta(days=7)} 00:00+00')")
        owner.execute("UPDATE work_journal SET at = %s::date + interval '1 day'"
                      " WHERE scope_id = %s AND resource_type IS NULL", (week, s["id"]))
        assert name in _partition_of(owner, s["id"])
    sweeps.archive()
    with db.connection() as conn:
        assert conn.execute("SELECT to_regclass(%s)", (name,)).fetchone()[0] is None  # dropped whole
    assert [e["resource_type"] for e in audit.query(p, s["id"], limit=200)[0]] == ["queue", "scope"]
    [event] = _events(p, s)  # brought in before its week went
    assert event["type"] == "scaiqueue.message.completed" and event["body"]["payload"]["message_id"] == m["id"]
    assert queues.stats(p, s["id"], q["id"])["completed_total"] == 1  # its moves were folded first


# ---- an upgraded database -----------------------------------------------------------------------

def test_the_rows_of_the_journal_before_it_held_calls_read_as_they_did(database_url):
    """A database whose journal held a row per message: after the upgrade each row is an entry with
    the same columns and id, and new rows number after them."""
    from postbox import migrate

    owner = session_db.OWNER_URL or database_url
    name = f"journal_upgrade_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(owner, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    info = psycopg.conninfo.conninfo_to_dict(owner)
    url = psycopg.conninfo.make_conninfo(**{**info, "dbname": name})
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            for statement in migrate._BOOKKEEPING:
                conn.execute(statement)
            for version, file, sql in migrate.available():
                if file.startswith("0019_"):
                    break
                with conn.transaction():
                    conn.execute(sql)
                    conn.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (version, file))
            old = [r[0] for r in conn.execute(
                "INSERT INTO work_journal (scope_id, tenant_id, at, event_type, resource_type, resource_id, message_id,"
                " queue_id, correlation_id, actor_type, actor_id, attempts, outcome, emit, payload)"
                " SELECT gen_random_uuid(), gen_random_uuid(), clock_timestamp() - make_interval(days => g * 30),"
                "        CASE WHEN g = 3 THEN 'scaiqueue.queue.created' ELSE 'scaiqueue.message.failed' END,"
                "        CASE WHEN g = 3 THEN 'queue' ELSE 'message' END, CASE WHEN g = 3 THEN 'q-1' END,"
                "        CASE WHEN g <> 3 THEN gen_random_uuid() END, g, CASE WHEN g = 1 THEN 'c' END, 'api_key',"
                "        'k', CASE WHEN g <> 3 THEN g END, 'success', g = 2, jsonb_build_object('reason', 'r' || g)"
                " FROM generate_series(0, 4) g RETURNING to_jsonb(work_journal.*)")]
        migrate.apply(url)
        with psycopg.connect(url) as conn:
            now = [r[0] for r in conn.execute("SELECT to_jsonb(e) FROM work_journal_entries e ORDER BY seq")]
            assert now == sorted(old, key=lambda r: r["seq"])  # the same entries, ids, times and columns
            conn.execute("INSERT INTO work_journal (tenant_id, event_type, message_ids) VALUES"
                         " (gen_random_uuid(), 'scaiqueue.message.published', ARRAY[gen_random_uuid()])")
            assert conn.execute("SELECT max(seq) FROM work_journal").fetchone()[0] > max(r["seq"] for r in old)
    finally:
        with psycopg.connect(owner, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
