"""The work-queue client against the local gateway: scopes, queues, publish and claim, the consume
loop (completions carry the handler's answer, failures its exception), batch finishing, claim
tokens, typed errors, and the async form."""

from __future__ import annotations

import asyncio
import threading

import pytest

from postbox_client import AsyncClient, Conflict, NotFound, RateLimited, ValidationFailed
from postbox_client.heartbeat import beating


def _setup(pb, slug="jobs"):
    scope = pb.work.create_scope(slug)
    queue = pb.work.create_queue(scope, "emails", max_retries=1)
    return scope, queue


def test_publish_claim_and_finish_with_claim_tokens(pb):
    scope, queue = _setup(pb)
    assert scope["slug"] == "jobs" and "_dead_letter" in scope["system_queues"]
    sent = pb.work.publish(scope, queue, {"to": "ada"}, idempotency_key="k1", correlation_id="c1")
    assert pb.work.publish(scope, queue, {"to": "ada"}, idempotency_key="k1")["id"] == sent["id"]
    [got] = pb.work.claim(scope, queue, 5)
    assert got["id"] == sent["id"] and got["claim_token"]
    assert pb.work.extend(scope, got, 60)["state"] == "claimed"
    assert pb.work.complete(scope, got, {"sent": True})["state"] == "completed"
    with pytest.raises(Conflict) as refused:
        pb.work.complete(scope, got)
    assert refused.value.code == "SCAIQUEUE_NOT_CLAIMED"
    chain = pb.work.chain(scope, "c1")  # the message, then its completed event in `_events`
    assert [m["id"] for m in chain][0] == sent["id"]
    assert chain[1]["type"] == "scaiqueue.message.completed"
    assert pb.work.message(scope, queue, sent)["response"] == {"sent": True}
    assert pb.work.stats(scope, queue)["depth_current"] == 0
    with pytest.raises(NotFound) as missing:
        pb.work.queue(scope, "00000000-0000-0000-0000-000000000000")
    assert missing.value.code == "SCAIQUEUE_QUEUE_NOT_FOUND"


def test_publish_batch_answers_each_message_in_place(pb, monkeypatch):
    scope, queue = _setup(pb)
    answers = pb.work.publish_batch(scope, queue, [{"body": {"n": 1}, "idempotency_key": "one"},
                                                   {"body": "two", "colour": "red"},
                                                   {"body": {"n": 1}, "idempotency_key": "one"}])
    assert [(a["ok"], a["status"]) for a in answers] == [(True, 201), (False, 422), (True, 200)]
    assert answers[2]["id"] == answers[0]["id"] and answers[0]["queue_id"] == queue["id"]
    assert answers[1]["error"]["code"] == "VALIDATION_ERROR"
    with pytest.raises(Conflict) as refused:  # atomic: all or nothing, the refused entry named
        pb.work.publish_batch(scope, queue, [{"body": "new"}, {"body": {"n": 2}, "idempotency_key": "one"}],
                              atomic=True)
    assert refused.value.code == "SCAIQUEUE_IDEMPOTENCY_CONFLICT"
    assert pb.work.stats(scope, queue)["depth_current"] == 1
    with pytest.raises(ValidationFailed):
        pb.work.publish_batch(scope, queue, [])
    # Retried like a read only when every message carries an idempotency key.
    calls = []
    real = pb.work._t.run
    monkeypatch.setattr(pb.work._t, "run", lambda call: calls.append(call.idempotent) or real(call))
    pb.work.publish_batch(scope, queue, [{"body": "x", "idempotency_key": "x"}])
    pb.work.publish_batch(scope, queue, [{"body": "y", "idempotency_key": "y"}, {"body": "z"}])
    assert calls == [True, False]


def test_consume_completes_with_the_answer_and_fails_with_the_exception(pb):
    scope, queue = _setup(pb)
    for i in range(7):
        pb.work.publish(scope, queue, {"n": i})

    def handler(message):
        if message["body"]["n"] == 3:
            raise ValueError("three is bad")
        return {"double": message["body"]["n"] * 2}

    assert pb.work.consume(scope, queue, handler, batch_size=3, until_empty=True) == 6
    done = list(pb.work.iter_messages(scope, queue, "completed", page=2))
    assert sorted(m["response"]["double"] for m in done) == [0, 2, 4, 8, 10, 12]
    [dead] = pb.work.messages(scope, scope["system_queues"]["_dead_letter"], "pending")[0]
    assert dead["failure_reason"] == "ValueError: three is bad"


def test_batch_finish_and_scope_transitions(pb):
    scope, queue = _setup(pb)
    for i in range(4):
        pb.work.publish(scope, queue, str(i))
    claimed = pb.work.claim(scope, queue, 4)
    answers = pb.work.finish_batch(scope, "complete", claimed[:3] + [{"id": claimed[3]["id"], "claim_token": "x"}])
    assert [a["ok"] for a in answers] == [True, True, True, False]
    assert pb.work.scope_transition(scope, "pause")["state"] == "paused"
    with pytest.raises(Conflict) as paused:
        pb.work.publish(scope, queue, "late")
    assert paused.value.code == "SCAIQUEUE_SCOPE_PAUSED"
    assert [s["slug"] for s in pb.work.scopes()[0]] == ["jobs"]
    assert {a["name"] for a in pb.work.system_agents()} >= {"work-visibility-timeout", "work-auto-claim"}
    assert RateLimited  # the class a 429 (SCAIQUEUE_RATE_LIMITED, QUEUE_FULL) raises


def test_subscription_inbox(pb):
    scope = pb.work.create_scope("news")
    feed = pb.work.create_queue(scope, "feed", consumer_mode="broadcast")
    sub = pb.work.subscribe(scope, feed, "reviewer", subscriber_type="user", auto_claim=True)
    sent = pb.work.publish(scope, feed, "read me")
    [mine], cursor = pb.work.deliveries(scope, sub)
    assert mine["id"] == sent["id"] and mine["claim_token"] and cursor is None


def test_subscribers_claim_and_finish_through_the_queue(pb):
    scope = pb.work.create_scope("atelier")
    jobs = pb.work.create_queue(scope, "jobs")
    feed = pb.work.create_queue(scope, "alerts", consumer_mode="broadcast")
    painter = pb.work.subscribe(scope, jobs, "painter", filter={"field": "type", "op": "eq", "value": "paint"})
    pager = pb.work.subscribe(scope, feed, "pager")
    pb.work.publish(scope, jobs, "sweep", type="sweep")
    paint = pb.work.publish(scope, jobs, "red", type="paint")
    alert = pb.work.publish(scope, feed, "disk full")
    [got] = pb.work.claim(scope, jobs, 10, subscription=painter)
    assert got["id"] == paint["id"] and got["subscription_id"] == painter["id"]
    assert pb.work.complete(scope, got, {"ok": True})["state"] == "completed"
    [delivered] = pb.work.claim(scope, feed, subscription=pager)
    assert delivered["id"] == alert["id"]
    done = pb.work.complete(scope, delivered)  # the subscription's own delivery: the message it carries says so
    assert done["subscription_id"] == pager["id"] and done["message_state"] == "completed"
    everything, _ = pb.work.messages(scope, jobs, None)
    assert [m["state"] for m in everything] == ["pending", "completed"]


def test_async_consume(gateway, tenant):
    async def main():
        async with AsyncClient(gateway.url, tenant.key) as pb:
            scope = await pb.work.create_scope("async-jobs")
            queue = await pb.work.create_queue(scope, "q")
            for i in range(3):
                await pb.work.publish(scope, queue, {"n": i})

            async def handler(message):
                return message["body"]["n"] + 1

            assert await pb.work.consume(scope, queue, handler, until_empty=True) == 3
            done, _ = await pb.work.messages(scope, queue, "completed")
            return sorted(m["response"]["result"] for m in done)

    assert asyncio.run(main()) == [1, 2, 3]


def test_the_heartbeat_extends_until_the_block_ends():
    beats = []
    enough = threading.Event()

    def extend():
        beats.append(1)
        if len(beats) >= 3:
            enough.set()

    with beating(extend, 0.01, "test"):
        assert enough.wait(10)
    count = len(beats)
    threading.Event().wait(0.05)
    assert len(beats) == count  # stopped with the block
