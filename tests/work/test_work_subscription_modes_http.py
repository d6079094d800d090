"""Subscriptions of either consumer mode over HTTP, as their users write them: a filtered
subscription on a competing queue claiming only its messages beside plain claimers (every message
accounted for once, under threads), max_in_flight, auto_claim, pause, resume and delete in both
modes; broadcast subscribers ending their own deliveries through the queue's routes (naming their
subscription, or with a work key whose subject subscribes); listing a queue in every state."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter

import pytest

from postbox.work import assign
from support.http import client
from support.work_api import W, fresh_key_cache
from support.work_api import error as _error
from support.work_api import ok as _ok

_fresh_cache = pytest.fixture(autouse=True)(fresh_key_cache)
CONSUMER = ["scaiqueue:view", "scaiqueue:consume"]


def _setup(api, mode="competing", slug="jobs"):
    scope = _ok(api.post(f"{W}/scopes", json={"slug": f"s-{uuid.uuid4().hex[:8]}"}), 201)
    queue = _ok(api.post(f"{W}/scopes/{scope['id']}/queues", json={"slug": slug, "consumer_mode": mode}), 201)
    return scope, queue, f"{W}/scopes/{scope['id']}"


def _subscribe(api, base, queue, who, **fields):
    return _ok(api.post(f"{base}/subscriptions", json={"subscriber_type": "agent", "subscriber_id": who,
                                                       "queue_id": queue["id"], **fields}), 201)


def _work_key(api, who, subject_type="agent"):
    return _ok(api.post(f"{W}/tenants/{api.tenant.tenant_id}/api-keys",
                        json={"subject_type": subject_type, "subject_id": who, "allowed_operations": CONSUMER}),
               201)["key"]


def _publish(api, base, queue, n, **fields):
    return [_ok(api.post(f"{base}/queues/{queue['id']}/messages", json={"body": {"n": i}, **fields}), 201)
            for i in range(n)]


RED = {"field": "labels.colour", "op": "eq", "value": "red"}


def test_a_filtered_competing_subscription_and_plain_claimers_take_every_message_once(gateway, api):
    scope, queue, base = _setup(api)
    sub = _subscribe(api, base, queue, "painter", filter=RED, max_in_flight=4)
    assert sub["consumer_mode"] == "competing" and sub["deliveries"] == {"in_flight": 0}
    published = {}
    for i in range(160):
        colour = "red" if i % 2 else "blue"
        m = _ok(api.post(f"{base}/queues/{queue['id']}/messages",
                         json={"body": {"n": i}, "labels": {"colour": colour}}), 201)
        published[m["id"]] = colour
    done: Counter = Counter()
    taken_by: dict[str, list[str]] = {"sub": [], "plain": []}
    lock, errors = threading.Lock(), []
    held_most = [0]

    def work(kind: str, route: str) -> None:
        try:
            with client(gateway.url, api.tenant.key_for("write")) as c:
                idle = 0
                while idle < 3:
                    if route == "subscription":
                        got = _ok(c.post(f"{base}/subscriptions/{sub['id']}/claim", json={"batch_size": 10}))
                    elif route == "queue-named":
                        got = _ok(c.post(f"{base}/queues/{queue['id']}/messages/claim",
                                         json={"batch_size": 10, "subscription_id": sub["id"]}))
                    else:
                        got = _ok(c.post(f"{base}/queues/{queue['id']}/messages/claim", json={"batch_size": 3}))
                    idle = 0 if got else idle + 1
                    with lock:
                        taken_by[kind] += [m["id"] for m in got]
                        if kind == "sub":
                            held_most[0] = max(held_most[0], len(got))
                    for m in got:
                        if kind == "sub":
                            assert m["subscription_id"] == sub["id"]
                            url = f"{base}/subscriptions/{sub['id']}/messages/{m['id']}/complete"
                        else:
                            url = f"{base}/messages/{m['id']}/complete"
                        _ok(c.post(url, json={"claim_token": m["claim_token"]}))
                        with lock:
                            done[m["id"]] += 1
        except Exception as e:  # noqa: BLE001 (reported below, with the thread's kind)
            errors.append(f"{kind}/{route}: {e!r}")

    threads = [threading.Thread(target=work, args=("sub", "subscription")),
               threading.Thread(target=work, args=("sub", "queue-named")),
               threading.Thread(target=work, args=("plain", "plain")),
               threading.Thread(target=work, args=("plain", "plain"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert set(done) == set(published) and set(done.values()) == {1}  # every message, exactly once
    assert len(taken_by["sub"]) + len(taken_by["plain"]) == len(published)
    assert taken_by["sub"] and all(published[i] == "red" for i in taken_by["sub"])  # only what its filter lets by
    assert held_most[0] <= 4  # never more than max_in_flight in one claim
    everything = _ok(api.get(f"{base}/queues/{queue['id']}/messages", params={"limit": 200}))
    assert len(everything) == len(published) and {m["state"] for m in everything} == {"completed"}
    check = _ok(api.post(f"{W}/subscriptions/{sub['id']}/check-processed", json={"message_ids": list(published)}))
    assert {i for i, v in check.items() if v} == set(taken_by["sub"])


def test_max_in_flight_pause_resume_and_delete_on_a_competing_queue(gateway, api):
    scope, queue, base = _setup(api)
    sub = _subscribe(api, base, queue, "cook", max_in_flight=3)
    _publish(api, base, queue, 6)
    claim = f"{base}/subscriptions/{sub['id']}/claim"
    held = _ok(api.post(claim, json={"batch_size": 10}))
    assert len(held) == 3 and all(m["state"] == "claimed" and m["subscription_id"] == sub["id"] for m in held)
    assert _ok(api.post(claim, json={"batch_size": 10})) == []  # max_in_flight reached
    assert _ok(api.get(f"{base}/subscriptions/{sub['id']}"))["deliveries"] == {"in_flight": 3}
    inbox = _ok(api.get(f"{base}/subscriptions/{sub['id']}/deliveries"))
    assert [m["id"] for m in inbox] == [m["id"] for m in held]
    assert _ok(api.get(f"{base}/subscriptions/{sub['id']}/deliveries", params={"state": "pending"})) == []
    first = f"{base}/subscriptions/{sub['id']}/messages/{held[0]['id']}"
    assert _ok(api.post(f"{first}/complete", json={"response": {"ok": True}}))["state"] == "completed"
    _error(api.post(f"{first}/complete"), 409, "SCAIQUEUE_NOT_CLAIMED")
    assert len(_ok(api.post(claim, json={"batch_size": 10}))) == 1  # room for one again

    assert _ok(api.post(f"{base}/subscriptions/{sub['id']}/pause"))["state"] == "paused"
    _ok(api.post(f"{base}/subscriptions/{sub['id']}/messages/{held[1]['id']}/release"))
    assert _ok(api.post(claim, json={"batch_size": 10})) == []  # paused: claims nothing
    assert _ok(api.post(f"{base}/subscriptions/{sub['id']}/resume"))["state"] == "active"
    again = _ok(api.post(claim, json={"batch_size": 10}))
    assert held[1]["id"] in [m["id"] for m in again] and len(again) == 1  # 3 held: two before, this one

    # A plain claimer cannot finish through the subscription what the subscription does not hold.
    [plain] = _ok(api.post(f"{base}/queues/{queue['id']}/messages/claim"))
    _error(api.post(f"{base}/subscriptions/{sub['id']}/messages/{plain['id']}/complete"), 404,
           "SCAIQUEUE_MESSAGE_NOT_FOUND")
    # Deleting the subscription gives back at once what it holds.
    assert _ok(api.delete(f"{base}/subscriptions/{sub['id']}"))["deleted"] is True
    pending = _ok(api.get(f"{base}/queues/{queue['id']}/messages", params={"state": "pending"}))
    assert len(pending) == 4 and all(m["attempts"] == 0 for m in pending)  # the three it held, and the last
    assert len(_ok(api.post(f"{base}/queues/{queue['id']}/messages/claim", json={"batch_size": 10}))) == 4
    _error(api.post(claim), 404, "SCAIQUEUE_SUBSCRIPTION_NOT_FOUND")


def test_a_work_key_whose_subject_subscribes_claims_as_its_subscription(gateway, api):
    scope, queue, base = _setup(api)
    sub = _subscribe(api, base, queue, "painter", filter=RED, max_in_flight=2)
    msgs = [_ok(api.post(f"{base}/queues/{queue['id']}/messages",
                         json={"body": str(i), "labels": {"colour": c}}), 201)
            for i, c in enumerate(["blue", "blue", "red", "red", "red"])]
    with client(gateway.url, _work_key(api, "painter")) as painter, \
            client(gateway.url, _work_key(api, "other")) as other:
        got = _ok(painter.post(f"{base}/queues/{queue['id']}/messages/claim", json={"batch_size": 10}))
        assert [m["id"] for m in got] == [msgs[2]["id"], msgs[3]["id"]]  # red only, two at most
        assert all(m["subscription_id"] == sub["id"] for m in got)
        _ok(painter.post(f"{base}/messages/{got[0]['id']}/complete", json={"claim_token": got[0]["claim_token"]}))
        # another key's subject subscribes to nothing: its claim is a plain one, first come first served
        plain = _ok(other.post(f"{base}/queues/{queue['id']}/messages/claim", json={"batch_size": 10}))
        assert [m["id"] for m in plain] == [msgs[0]["id"], msgs[1]["id"], msgs[4]["id"]]
        assert "subscription_id" not in plain[0]


def test_auto_claim_on_a_competing_queue_assigns_what_the_filter_lets_through(gateway, api):
    scope, queue, base = _setup(api)
    sub = _subscribe(api, base, queue, "reviewer", filter=RED, auto_claim=True, max_in_flight=2)
    answers = [_ok(api.post(f"{base}/queues/{queue['id']}/messages",
                            json={"body": colour, "labels": {"colour": colour}}), 201)
               for colour in ("red", "blue", "red", "red")]
    assert [a["state"] for a in answers] == ["claimed", "pending", "claimed", "pending"]  # then max_in_flight
    assert "claim_token" not in answers[0]  # the subscriber's claim is not the publisher's to finish
    # the publish claims for it (while it holds fewer than max_in_flight): no agent needed
    inbox = _ok(api.get(f"{base}/subscriptions/{sub['id']}/deliveries"))
    assert len(inbox) == 2 and {m["labels"]["colour"] for m in inbox} == {"red"}
    assert all(m["claim_token"] and m["subscription_id"] == sub["id"] for m in inbox)
    for m in inbox:
        _ok(api.post(f"{base}/subscriptions/{sub['id']}/messages/{m['id']}/complete",
                     json={"claim_token": m["claim_token"]}))
    assert assign.assign_due() >= 1  # the work-auto-claim agent's sweep assigns what waited
    [last] = _ok(api.get(f"{base}/subscriptions/{sub['id']}/deliveries"))
    assert last["labels"]["colour"] == "red"
    [blue] = _ok(api.post(f"{base}/queues/{queue['id']}/messages/claim", json={"batch_size": 10}))
    assert blue["labels"]["colour"] == "blue"


def test_two_broadcast_subscribers_end_their_own_deliveries_through_the_queue_routes(gateway, api):
    scope, feed, base = _setup(api, "broadcast", "feed")
    ann = _subscribe(api, base, feed, "ann")
    bob = _subscribe(api, base, feed, "bob")
    [m] = _publish(api, base, feed, 1)
    claim = f"{base}/queues/{feed['id']}/messages/claim"
    # A claim naming no subscription, by a tenant key: as before, a message being delivered is not handed out.
    assert _ok(api.post(claim)) == []
    # Ann names her subscription; Bob's work key's subject is his subscription's subscriber.
    [a] = _ok(api.post(claim, json={"subscription_id": ann["id"]}))
    assert a["id"] == m["id"] and a["subscription_id"] == ann["id"] and a["state"] == "claimed"
    with client(gateway.url, _work_key(api, "bob")) as bob_key:
        [b] = _ok(bob_key.post(claim, json={"batch_size": 5}))
        assert b["id"] == m["id"] and b["subscription_id"] == bob["id"] and b["claim_token"] != a["claim_token"]
        assert _ok(bob_key.post(claim)) == []  # his one delivery is claimed already
        _error(bob_key.post(f"{base}/messages/{m['id']}/complete", json={"claim_token": a["claim_token"]}), 409,
               "SCAIQUEUE_NOT_CLAIMED")  # Ann's token is not his claim's
        failed = _ok(bob_key.post(f"{base}/messages/{m['id']}/fail", json={"reason": "later"}))
        assert failed["state"] == "pending" and failed["subscription_id"] == bob["id"]
    done = _ok(api.post(f"{base}/messages/{m['id']}/complete",
                        json={"subscription_id": ann["id"], "claim_token": a["claim_token"], "response": {"ok": 1}}))
    assert done["state"] == "completed" and done["message_state"] == "delivering"  # Bob's delivery is still open
    _ok(api.post(f"{base}/subscriptions/{bob['id']}/pause"))
    assert _ok(api.post(claim, json={"subscription_id": bob["id"]})) == []  # paused: nothing
    _ok(api.post(f"{base}/subscriptions/{bob['id']}/resume"))
    with client(gateway.url, _work_key(api, "bob")) as bob_key:
        b = []
        for _ in range(40):  # his failed delivery comes back after its backoff (1 s)
            b = _ok(bob_key.post(claim))
            if b:
                break
            threading.Event().wait(0.1)
        [b] = b
        _ok(bob_key.post(f"{base}/messages/{m['id']}/release", json={"claim_token": b["claim_token"]}))
        [b] = _ok(bob_key.post(claim))
        last = _ok(bob_key.post(f"{base}/messages/{m['id']}/complete", json={"claim_token": b["claim_token"]}))
    assert last["state"] == "completed" and last["message_state"] == "completed"
    assert _ok(api.get(f"{base}/queues/{feed['id']}/messages/{m['id']}"))["state"] == "completed"
    # Deleting a broadcast subscription works as before: its deliveries go with it.
    assert _ok(api.delete(f"{base}/subscriptions/{ann['id']}"))["deleted"] is True


def test_a_queue_listed_without_a_state_shows_every_state_in_publish_order(gateway, api):
    scope, queue, base = _setup(api)
    ms = _publish(api, base, queue, 5)
    q = f"{base}/queues/{queue['id']}"
    [c1, c2] = _ok(api.post(f"{q}/messages/claim", json={"batch_size": 2}))
    _ok(api.post(f"{base}/messages/{c1['id']}/complete"))
    _ok(api.post(f"{base}/messages/{ms[4]['id']}/cancel"))
    page = api.get(f"{q}/messages", params={"limit": 2})
    assert page.status_code == 200
    seen = page.json()["data"]
    cursor = page.json()["meta"]["next_cursor"]
    while cursor:
        more = api.get(f"{q}/messages", params={"limit": 2, "cursor": cursor})
        seen += more.json()["data"]
        cursor = more.json()["meta"]["next_cursor"]
    assert [m["id"] for m in seen] == [m["id"] for m in ms]  # every one, oldest first
    assert [m["state"] for m in seen] == ["completed", "claimed", "pending", "pending", "cancelled"]
    assert [m["id"] for m in _ok(api.get(f"{q}/messages", params={"state": "pending"}))] == [ms[2]["id"], ms[3]["id"]]
    assert [m["id"] for m in _ok(api.get(f"{q}/messages", params={"state": "claimed"}))] == [c2["id"]]
    _error(api.get(f"{q}/messages", params={"state": "lost"}), 422, "VALIDATION_ERROR")
    _error(api.get(f"{q}/messages", params={"cursor": "nope"}), 422, "VALIDATION_ERROR")


def test_a_broadcast_queue_listed_without_a_state_shows_what_is_being_delivered(gateway, api):
    scope, feed, base = _setup(api, "broadcast", "feed")
    early = _publish(api, base, feed, 1)[0]  # no subscription yet: it stays pending
    _subscribe(api, base, feed, "ann")
    late = _publish(api, base, feed, 1)[0]
    listed = _ok(api.get(f"{base}/queues/{feed['id']}/messages"))
    assert [(m["id"], m["state"]) for m in listed] == [(early["id"], "pending"), (late["id"], "delivering")]
    assert [m["id"] for m in _ok(api.get(f"{base}/queues/{feed['id']}/messages",
                                         params={"state": "delivering"}))] == [late["id"]]


def test_what_a_subscriber_cannot_mean_is_refused_by_name(gateway, api):
    scope, queue, base = _setup(api)
    _, other_queue, _ = _setup(api)
    sub = _subscribe(api, base, queue, "x")
    claim = f"{base}/queues/{queue['id']}/messages/claim"
    err = _error(api.post(claim, json={"subscription_id": "nope"}), 422, "VALIDATION_ERROR")
    assert err["details"][0]["field"] == "subscription_id"
    err = _error(api.post(claim, json={"subscription_id": 7}), 422, "VALIDATION_ERROR")
    assert err["details"][0]["field"] == "subscription_id"
    _error(api.post(claim, json={"subscription_id": str(uuid.uuid4())}), 404, "SCAIQUEUE_SUBSCRIPTION_NOT_FOUND")
    second = _subscribe(api, base, _ok(api.post(f"{base}/queues", json={"slug": "other"}), 201), "x")
    err = _error(api.post(claim, json={"subscription_id": second["id"]}), 422, "VALIDATION_ERROR")
    assert err["details"][0]["field"] == "subscription_id"  # a subscription of another queue
    [m] = _publish(api, base, queue, 1)
    for action in ("complete", "fail", "release"):
        err = _error(api.post(f"{base}/messages/{m['id']}/{action}", json={"subscription_id": "x"}), 422,
                     "VALIDATION_ERROR")
        assert err["details"][0]["field"] == "subscription_id"
        _error(api.post(f"{base}/messages/{m['id']}/{action}", json={"subscription_id": sub["id"]}), 404,
               "SCAIQUEUE_MESSAGE_NOT_FOUND")  # the subscription does not hold it
    err = _error(api.post(f"{base}/messages/{m['id']}/extend", json={"seconds": 5, "subscription_id": sub["id"]}),
                 422, "VALIDATION_ERROR")
    assert err["details"][0]["field"] == "subscription_id"  # extend takes no subscription
    for bad in ({"field": "colour", "op": "eq", "value": "red"}, {"field": "labels", "op": "eq", "value": "x"},
                {"field": "priority.colour", "op": "exists"}):
        err = _error(api.post(f"{base}/subscriptions", json={"subscriber_type": "agent", "subscriber_id": "y",
                                                             "queue_id": queue["id"], "filter": bad}),
                     422, "VALIDATION_ERROR")
        assert err["details"][0]["field"].startswith("filter"), err
        assert bad["field"] in str(err), err
    # a work key whose subject has two subscriptions on the queue must name one
    _subscribe(api, base, queue, "twice")
    _subscribe(api, base, queue, "twice")
    with client(gateway.url, _work_key(api, "twice")) as twice:
        err = _error(twice.post(claim), 422, "VALIDATION_ERROR")
        assert err["details"][0]["field"] == "subscription_id"
    del other_queue


def test_concurrent_publishes_never_assign_more_than_max_in_flight(gateway, api):
    scope, queue, base = _setup(api)
    sub = _subscribe(api, base, queue, "inbox", auto_claim=True, max_in_flight=5)
    states: Counter = Counter()
    lock = threading.Lock()

    def publish() -> None:
        with client(gateway.url, api.tenant.key) as c:
            for i in range(10):
                state = _ok(c.post(f"{base}/queues/{queue['id']}/messages", json={"body": str(i)}), 201)["state"]
                with lock:
                    states[state] += 1

    threads = [threading.Thread(target=publish) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    # a publish never waits for a subscription another publish holds: it may leave the message to the agent
    assert 1 <= states["claimed"] <= 5 and states["claimed"] + states["pending"] == 60
    assign.assign_due()
    assert _ok(api.get(f"{base}/subscriptions/{sub['id']}"))["deliveries"] == {"in_flight": 5}
    stats = _ok(api.get(f"{base}/queues/{queue['id']}/stats"))
    assert stats["depth_claimed"] == 5 and stats["depth_pending"] == 55


def test_publishes_and_an_auto_claimed_subscriber_at_once_lose_nothing(gateway, api):
    """Publishers assigning to the subscription while its subscriber claims and completes (events of
    both kinds emitted, so both sides take the scope's journal lock): no error, each message done once."""
    scope = _ok(api.post(f"{W}/scopes", json={"slug": f"s-{uuid.uuid4().hex[:8]}",
                                              "emit_events": ["published", "claimed"]}), 201)
    base = f"{W}/scopes/{scope['id']}"
    queue = _ok(api.post(f"{base}/queues", json={"slug": "jobs"}), 201)
    sub = _subscribe(api, base, queue, "busy", auto_claim=True, max_in_flight=3)
    published, done, errors = set(), Counter(), []
    lock, stop = threading.Lock(), threading.Event()

    def publish() -> None:
        try:
            with client(gateway.url, api.tenant.key) as c:
                for i in range(20):
                    m = _ok(c.post(f"{base}/queues/{queue['id']}/messages", json={"body": str(i)}), 201)
                    with lock:
                        published.add(m["id"])
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(f"publish: {e!r}")

    def consume() -> None:
        try:
            with client(gateway.url, api.tenant.key) as c:
                deadline = time.monotonic() + 90
                while (not stop.is_set() or len(done) < len(published)) and time.monotonic() < deadline:
                    held = _ok(c.get(f"{base}/subscriptions/{sub['id']}/deliveries"))
                    held += _ok(c.post(f"{base}/subscriptions/{sub['id']}/claim", json={"batch_size": 3}))
                    for m in held:
                        r = c.post(f"{base}/messages/{m['id']}/complete", json={"claim_token": m["claim_token"]})
                        if r.status_code == 200:
                            with lock:
                                done[m["id"]] += 1
                        else:  # the other consumer finished it first
                            assert r.json()["error"]["code"] == "SCAIQUEUE_NOT_CLAIMED", r.text
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(f"consume: {e!r}")

    publishers = [threading.Thread(target=publish) for _ in range(3)]
    consumers = [threading.Thread(target=consume) for _ in range(2)]
    for t in publishers + consumers:
        t.start()
    for t in publishers:
        t.join(120)
    stop.set()
    for t in consumers:
        t.join(120)
    assert not errors, errors
    assert len(published) == 60 and set(done) == published and set(done.values()) == {1}
