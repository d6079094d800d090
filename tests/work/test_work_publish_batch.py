"""The batch publish's domain: under threads every message is published once and only once (idempotency
keys shared across batches and threads included), a schema the process believed wrongly is learned,
and an atomic batch names the refused entry's fields."""

from __future__ import annotations

import json
import threading
from collections import Counter

import pytest

from postbox import db
from postbox.errors import Conflict, Unprocessable
from postbox.work import messages, queues, schemas, scopes

THREADS, BATCHES, SHARED = 4, 5, 10


def _setup(tenant, slug="batches"):
    s = scopes.create_scope(tenant.principal, {"slug": slug})
    return s, queues.create_queue(tenant.principal, s["id"], {"slug": "jobs"})


def test_batches_from_many_threads_publish_every_message_once(tenant):
    s, q = _setup(tenant)
    answers: dict[tuple[int, int], list] = {}
    failures: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def producer(t: int) -> None:
        try:
            start.wait()
            for b in range(BATCHES):
                own = [{"body": f"t{t}-b{b}-{i}"} for i in range(100 - SHARED)]
                shared = [{"body": f"shared-{k}", "idempotency_key": f"k{k}"} for k in range(SHARED)]
                entries = shared[:5] + own + shared[5:]
                answers[t, b] = messages.publish_batch(tenant.principal, s["id"], q["id"], entries)
        except BaseException as e:  # surfaced below: a thread's failure must fail the test
            failures.append(e)

    threads = [threading.Thread(target=producer, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    every = [a for batch in answers.values() for a in batch]
    assert len(every) == THREADS * BATCHES * 100 and all(isinstance(a, dict) for a in every)
    published = [a for a in every if not a["replayed"]]
    assert len(published) == THREADS * BATCHES * (100 - SHARED) + SHARED
    assert len({a["id"] for a in published}) == len(published)
    for k in range(SHARED):  # every publish of a shared key answers the one message it made
        ids = {batch[k if k < 5 else k + 100 - SHARED]["id"] for batch in answers.values()}
        assert len(ids) == 1

    got: Counter[str] = Counter()
    while batch := messages.claim(tenant.principal, s["id"], q["id"], 100, 60):
        done = messages.finish_batch(tenant.principal, s["id"], "complete",
                                     [{"id": m["id"], "claim_token": m["claim_token"]} for m in batch])
        assert all(d["ok"] for d in done)
        got.update(m["body"] for m in batch)
    expected = {f"t{t}-b{b}-{i}" for t in range(THREADS) for b in range(BATCHES) for i in range(100 - SHARED)}
    assert set(got) == expected | {f"shared-{k}" for k in range(SHARED)} and max(got.values()) == 1
    st = queues.stats(tenant.principal, s["id"], q["id"])
    assert st["published_total"] == len(published) and st["completed_total"] == len(published)


def _order_schema(tenant, s, q):
    schemas.register(tenant.principal, s["id"], "order", "1", {
        "type": "object", "required": ["qty"], "properties": {"qty": {"type": "integer", "minimum": 1}}})
    schemas.bind_queue(tenant.principal, s["id"], q["id"], "order", "1")


def test_a_schema_the_process_did_not_know_of_is_learned_and_each_body_checked(tenant):
    s, q = _setup(tenant)
    _order_schema(tenant, s, q)
    schemas.learn(q["id"], None)  # as if another process had bound it: this one believes there is none
    answers = messages.publish_batch(tenant.principal, s["id"], q["id"], [{"body": {"qty": 1}}, {"body": {"qty": 0}}])
    assert answers[0]["replayed"] is False
    assert isinstance(answers[1], Unprocessable) and answers[1].details["fields"][0]["field"] == "body.qty"
    with db.connection() as conn:
        assert conn.execute("SELECT count(*) FROM work_messages m JOIN work_queues q ON q.id = m.queue_id"
                            " WHERE q.queue_id = %s", (q["id"],)).fetchone()[0] == 1


def test_an_atomic_batch_refused_by_the_schema_names_the_entrys_fields_and_publishes_nothing(tenant):
    s, q = _setup(tenant)
    _order_schema(tenant, s, q)
    with pytest.raises(Unprocessable) as refused:
        messages.publish_batch(tenant.principal, s["id"], q["id"], [{"body": {"qty": 1}}, {"body": {"qty": 0}}],
                               atomic=True)
    assert refused.value.details["fields"][0]["field"] == "messages.1.body.qty"
    assert refused.value.message.startswith("messages.1: ")
    assert queues.stats(tenant.principal, s["id"], q["id"])["published_total"] == 0


@pytest.mark.parametrize("atomic", [False, True])
def test_a_batch_leaves_the_rest_of_its_transaction_answering_full_documents(tenant, atomic):
    s, q = _setup(tenant)
    [done] = messages.publish_batch(tenant.principal, s["id"], q["id"], [{"body": "kept", "idempotency_key": "k"}])
    with db.transaction() as conn:
        entries = [{"body": "new"}, {"body": "other", "idempotency_key": "k"}]  # the second one refused
        answer = conn.execute("SELECT work_publish_batch(%s, %s, %s, %s::jsonb, 'test', NULL, %s)",
                              (tenant.tenant_id, s["id"], q["id"], json.dumps(entries), atomic)).fetchone()[0]
        assert answer["undone"] is atomic and answer["entries"][1]["ok"] is False
        document = conn.execute("SELECT work_message_doc(%s)", (done["id"],)).fetchone()[0]
    assert document["body"] == "kept" and document["queue_slug"] == "jobs"


ENTRIES = [
    {"body": {"n": 1}, "priority": {"tier": "high", "score": 900}, "labels": {"a": "1"}, "type": "order.created"},
    {"body": "two", "ttl_seconds": 60, "correlation_id": "c-2", "causation_id": "x", "parent_id": "y"},
    {"body": {"n": 3}, "deadline": "2031-01-01T00:00:00+00:00", "max_retries": 5, "visibility_timeout_s": 40},
    {"body": {"n": 4}, "idempotency_key": "k4", "hitl_spec": {"decision": {"field": "ok", "options": ["y"]}},
     "content_type": "text/plain", "visible_at": "2030-01-01T00:00:00+00:00"},
    {"body": {"n": 4}, "idempotency_key": "k4"},
    {"body": {"other": 4}, "idempotency_key": "k4"},
    {"body": "low", "priority": {"tier": "background", "score": 0}},
]
_ROW = """SELECT m.rank, m.state, m.message_type, m.tier, m.score, m.labels, m.content_type, m.body, m.correlation_id,
                 m.causation_id, m.parent_id, m.source_type, m.source_id, m.ttl_seconds, m.deadline,
                 m.expires_at IS NULL, m.aged_at IS NULL, m.visible_at > clock_timestamp(), m.max_retries,
                 m.visibility_timeout_s, m.idempotency_key, m.hitl_spec, m.attempts,
                 j.event_type, j.actor_type, j.actor_id, j.attempts, j.emit
          FROM work_messages m JOIN work_queues q ON q.id = m.queue_id
          JOIN work_journal_entries j ON j.message_id = m.id AND j.event_type = 'scaiqueue.message.published'
          WHERE q.queue_id = %s ORDER BY m.seq"""


def test_a_plain_batch_writes_what_single_publishes_write(tenant):
    """The set-based pass and the single publish side by side, in a scope that emits published events,
    into priority queues: the same rows, journal rows, counts, answers and claim order."""
    s = scopes.create_scope(tenant.principal, {"slug": "alike", "emit_events": ["published"]})
    batched, single = (queues.create_queue(tenant.principal, s["id"], {"slug": slug, "ordering": "priority"})
                       for slug in ("batched", "single"))
    answers = messages.publish_batch(tenant.principal, s["id"], batched["id"], ENTRIES)
    singles = []
    for entry in ENTRIES:
        try:
            found, replayed = messages.publish(tenant.principal, s["id"], single["id"], dict(entry))
            singles.append(("ok", replayed))
        except Conflict as e:
            singles.append((e.code, None))
    assert [("ok", a["replayed"]) if isinstance(a, dict) else (a.code, None) for a in answers] == singles
    assert answers[4]["id"] == answers[3]["id"]
    with db.connection() as conn:
        rows = [conn.execute(_ROW, (q["id"],)).fetchall() for q in (batched, single)]
    assert len(rows[0]) == 5 and rows[0] == rows[1]
    stats = [queues.stats(tenant.principal, s["id"], q["id"]) for q in (batched, single)]
    assert stats[0] == {**stats[1], "queue_id": batched["id"]}
    claimed = [messages.claim(tenant.principal, s["id"], q["id"], 10, 60) for q in (batched, single)]
    assert [m["body"] for m in claimed[0]] == [m["body"] for m in claimed[1]]


def test_a_batch_of_one_publisher_is_one_journal_row_and_is_counted(tenant):
    """The journal is written once per call: a batch of 100 into a plain queue is one row holding the
    100 ids in the batch's order, and the queue's depth counts all of them."""
    s, q = _setup(tenant, "one-row")
    answers = messages.publish_batch(tenant.principal, s["id"], q["id"], [{"body": i} for i in range(100)])
    ids = [a["id"] for a in answers]
    with db.connection() as conn:
        rows = conn.execute("SELECT message_ids::text[] FROM work_journal WHERE scope_id = %s"
                            " AND event_type = 'scaiqueue.message.published'", (s["id"],)).fetchall()
    assert rows == [(ids,)]
    assert queues.stats(tenant.principal, s["id"], q["id"])["depth_current"] == 100
