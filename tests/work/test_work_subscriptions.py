"""Subscriptions on real PostgreSQL: broadcast fan-out, filters, max_in_flight, independent
completion, and three subscriptions under threads each processing every message once."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from datetime import datetime

import pytest

from postbox.errors import Conflict, NotFound, Unprocessable
from postbox.work import browse, messages, queues, subscriptions, sweeps
from support.clock import wait_for_db_clock


@pytest.fixture
def feed(tenant, scope):
    return queues.create_queue(tenant.principal, scope["id"], {"slug": "feed", "consumer_mode": "broadcast"})


def _sub(tenant, scope, queue, who="a", **fields):
    return subscriptions.create(tenant.principal, scope["id"], {"subscriber_type": "agent", "subscriber_id": who,
                                                               "queue_id": queue["id"], **fields})


def _publish(tenant, scope, queue, body="x", **fields):
    return messages.publish(tenant.principal, scope["id"], queue["id"], {"body": body, **fields})[0]


def _pull(tenant, scope, sub, n=10, vt=None):
    return subscriptions.claim(tenant.principal, scope["id"], sub["id"], n, vt)


def _done(tenant, scope, sub, m, action="complete", **item):
    return subscriptions.finish(tenant.principal, scope["id"], sub["id"], m["id"], action,
                                {"claim_token": m["claim_token"], **item})


def test_every_active_matching_subscription_gets_its_own_delivery(tenant, scope, feed):
    a, b = _sub(tenant, scope, feed, "a"), _sub(tenant, scope, feed, "b")
    eu = _sub(tenant, scope, feed, "eu", filter={"field": "labels.region", "op": "eq", "value": "eu"})
    m = _publish(tenant, scope, feed, "one", labels={"region": "us"})
    assert m["state"] == "delivering"
    assert messages.claim(tenant.principal, scope["id"], feed["id"], 10, None) == []  # not for plain claims
    [ga], [gb] = _pull(tenant, scope, a), _pull(tenant, scope, b)
    assert ga["id"] == gb["id"] == m["id"] and ga["claim_token"] != gb["claim_token"]
    assert ga["state"] == "claimed" and ga["subscription_id"] == a["id"] and ga["message_state"] == "delivering"
    assert _pull(tenant, scope, eu) == []
    assert _done(tenant, scope, a, ga, response={"ok": 1})["state"] == "completed"
    whole = browse.get_message(tenant.principal, scope["id"], feed["id"], m["id"])
    assert whole["state"] == "delivering"  # b has not finished
    assert _done(tenant, scope, b, gb)["message_state"] == "completed"
    assert browse.get_message(tenant.principal, scope["id"], feed["id"], m["id"])["state"] == "completed"
    assert queues.stats(tenant.principal, scope["id"], feed["id"])["completed_total"] == 1
    assert subscriptions.processed(tenant.principal, a["id"], [m["id"], "nope"]) == {m["id"]: True, "nope": False}
    assert subscriptions.get(tenant.principal, scope["id"], a["id"])["deliveries"] == \
        {"pending": 0, "in_flight": 0, "completed": 1, "dead_lettered": 0}
    events = browse.list_messages(tenant.principal, scope["id"], scope["system_queues"]["_events"], "pending")[0]
    assert sorted(e["body"]["payload"]["subscription_id"] for e in events) == sorted([a["id"], b["id"]])


def test_no_subscription_means_a_plain_pending_message(tenant, scope, feed):
    m = _publish(tenant, scope, feed)
    assert m["state"] == "pending"
    paused = _sub(tenant, scope, feed)
    subscriptions.update(tenant.principal, scope["id"], paused["id"], {"state": "paused"})
    assert _publish(tenant, scope, feed)["state"] == "pending"  # a paused subscription receives nothing
    assert _pull(tenant, scope, paused) == []


def test_max_in_flight_fail_retry_and_release(tenant, scope, feed):
    s = _sub(tenant, scope, feed, max_in_flight=2)
    for i in range(3):
        _publish(tenant, scope, feed, str(i), max_retries=2)
    first = _pull(tenant, scope, s, 10)
    assert [m["body"] for m in first] == ["0", "1"]
    assert _pull(tenant, scope, s) == []  # two in flight
    back = _done(tenant, scope, s, first[1], "release")
    assert back["state"] == "pending" and back["attempts"] == 0
    [again] = _pull(tenant, scope, s, 10)
    assert again["body"] == "1"
    retried = _done(tenant, scope, s, first[0], "fail", reason="boom")
    assert retried["state"] == "pending" and retried["failure_reason"] == "boom"
    with pytest.raises(Conflict) as e:
        _done(tenant, scope, s, first[0])
    assert e.value.code == "SCAIQUEUE_NOT_CLAIMED"
    with pytest.raises(Conflict):
        subscriptions.finish(tenant.principal, scope["id"], s["id"], again["id"], "complete",
                             {"claim_token": "00000000-0000-0000-0000-000000000000"})
    with pytest.raises(NotFound) as e:
        subscriptions.finish(tenant.principal, scope["id"], s["id"], "5b1f9e6e-0000-4000-8000-000000000000",
                             "complete", {})
    assert e.value.code == "SCAIQUEUE_MESSAGE_NOT_FOUND"


def test_last_failure_dead_letters_the_delivery_only(tenant, scope, feed):
    a, b = _sub(tenant, scope, feed, "a"), _sub(tenant, scope, feed, "b")
    m = _publish(tenant, scope, feed, max_retries=1)
    [ga] = _pull(tenant, scope, a)
    assert _done(tenant, scope, a, ga, "fail", reason="no")["state"] == "dead_lettered"
    [gb] = _pull(tenant, scope, b)
    assert _done(tenant, scope, b, gb)["message_state"] == "completed"
    assert subscriptions.processed(tenant.principal, a["id"], [m["id"]]) == {m["id"]: False}
    assert subscriptions.processed(tenant.principal, b["id"], [m["id"]]) == {m["id"]: True}


def test_subscriptions_need_a_queue_of_the_scope_and_a_push_url_for_push(tenant, scope, feed):
    plain = queues.create_queue(tenant.principal, scope["id"], {"slug": "plain"})
    assert _sub(tenant, scope, plain)["consumer_mode"] == "competing"  # either consumer mode
    with pytest.raises(Unprocessable) as e:
        _sub(tenant, scope, {**plain, "id": str(uuid.uuid4())})
    assert e.value.details["fields"][0]["field"] == "queue_id"
    with pytest.raises(Unprocessable) as e:
        _sub(tenant, scope, feed, delivery_mode="push")
    assert e.value.details["fields"][0]["field"] == "push_url"


def test_deleting_a_subscription_settles_messages_waiting_for_it(tenant, scope, feed):
    a, b = _sub(tenant, scope, feed, "a"), _sub(tenant, scope, feed, "b")
    m = _publish(tenant, scope, feed)
    [ga] = _pull(tenant, scope, a)
    _done(tenant, scope, a, ga)
    subscriptions.delete(tenant.principal, scope["id"], b["id"])
    assert browse.get_message(tenant.principal, scope["id"], feed["id"], m["id"])["state"] == "completed"
    with pytest.raises(NotFound):
        subscriptions.get(tenant.principal, scope["id"], b["id"])


def test_three_subscriptions_under_threads_each_process_every_message_once(tenant, scope, feed):
    subs = [_sub(tenant, scope, feed, who, max_in_flight=20) for who in ("a", "b", "c")]
    total = 300
    got = {s["id"]: Counter() for s in subs}
    lock = threading.Lock()
    errors: list[BaseException] = []
    published = threading.Event()

    def producer(k: int) -> None:
        try:
            for i in range(total // 3):
                _publish(tenant, scope, feed, str(k * 1000 + i))
        except BaseException as e:
            errors.append(e)

    def consumer(sub) -> None:
        try:
            while True:
                done_publishing = published.is_set()  # read before the pull: an empty pull after it is the end
                batch = _pull(tenant, scope, sub, 7, 60)
                if not batch:
                    if done_publishing:
                        return
                    continue
                for m in batch:
                    _done(tenant, scope, sub, m)
                with lock:
                    got[sub["id"]].update(m["body"] for m in batch)
        except BaseException as e:
            errors.append(e)

    producers = [threading.Thread(target=producer, args=(k,)) for k in range(3)]
    consumers = [threading.Thread(target=consumer, args=(s,)) for s in subs for _ in range(2)]
    for t in producers + consumers:
        t.start()
    for t in producers:
        t.join()
    published.set()
    for t in consumers:
        t.join()
    assert not errors
    expected = {str(k * 1000 + i) for k in range(3) for i in range(total // 3)}
    for s in subs:
        assert set(got[s["id"]]) == expected and max(got[s["id"]].values()) == 1, s["subscriber_id"]
    st = queues.stats(tenant.principal, scope["id"], feed["id"])
    assert st["completed_total"] == total and st["depth_current"] == 0
    assert browse.list_messages(tenant.principal, scope["id"], feed["id"], "delivering")[0] == []


def test_expired_broadcast_messages_end_with_their_open_deliveries(tenant, scope, feed):
    a, b = _sub(tenant, scope, feed, "a"), _sub(tenant, scope, feed, "b")
    m = _publish(tenant, scope, feed, ttl_seconds=1)
    [ga] = _pull(tenant, scope, a)
    _done(tenant, scope, a, ga)
    wait_for_db_clock(datetime.fromisoformat(m["expires_at"]))
    assert _pull(tenant, scope, b) == []  # past its time: never handed out
    assert sweeps.expire() >= 1
    assert browse.get_message(tenant.principal, scope["id"], feed["id"], m["id"])["state"] == "expired"
    assert subscriptions.get(tenant.principal, scope["id"], b["id"])["deliveries"]["pending"] == 0
    assert subscriptions.processed(tenant.principal, a["id"], [m["id"]]) == {m["id"]: True}


def test_a_queue_whose_messages_are_being_delivered_cannot_be_deleted(tenant, scope, feed):
    s = _sub(tenant, scope, feed)
    _publish(tenant, scope, feed)
    with pytest.raises(Conflict) as e:
        queues.delete_queue(tenant.principal, scope["id"], feed["id"])
    assert e.value.code == "SCAIQUEUE_INVALID_TRANSITION"
    [m] = _pull(tenant, scope, s)
    _done(tenant, scope, s, m)
    queues.delete_queue(tenant.principal, scope["id"], feed["id"])
