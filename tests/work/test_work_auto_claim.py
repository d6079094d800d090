"""Auto-claimed subscriptions on real PostgreSQL: deliveries assigned as they are published, never
more than max_in_flight (under concurrent publishes too), the rest assigned by the agent as claims
end or run out, and the subscriber's inbox."""

from __future__ import annotations

import threading

import pytest

from postbox import db
from postbox.errors import Forbidden, NotFound
from postbox.work import assign, messages, queues, scopes, subscriptions


@pytest.fixture
def feed(tenant, scope):
    return queues.create_queue(tenant.principal, scope["id"], {"slug": "reviews", "consumer_mode": "broadcast"})


def _sub(tenant, scope, feed, who, **fields):
    return subscriptions.create(tenant.principal, scope["id"], {"subscriber_type": "user", "subscriber_id": who,
                                                               "queue_id": feed["id"], **fields})


def _publish(tenant, scope, feed, body="x", **fields):
    return messages.publish(tenant.principal, scope["id"], feed["id"], {"body": body, **fields})[0]


def _inbox(tenant, scope, sub, state="claimed"):
    found, cursor = assign.list_deliveries(tenant.principal, scope["id"], sub["id"], state, limit=200)
    assert cursor is None
    return found


def _assigned(sub):
    """Run the agent's sweep (over every tenant: other tests' subscriptions may be due too) and
    answer how many of `sub`'s deliveries it claimed."""
    with db.connection() as conn:
        before = conn.execute("SELECT coalesce(sum(attempts), 0) FROM work_deliveries WHERE subscription_id = %s",
                              (sub["id"],)).fetchone()[0]
    assign.assign_due()
    with db.connection() as conn:
        return conn.execute("SELECT coalesce(sum(attempts), 0) FROM work_deliveries WHERE subscription_id = %s",
                            (sub["id"],)).fetchone()[0] - before


def _count(sub, state):
    with db.connection() as conn:
        return conn.execute("SELECT count(*) FROM work_deliveries WHERE subscription_id = %s AND state = %s",
                            (sub["id"], state)).fetchone()[0]


def test_deliveries_are_assigned_as_they_are_published(tenant, scope, feed):
    ann = _sub(tenant, scope, feed, "ann", auto_claim=True)
    bob = _sub(tenant, scope, feed, "bob")
    m = _publish(tenant, scope, feed, "review me")
    [mine] = _inbox(tenant, scope, ann)
    assert mine["id"] == m["id"] and mine["attempts"] == 1 and mine["claim_token"] and mine["claim_expires_at"]
    assert _inbox(tenant, scope, bob) == [] and [d["id"] for d in _inbox(tenant, scope, bob, "pending")] == [m["id"]]
    assert subscriptions.claim(tenant.principal, scope["id"], ann["id"], 10, None) == []  # already his
    done = subscriptions.finish(tenant.principal, scope["id"], ann["id"], m["id"], "complete",
                                {"claim_token": mine["claim_token"], "response": {"ok": True}})
    assert done["state"] == "completed"
    assert [d["id"] for d in _inbox(tenant, scope, ann, "completed")] == [m["id"]]


def test_a_delayed_message_is_assigned_once_it_is_visible(tenant, scope, feed):
    ann = _sub(tenant, scope, feed, "ann", auto_claim=True)
    m = _publish(tenant, scope, feed, visible_at="2999-01-01T00:00:00Z")
    assert _inbox(tenant, scope, ann) == [] and _count(ann, "pending") == 1
    with db.connection() as conn:
        conn.execute("UPDATE work_deliveries SET visible_at = clock_timestamp() WHERE message_id = %s", (m["id"],))
    assert _assigned(ann) == 1
    assert [d["id"] for d in _inbox(tenant, scope, ann)] == [m["id"]]


def test_max_in_flight_holds_and_the_agent_assigns_the_rest_as_claims_end(tenant, scope, feed):
    ann = _sub(tenant, scope, feed, "ann", auto_claim=True, max_in_flight=2)
    sent = [_publish(tenant, scope, feed, str(i))["id"] for i in range(5)]
    held = _inbox(tenant, scope, ann)
    assert [d["id"] for d in held] == sent[:2] and _count(ann, "pending") == 3
    assert _assigned(ann) == 0  # full: nothing to assign
    first = held[0]
    subscriptions.finish(tenant.principal, scope["id"], ann["id"], first["id"], "complete",
                         {"claim_token": first["claim_token"]})
    assert _assigned(ann) == 1
    assert [d["id"] for d in _inbox(tenant, scope, ann)] == sent[1:3]
    with db.connection() as conn:  # the claim on sent[1] runs out: it comes back, assigned again
        conn.execute("UPDATE work_deliveries SET visible_at = clock_timestamp() - interval '1 second'"
                     " WHERE subscription_id = %s AND message_id = %s", (ann["id"], sent[1]))
    assert _assigned(ann) == 1
    again = {d["id"]: d for d in _inbox(tenant, scope, ann)}
    assert sorted(again) == sorted(sent[1:3]) and again[sent[1]]["attempts"] == 2
    assert again[sent[1]]["claim_token"] != held[1]["claim_token"]


def test_switching_auto_claim_on_assigns_what_waits(tenant, scope, feed):
    ann = _sub(tenant, scope, feed, "ann", max_in_flight=3)
    for i in range(4):
        _publish(tenant, scope, feed, str(i))
    assert _inbox(tenant, scope, ann) == []
    subscriptions.update(tenant.principal, scope["id"], ann["id"], {"auto_claim": True})
    assert _assigned(ann) == 3
    assert _count(ann, "claimed") == 3 and _count(ann, "pending") == 1


def test_push_and_paused_subscriptions_are_not_assigned(tenant, scope, feed):
    hook = _sub(tenant, scope, feed, "hook", auto_claim=True, delivery_mode="push", push_url="http://example.com/h")
    ann = _sub(tenant, scope, feed, "ann", auto_claim=True)
    subscriptions.update(tenant.principal, scope["id"], ann["id"], {"state": "paused"})
    _publish(tenant, scope, feed)
    assert _count(hook, "pending") == 1 and _count(hook, "claimed") == 0  # the push agent claims its own
    assert _count(ann, "pending") == 0  # paused: receives nothing
    assert _assigned(ann) == 0 and _assigned(hook) == 0


def test_concurrent_publishes_never_assign_more_than_max_in_flight(tenant, scope, feed):
    ann = _sub(tenant, scope, feed, "ann", auto_claim=True, max_in_flight=10)
    bob = _sub(tenant, scope, feed, "bob", auto_claim=True, max_in_flight=1000)
    errors: list[BaseException] = []

    def publisher(n: int) -> None:
        try:
            for i in range(25):
                _publish(tenant, scope, feed, f"{n}-{i}")
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=publisher, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert _count(ann, "claimed") == 10 and _count(ann, "pending") == 190
    assert _count(bob, "claimed") == 200 and _count(bob, "pending") == 0
    bodies = {d["body"] for d in _inbox(tenant, scope, bob)}
    assert bodies == {f"{n}-{i}" for n in range(8) for i in range(25)}


def test_the_inbox_needs_consume_and_a_visible_subscription(tenant, scope, feed, make_tenant):
    ann = _sub(tenant, scope, feed, "ann", auto_claim=True)
    with pytest.raises(Forbidden):
        assign.list_deliveries(tenant.principal_for("read"), scope["id"], ann["id"], "claimed")
    with pytest.raises(NotFound):
        assign.list_deliveries(make_tenant().principal, scope["id"], ann["id"], "claimed")
    with pytest.raises(NotFound):
        assign.list_deliveries(tenant.principal, scope["id"], "not-a-uuid", "claimed")


def test_one_tenants_many_due_subscriptions_leave_room_for_another_tenant(tenant, scope, feed, make_tenant):
    """The agent lists due subscriptions by turns over the tenants (each one's first, then each one's
    second, ...): a tenant with many, always due and ordered before another's, does not keep that
    other tenant's out of a run whose list they would fill."""
    other = _sub(tenant, scope, feed, "other", auto_claim=True)
    hog = make_tenant()
    s = scopes.create_scope(hog.principal, {"slug": "hog"})
    q = queues.create_queue(hog.principal, s["id"], {"slug": "feed", "consumer_mode": "broadcast"})
    hogs: list[str] = []
    for n in range(40):  # ids are random: keep three that sort before the other tenant's
        sub = subscriptions.create(hog.principal, s["id"], {"subscriber_type": "user", "subscriber_id": f"h{n}",
                                                             "queue_id": q["id"], "auto_claim": True})
        if sub["id"] < other["id"] and len(hogs) < 3:
            hogs.append(sub["id"])
        else:
            subscriptions.delete(hog.principal, s["id"], sub["id"])
    assert len(hogs) == 3
    messages.publish(hog.principal, s["id"], q["id"], {"body": "x"})
    _publish(tenant, scope, feed)
    with db.connection() as conn:  # every claim run out: each subscription is due
        conn.execute("UPDATE work_deliveries SET visible_at = clock_timestamp() - interval '1 second'"
                     " WHERE subscription_id = ANY(%s::uuid[])", ([other["id"], *hogs],))
        due = [str(r[0]) for r in conn.execute("SELECT subscription_id FROM work_auto_claim_due(100000)")]
    assert due.index(other["id"]) < max(due.index(h) for h in hogs)
