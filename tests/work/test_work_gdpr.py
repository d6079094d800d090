"""GDPR erasure and export jobs of the work surface on real PostgreSQL: each mode touches only its
actor's data (two actors' data interleaved in the same queues), counters stay right, jobs progress
in bounded batches and two agent runs at once never process a row twice."""

from __future__ import annotations

import threading

import pytest

from postbox import db, jsoncodec
from postbox.errors import Forbidden, NotFound
from postbox.work import gdpr, messages, queues, scopes, subscriptions

MARK = {"redacted": True}


class World:
    """Actors A and B of one tenant, their data interleaved: each publishes into the same competing
    and broadcast queues, claims and completes the other's messages, and has a subscription."""

    def __init__(self, tenant):
        self.tenant = tenant
        self.a = tenant.principal
        self.b = tenant.principal_for("manage")
        self.actor_a = ("api_key", self.a.key_id)
        self.actor_b = ("api_key", self.b.key_id)
        a, b = self.a, self.b
        self.scope = scopes.create_scope(a, {"slug": "gdpr", "emit_events": ["published", "claimed"]})
        sid = self.scope["id"]
        self.queue = queues.create_queue(a, sid, {"slug": "jobs"})
        self.fan = queues.create_queue(a, sid, {"slug": "fan", "consumer_mode": "broadcast"})
        self.sub_a = subscriptions.create(a, sid, {"queue_id": self.fan["id"], "subscriber_type": "api_key",
                                                   "subscriber_id": a.key_id})
        self.sub_b = subscriptions.create(b, sid, {"queue_id": self.fan["id"], "subscriber_type": "api_key",
                                                   "subscriber_id": b.key_id})
        for i in range(6):
            for who, p in (("a", a), ("b", b)):
                messages.publish(p, sid, self.queue["id"], {
                    "body": {"who": who, "i": i}, "labels": {"owner": who}, "correlation_id": f"{who}-{i}",
                    "hitl_spec": {"context": {"title": f"{who} {i}"}}})
        # fifo: A claims a0 b0 a1 and completes them; B claims b1 a2 b2 and completes them; rest pending
        for p in (a, b):
            for m in messages.claim(p, sid, self.queue["id"], 3, None):
                messages.finish(p, sid, m["id"], "complete", {"response": {"by": p.key_id}})
        # one more claim each, failed back to pending with a reason
        for p in (a, b):
            (m,) = messages.claim(p, sid, self.queue["id"], 1, None)
            messages.finish(p, sid, m["id"], "fail", {"reason": f"failed by {p.key_id}"})
        for i in range(2):
            for who, p in (("a", a), ("b", b)):
                messages.publish(p, sid, self.fan["id"], {"body": {"fan": who, "i": i}})
        for p, sub in ((a, self.sub_a), (b, self.sub_b)):
            for m in subscriptions.claim(p, sid, sub["id"], 3, None):
                subscriptions.finish(p, sid, sub["id"], m["id"], "complete", {"response": {"sub": p.key_id}})
        queues.stats(a, sid, self.scope["system_queues"]["_events"])  # the events land in `_events` when read

    def rows(self) -> dict[str, dict]:
        """Every work row of the tenant by a stable key: messages, deliveries, subscriptions."""
        with db.connection() as conn:
            out = {f"m:{r[0]}": r[1] for r in conn.execute(
                "SELECT id, to_jsonb(m) - 'updated_at' FROM work_messages m WHERE tenant_id = %s",
                (self.tenant.tenant_id,))}
            out |= {f"d:{r[0]}/{r[1]}": r[2] for r in conn.execute(
                "SELECT d.subscription_id, d.message_id, to_jsonb(d) - 'updated_at' FROM work_deliveries d"
                " JOIN work_subscriptions x ON x.id = d.subscription_id WHERE x.tenant_id = %s",
                (self.tenant.tenant_id,))}
            out |= {f"s:{r[0]}": r[1] for r in conn.execute(
                "SELECT id, to_jsonb(x) - 'updated_at' FROM work_subscriptions x WHERE tenant_id = %s",
                (self.tenant.tenant_id,))}
        return out

    def touches(self, row: dict, actor: tuple[str, str]) -> bool:
        """Whether a row holds anything of `actor`: as publisher, claimer, subscriber (or a delivery of
        its subscription), or an event about any of those."""
        actor_type, actor_id = actor
        subs = {self.sub_a["id"]: self.actor_a, self.sub_b["id"]: self.actor_b}
        if "subscriber_id" in row:
            return (row["subscriber_type"], row["subscriber_id"]) == actor
        if "subscription_id" in row and "message_id" in row:  # a delivery: of its subscription, or its message
            message = self.before[f"m:{row['message_id']}"]
            return subs[row["subscription_id"]] == actor or (message["source_type"], message["source_id"]) == actor
        if row["source_type"] == "system":
            payload = row["body"]["payload"]
            cause = self.before.get(f"m:{row['causation_id']}") or {}
            if payload.get("subscription_id") and subs[payload["subscription_id"]] == actor:
                return True  # an event of its delivery
            if payload.get("claimed_by") == actor_id or (cause.get("source_type"), cause.get("source_id")) == actor:
                return True  # its claim, or an event about its message
            return not payload.get("subscription_id") and cause.get("claimed_by") == actor_id
        return (row["source_type"], row["source_id"]) == actor or row["claimed_by"] == actor_id

    def snapshot(self) -> None:
        self.before = self.rows()


def _finish(job_id: str, batch: int = gdpr.BATCH) -> None:
    """Run agent batches until the job has ended (other tests' jobs may be taken first)."""
    for _ in range(10_000):
        with db.connection() as conn:
            state = conn.execute("SELECT state FROM work_gdpr_jobs WHERE id = %s", (job_id,)).fetchone()[0]
        if state in ("completed", "failed"):
            assert state == "completed"
            return
        gdpr.run_batch(batch)
    raise AssertionError("the job never ended")


def _counters_match(queue_ids: list[str]) -> None:
    """Each queue's pending and claimed counters equal its live rows."""
    with db.connection() as conn:
        for qid in queue_ids:
            counted, live = conn.execute(
                "SELECT (SELECT array[coalesce(sum(pending), 0), coalesce(sum(claimed), 0)]::bigint[]"
                "        FROM work_queue_depths(ARRAY[q.id]) c),"
                "       (SELECT array[count(*) FILTER (WHERE state = 'pending'),"
                "                     count(*) FILTER (WHERE state = 'claimed')]::bigint[]"
                "        FROM work_messages m WHERE m.queue_id = q.id AND m.ended_at IS NULL)"
                " FROM work_queues q WHERE q.queue_id = %s", (qid,)).fetchone()
            assert counted == live, qid


def _erase(world: World, mode: str, actor=None, batch=gdpr.BATCH) -> dict:
    actor_type, actor_id = actor or world.actor_a
    job = gdpr.submit(world.a, world.tenant.tenant_id, "erasure",
                      {"mode": mode, "actor_type": actor_type, "actor_id": actor_id})
    assert job["state"] == "queued" and job["mode"] == mode
    _finish(job["job_id"], batch)
    return gdpr.status(world.a, world.tenant.tenant_id, "erasure", job["job_id"])


def test_redact_overwrites_only_the_actors_data(tenant):
    w = World(tenant)
    w.snapshot()
    untouched = {k for k, r in w.before.items() if not w.touches(r, w.actor_a)}
    assert len(untouched) > 20 and len(w.before) - len(untouched) > 20  # both actors have plenty
    done = _erase(w, "redact")
    assert done["state"] == "completed" and done["completed_at"] and done["started_at"]
    after = w.rows()
    assert set(after) == set(w.before)  # redact removes nothing
    for key in untouched:  # nothing of B (nor of the system about B) changed at all
        assert after[key] == w.before[key], key
    published = [r for r in after.values() if r.get("source_type") == "redacted"]
    assert len(published) == 6 + 2  # A's messages in the competing and the broadcast queue
    for r in published:
        assert r["body"] == MARK and r["labels"] == {"redacted": "true"} and r["source_id"] is None
        assert r["correlation_id"] is None and r["hitl_spec"] in (None, MARK)
    # B's messages A claimed: only A's marks are gone
    for key, r in after.items():
        old = w.before[key]
        if key.startswith("m:") and old["source_id"] == w.b.key_id and old["claimed_by"] == w.a.key_id:
            assert r["claimed_by"] == "redacted" and r["body"] == old["body"]
            assert r["response"] in (None, MARK) and (old["response"] is None) == (r["response"] is None)
            assert {k: v for k, v in r.items() if k not in ("claimed_by", "response", "failure_reason")} == \
                   {k: v for k, v in old.items() if k not in ("claimed_by", "response", "failure_reason")}
    assert not [r for r in after.values() if w.a.key_id in jsoncodec.dumps(r).decode()]  # A's id is nowhere
    steps = {s["name"]: s for s in done["progress"]["steps"]}
    assert steps["messages"]["processed"] == 8 and steps["subscriptions"]["processed"] == 1
    assert all(s["state"] == "done" for s in steps.values())


def test_delete_removes_only_the_actors_rows_and_keeps_counters_right(tenant):
    w = World(tenant)
    w.snapshot()
    untouched = {k for k, r in w.before.items() if not w.touches(r, w.actor_a)}
    _erase(w, "delete")
    after = w.rows()
    for key in untouched:
        assert after.get(key) == w.before[key], (key, w.before[key].get("message_type"), w.before[key].get("body"))
    gone = set(w.before) - set(after)
    assert gone and all(w.touches(w.before[k], w.actor_a) for k in gone)
    assert not [k for k in gone if k.startswith("m:") and w.before[k]["source_id"] == w.b.key_id]
    assert not [r for r in after.values() if r.get("source_id") == w.a.key_id]
    assert f"s:{w.sub_a['id']}" not in after and f"s:{w.sub_b['id']}" in after
    assert not [r for r in after.values() if w.a.key_id in jsoncodec.dumps(r).decode()]
    system = [q for q in queues.list_queues(w.a, w.scope["id"], 200, None)[0] if q["slug"] == "_events"]
    _counters_match([w.queue["id"], w.fan["id"], system[0]["id"]])
    assert queues.stats(w.b, w.scope["id"], w.queue["id"])["depth_pending"] == 3  # b3 (failed), b4, b5


def _state(job_id: str) -> str:
    with db.connection() as conn:
        return conn.execute("SELECT state FROM work_gdpr_jobs WHERE id = %s", (job_id,)).fetchone()[0]


def test_progress_across_bounded_runs(tenant, monkeypatch):
    monkeypatch.setattr(gdpr, "WALK_FACTOR", 10_000)  # the walks of the shared test database: a few batches
    w = World(tenant)
    job = gdpr.submit(w.a, tenant.tenant_id, "erasure", {"actor_type": "api_key", "actor_id": w.a.key_id})
    seen, states, step_states = [], [], []
    for _ in range(10_000):
        doc = gdpr.status(w.a, tenant.tenant_id, "erasure", job["job_id"])
        seen.append(next(st["processed"] for st in doc["progress"]["steps"] if st["name"] == "messages"))
        states.append((doc["state"], doc["started_at"] is not None, doc["completed_at"] is not None))
        step_states.append({k: [st["state"] for st in doc["progress"]["steps"]].count(k)
                            for k in ("done", "running", "pending")})
        if doc["state"] == "completed":
            break
        gdpr.run_batch(3)
    assert doc["mode"] == "redact"
    assert seen[-1] == 8 and {3, 6} <= set(seen)  # three at a time: 3, 6, then 8
    assert states[0] == ("queued", False, False) and states[-1] == ("completed", True, True)
    assert ("running", True, False) in states
    assert {"done": 2, "running": 1, "pending": 3} in step_states  # audit and events done, messages under way


def test_two_runs_at_once_never_process_a_row_twice(tenant, monkeypatch):
    monkeypatch.setattr(gdpr, "WALK_FACTOR", 10_000)
    w = World(tenant)
    job = gdpr.submit(w.a, tenant.tenant_id, "erasure", {"actor_type": "api_key", "actor_id": w.a.key_id})
    barrier = threading.Barrier(2)

    def agent():
        barrier.wait()
        for _ in range(2000):
            if _state(job["job_id"]) in ("completed", "failed"):
                return
            gdpr.run(batch=2, max_batches=5)

    threads = [threading.Thread(target=agent) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    doc = gdpr.status(w.a, tenant.tenant_id, "erasure", job["job_id"])
    steps = {s["name"]: s["processed"] for s in doc["progress"]["steps"]}
    assert doc["state"] == "completed"
    assert steps["messages"] == 8 and steps["subscriptions"] == 1  # each row counted once


def test_export_holds_the_actors_data_only(tenant):
    w = World(tenant)
    for fmt, compression in (("jsonl", "none"), ("json", "zstd")):
        job = gdpr.submit(w.a, tenant.tenant_id, "export",
                          {"actor_type": "api_key", "actor_id": w.a.key_id, "format": fmt, "compression": compression})
        _finish(job["job_id"], batch=4)
        doc = gdpr.status(w.a, tenant.tenant_id, "export", job["job_id"])
        assert doc["state"] == "completed" and doc["download"]["store"] == "database"
        file = gdpr.export_file(w.a, tenant.tenant_id, job["job_id"])
        assert doc["bytes"] == len(file.content)
        raw = file.content
        if compression == "zstd":
            import zstandard

            raw = zstandard.ZstdDecompressor().decompressobj().decompress(raw)
        if fmt == "jsonl":
            lines = [jsoncodec.loads(x) for x in raw.decode().splitlines()]
            header, records = lines[0], lines[1:]
        else:
            parsed = jsoncodec.loads(raw)
            header, records = parsed["export"], parsed["records"]
        assert header["actor_id"] == w.a.key_id and doc["records"] == len(records)
        kinds = [r["record"] for r in records]
        assert kinds.count("message") == 8 and kinds.count("subscription") == 1
        assert kinds.count("claim") == 4  # a0 b0 a1 completed, and one failed
        assert kinds.count("delivery") == 4
        for r in records:
            if r["record"] == "message":
                assert r["source_id"] == w.a.key_id
            elif r["record"] == "claim":
                assert r["claimed_by"] == w.a.key_id
            elif r["record"] == "delivery":
                assert r["subscription_id"] == w.sub_a["id"]
    assert not db.connection().__enter__().execute(
        "SELECT 1 FROM work_gdpr_export_parts WHERE job_id = %s", (job["job_id"],)).fetchone()


def test_another_tenant_and_missing_jobs_are_not_found(tenant, make_tenant):
    other = make_tenant()
    job = gdpr.submit(tenant.principal, tenant.tenant_id, "erasure", {"actor_type": "user", "actor_id": "x"})
    with pytest.raises(NotFound) as e:
        gdpr.submit(tenant.principal, other.tenant_id, "erasure", {"actor_type": "user", "actor_id": "x"})
    assert e.value.code == "NOT_FOUND"
    with pytest.raises(NotFound) as e:
        gdpr.status(other.principal, tenant.tenant_id, "erasure", job["job_id"])
    assert e.value.code == "NOT_FOUND"
    with pytest.raises(NotFound) as e:
        gdpr.status(other.principal, other.tenant_id, "erasure", job["job_id"])
    assert e.value.code == gdpr.JOB_NOT_FOUND
    with pytest.raises(NotFound) as e:
        gdpr.status(tenant.principal, tenant.tenant_id, "export", job["job_id"])  # an erasure, not an export
    assert e.value.code == gdpr.JOB_NOT_FOUND
    with pytest.raises(Forbidden):
        gdpr.submit(tenant.principal_for("write"), tenant.tenant_id, "export", {"actor_type": "user", "actor_id": "x"})


def test_a_step_added_to_the_list_runs_in_its_turn(tenant, monkeypatch):
    """Another table's step (an audit journal's) joins erasure by one SQL function of the steps'
    signature and one row in the list."""
    with db.connection() as conn:
        conn.execute("""
            CREATE OR REPLACE FUNCTION work_gdpr_erase_probe(j work_gdpr_jobs, p_after text, p_limit int,
                                                             OUT n int, OUT last text)
            LANGUAGE sql AS $$ SELECT 2, CASE WHEN p_after IS NULL THEN 'again' END $$""")
    try:
        steps = (*gdpr.ERASURE, gdpr.Step("probe", "work_gdpr_erase_probe"))
        monkeypatch.setattr(gdpr, "ERASURE", steps)
        monkeypatch.setitem(gdpr.STEPS, "erasure", steps)
        job = gdpr.submit(tenant.principal, tenant.tenant_id, "erasure", {"actor_type": "user", "actor_id": "p"})
        _finish(job["job_id"])
        doc = gdpr.status(tenant.principal, tenant.tenant_id, "erasure", job["job_id"])
        assert [s["name"] for s in doc["progress"]["steps"]][-1] == "probe"
        assert doc["progress"]["steps"][-1] == {"name": "probe", "state": "done", "processed": 4}  # two batches
    finally:
        with db.connection() as conn:
            conn.execute("DROP FUNCTION work_gdpr_erase_probe(work_gdpr_jobs, text, int)")


def _journal(world: World) -> dict[int, dict]:
    with db.connection() as conn:
        return {r[0]: r[1] for r in conn.execute(
            "SELECT seq, to_jsonb(j) FROM work_journal_entries j WHERE tenant_id = %s", (world.tenant.tenant_id,))}


def _a_messages(world: World) -> set[str]:
    with db.connection() as conn:
        return {str(r[0]) for r in conn.execute("SELECT id FROM work_messages WHERE source_id = %s",
                                                (world.a.key_id,))}


def _spread_over_partitions(world: World) -> None:
    """Every other journal row of the tenant 20 days back: into the partition that holds the weeks
    before this one's (the default), so the journal rows live in two partitions."""
    with db.connection() as conn:
        conn.execute("UPDATE work_journal SET at = at - interval '20 days' WHERE tenant_id = %(t)s AND seq IN"
                     " (SELECT seq FROM (SELECT seq, row_number() OVER (ORDER BY seq) AS n FROM work_journal"
                     "  WHERE tenant_id = %(t)s) r WHERE n %% 2 = 0)", {"t": world.tenant.tenant_id})
        assert conn.execute("SELECT count(DISTINCT tableoid) FROM work_journal WHERE tenant_id = %s",
                            (world.tenant.tenant_id,)).fetchone()[0] == 2


@pytest.mark.parametrize("spread", [False, True], ids=["one-partition", "two-partitions"])
@pytest.mark.parametrize("mode", ["redact", "delete"])
def test_the_audit_log_forgets_the_actor_and_keeps_everyone_else(tenant, mode, spread):
    w = World(tenant)
    if spread:
        _spread_over_partitions(w)
    mine = _a_messages(w)
    before = _journal(w)
    by_a = {s for s, r in before.items() if (r["actor_type"], r["actor_id"]) == w.actor_a}
    about_a = {s for s, r in before.items() if r["message_id"] in mine}
    others = set(before) - by_a - about_a
    assert len(by_a) > 10 and len(about_a) > 10 and len(others) > 10  # A claimed, completed, made the scope
    _erase(w, mode)
    after = _journal(w)
    for seq in others:  # B's own rows about B's messages: unchanged
        assert after[seq] == before[seq], before[seq]
    if mode == "delete":
        assert not about_a & set(after)
    for seq in (by_a | about_a) & set(after):
        row = after[seq]
        assert w.a.key_id not in jsoncodec.dumps(row).decode(), row
        if seq in by_a:
            assert (row["actor_type"], row["actor_id"]) == ("redacted", "redacted")
        else:  # B's doing on A's message: still B's, without A's correlation id or details
            assert row["actor_id"] == before[seq]["actor_id"] and row["correlation_id"] is None
    trail = [r for r in after.values() if r["actor_id"] == w.b.key_id]
    assert trail and all(r == before[r["seq"]] for r in trail if r["seq"] in others)


def test_an_export_holds_the_actors_audit_events(tenant):
    w = World(tenant)
    job = gdpr.submit(w.a, tenant.tenant_id, "export", {"actor_type": "api_key", "actor_id": w.a.key_id})
    by_a = [r for r in _journal(w).values() if (r["actor_type"], r["actor_id"]) == w.actor_a]  # the request too
    _finish(job["job_id"])
    file = gdpr.export_file(w.a, tenant.tenant_id, job["job_id"])
    records = [jsoncodec.loads(x) for x in file.content.decode().splitlines()][1:]
    audit = [r for r in records if r["record"] == "audit"]
    assert len(audit) == len(by_a) and {r["event_type"] for r in audit} >= {
        "scaiqueue.message.completed", "scaiqueue.scope.created", "scaiqueue.gdpr.export_requested"}
