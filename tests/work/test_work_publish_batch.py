"""The batch publish's domain: under threads every message is published once and only once (idempotency
keys shared across batches and threads included), a schema the process believed wrongly is learned,
and an atomic batch names the refused entry's fields."""

from __future__ import annotations

import json
import threading
from collections import Counter

import pytest

from postbox import db
from postbox.errors import Unprocessable
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
