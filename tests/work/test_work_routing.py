"""Routing rules applied by the publish, on real PostgreSQL: matches, order, actions, the loop
breaker, and atomicity under concurrent publishes."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from postbox import db
from postbox.errors import NotFound, Unprocessable
from postbox.work import browse, messages, queues, routing, scopes


def _queue(tenant, scope, slug, **fields):
    return queues.create_queue(tenant.principal, scope["id"], {"slug": slug, **fields})


def _rule(tenant, scope, name, action, conditions=None, **fields):
    body = {"name": name, "action": action, **fields}
    if conditions is not None:
        body["conditions"] = conditions
    return routing.create_rule(tenant.principal, scope["id"], body)


def _publish(tenant, scope, queue, body="x", **fields):
    return messages.publish(tenant.principal, scope["id"], queue["id"], {"body": body, **fields})[0]


def _pending(tenant, scope, queue):
    return browse.list_messages(tenant.principal, scope["id"], queue["id"], "pending", 200)[0]


def test_label_condition_routes_to_another_queue(tenant, scope):
    inbox, premium = _queue(tenant, scope, "inbox"), _queue(tenant, scope, "premium")
    _rule(tenant, scope, "vip", {"type": "route", "queue_id": premium["id"]},
          {"field": "labels.customer_tier", "op": "eq", "value": "premium"})
    routed = _publish(tenant, scope, inbox, "a", labels={"customer_tier": "premium"})
    kept = _publish(tenant, scope, inbox, "b", labels={"customer_tier": "basic"})
    assert routed["queue_id"] == premium["id"] and kept["queue_id"] == inbox["id"]
    assert [m["body"] for m in _pending(tenant, scope, premium)] == ["a"]
    assert [m["body"] for m in _pending(tenant, scope, inbox)] == ["b"]
    assert queues.stats(tenant.principal, scope["id"], premium["id"])["depth_pending"] == 1
    assert queues.stats(tenant.principal, scope["id"], inbox["id"])["depth_pending"] == 1


CASES = [
    ({"field": "type", "op": "in", "value": ["order.created", "order.paid"]}, {"type": "order.paid"}, True),
    ({"field": "type", "op": "not_in", "value": ["order.created"]}, {"type": "order.created"}, False),
    ({"field": "body.amount", "op": "gt", "value": 100}, {"body": {"amount": 150}}, True),
    ({"field": "body.amount", "op": "gt", "value": 100}, {"body": {"amount": 100}}, False),
    ({"field": "body.amount", "op": "lte", "value": 100}, {"body": {"amount": 100}}, True),
    ({"field": "labels.size", "op": "gte", "value": 10}, {"labels": {"size": "12"}}, True),  # numeric label
    ({"field": "body.items.0.sku", "op": "eq", "value": "A1"}, {"body": {"items": [{"sku": "A1"}]}}, True),
    ({"field": "body.note", "op": "exists"}, {"body": {"note": "hi"}}, True),
    ({"field": "body.note", "op": "exists"}, {"body": {"other": 1}}, False),
    ({"field": "body.note", "op": "not_exists"}, {"body": "a string"}, True),
    ({"field": "priority.tier", "op": "eq", "value": "high"}, {"priority": {"tier": "high"}}, True),
    ({"field": "labels.region", "op": "ne", "value": "eu"}, {"labels": {"region": "us"}}, True),
    ({"all": [{"field": "type", "op": "eq", "value": "a"}, {"field": "labels.x", "op": "exists"}]},
     {"type": "a", "labels": {"x": "1"}}, True),
    ({"all": [{"field": "type", "op": "eq", "value": "a"}, {"field": "labels.x", "op": "exists"}]},
     {"type": "a"}, False),
    ({"any": [{"field": "type", "op": "eq", "value": "a"}, {"field": "labels.x", "op": "exists"}]},
     {"type": "b", "labels": {"x": "1"}}, True),
    ({"not": {"field": "type", "op": "eq", "value": "a"}}, {"type": "a"}, False),
]


@pytest.mark.parametrize(("conditions", "message", "matches"), CASES)
def test_condition_language(tenant, scope, conditions, message, matches):
    inbox, other = _queue(tenant, scope, "inbox"), _queue(tenant, scope, "other")
    _rule(tenant, scope, "r", {"type": "route", "queue_id": other["id"]}, conditions)
    dry = routing.dry_run(tenant.principal, scope["id"], "message_published", message)
    assert bool(dry["matches"]) is matches
    published = _publish(tenant, scope, inbox, **{"body": "x", **message})
    assert published["queue_id"] == (other if matches else inbox)["id"]


def test_first_enabled_match_by_priority_wins_and_listing_order(tenant, scope):
    inbox, a, b = _queue(tenant, scope, "inbox"), _queue(tenant, scope, "a"), _queue(tenant, scope, "b")
    late = _rule(tenant, scope, "late", {"type": "route", "queue_id": b["id"]}, priority=20)
    early = _rule(tenant, scope, "early", {"type": "route", "queue_id": a["id"]}, priority=10)
    assert [r["name"] for r in routing.list_rules(tenant.principal, scope["id"])] == ["early", "late"]
    assert _publish(tenant, scope, inbox)["queue_id"] == a["id"]
    routing.update_rule(tenant.principal, scope["id"], early["id"], {"enabled": False})
    assert _publish(tenant, scope, inbox)["queue_id"] == b["id"]
    dry = routing.dry_run(tenant.principal, scope["id"], "message_published", {"body": "x"})
    assert [r["id"] for r in dry["matches"]] == [late["id"]] and dry["applied"]["id"] == late["id"]
    routing.delete_rule(tenant.principal, scope["id"], late["id"])
    assert _publish(tenant, scope, inbox)["queue_id"] == inbox["id"]


def test_transform_escalate_archive_and_copy(tenant, scope):
    inbox, audit = _queue(tenant, scope, "inbox", ordering="priority"), _queue(tenant, scope, "audit")
    _rule(tenant, scope, "tag", {"type": "transform", "set_labels": {"seen": "yes"}, "remove_labels": ["drop"],
                                 "message_type": "order.tagged", "priority": {"score": 900}},
          {"field": "type", "op": "eq", "value": "t"})
    _rule(tenant, scope, "up", {"type": "escalate"}, {"field": "type", "op": "eq", "value": "e"})
    _rule(tenant, scope, "top", {"type": "escalate", "tier": "critical"}, {"field": "type", "op": "eq", "value": "c"})
    _rule(tenant, scope, "bin", {"type": "archive"}, {"field": "type", "op": "eq", "value": "spam"})
    _rule(tenant, scope, "cc", {"type": "copy", "queue_id": audit["id"]}, {"field": "type", "op": "eq", "value": "cp"},
          source={"queue_id": inbox["id"]})
    t = _publish(tenant, scope, inbox, type="t", labels={"drop": "1", "keep": "2"})
    assert t["type"] == "order.tagged" and t["labels"] == {"keep": "2", "seen": "yes"}
    assert t["priority"] == {"tier": "normal", "score": 900}
    assert _publish(tenant, scope, inbox, type="e", priority={"tier": "low", "score": 5})["priority"] == \
        {"tier": "normal", "score": 5}
    assert _publish(tenant, scope, inbox, type="c")["priority"]["tier"] == "critical"
    spam = _publish(tenant, scope, inbox, type="spam")
    assert spam["state"] == "archived" and "bin" in spam["failure_reason"]
    original = _publish(tenant, scope, inbox, "copied", type="cp", correlation_id="k")
    [child] = _pending(tenant, scope, audit)
    assert child["parent_id"] == original["id"] and child["causation_id"] == original["id"]
    assert child["body"] == "copied" and child["correlation_id"] == "k" and original["queue_id"] == inbox["id"]
    st = queues.stats(tenant.principal, scope["id"], inbox["id"])
    assert st["depth_pending"] == 4 and st["published_total"] == 5  # the archived one holds no depth
    assert [m["id"] for m in browse.list_messages(tenant.principal, scope["id"], inbox["id"], "archived")[0]] == \
        [spam["id"]]


def test_loop_breaker_stops_after_five_hops_and_says_so(tenant, scope):
    a, b = _queue(tenant, scope, "a"), _queue(tenant, scope, "b")
    _rule(tenant, scope, "a-to-b", {"type": "route", "queue_id": b["id"]}, source={"queue_id": a["id"]})
    _rule(tenant, scope, "b-to-a", {"type": "route", "queue_id": a["id"]}, source={"queue_id": b["id"]})
    m = _publish(tenant, scope, a)
    # a -> b -> a -> b -> a -> b: five hops, then the sixth is refused and the message stays in b
    assert m["queue_id"] == b["id"]
    assert m["labels"]["routing.stopped"] == "loop breaker: 5 hops; rule b-to-a not applied"
    total = sum(queues.stats(tenant.principal, scope["id"], q["id"])["depth_pending"] for q in (a, b))
    assert total == 1


def test_bad_rules_are_refused(tenant, scope):
    import uuid

    with pytest.raises(Unprocessable) as e:
        _rule(tenant, scope, "x", {"type": "route", "queue_id": str(uuid.uuid4())})
    assert e.value.details["fields"][0]["field"] == "action.queue_id"
    other = scopes.create_scope(tenant.principal, {"slug": "elsewhere"})
    foreign = _queue(tenant, other, "foreign")
    with pytest.raises(Unprocessable):  # a queue of another scope is not in this one
        _rule(tenant, scope, "x", {"type": "route", "queue_id": foreign["id"]})
    with pytest.raises(NotFound):
        routing.get_rule(tenant.principal, scope["id"], str(uuid.uuid4()))
    assert routing.list_rules(tenant.principal, scope["id"]) == []


def test_routing_is_atomic_under_concurrent_publishes_and_rule_changes(tenant, scope):
    """Four publishers while a fifth thread flips the rule on and off: every message lands in
    exactly one queue (or two, the original and its copy, for copied ones), never none."""
    inbox, hot, cc = _queue(tenant, scope, "inbox"), _queue(tenant, scope, "hot"), _queue(tenant, scope, "cc")
    rule = _rule(tenant, scope, "hot", {"type": "route", "queue_id": hot["id"]},
                 {"field": "body.n", "op": "gte", "value": 0}, source={"queue_id": inbox["id"]})
    _rule(tenant, scope, "copy-odd", {"type": "copy", "queue_id": cc["id"]},
          {"field": "labels.odd", "op": "eq", "value": "1"}, source={"queue_id": hot["id"]})
    errors: list[BaseException] = []
    stop = threading.Event()

    def publisher(k: int) -> None:
        try:
            for i in range(150):
                n = k * 1000 + i
                _publish(tenant, scope, inbox, {"n": n}, labels={"odd": str(n % 2)})
        except BaseException as e:
            errors.append(e)

    def flipper() -> None:
        on = True
        while not stop.is_set():
            on = not on
            routing.update_rule(tenant.principal, scope["id"], rule["id"], {"enabled": on})

    threads = [threading.Thread(target=publisher, args=(k,)) for k in range(4)]
    flip = threading.Thread(target=flipper)
    flip.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    flip.join()
    assert not errors
    with db.connection() as conn:
        rows = conn.execute("SELECT q.slug, m.body->>'n' FROM work_messages m JOIN work_queues q ON q.id = m.queue_id"
                            " WHERE m.scope_id = %s AND NOT q.is_system", (scope["id"],)).fetchall()
    where: dict[str, Counter] = {}
    for slug, n in rows:
        where.setdefault(n, Counter())[slug] += 1
    assert len(where) == 600
    for n, seen in where.items():
        if seen["hot"]:
            assert seen == Counter({"hot": 1, **({"cc": 1} if int(n) % 2 else {})}), (n, seen)
        else:
            assert seen == Counter({"inbox": 1}), (n, seen)
    assert sum(1 for s in where.values() if s["hot"]) > 0 and sum(1 for s in where.values() if s["inbox"]) > 0
    depth = sum(queues.stats(tenant.principal, scope["id"], q["id"])["depth_pending"] for q in (inbox, hot, cc))
    assert depth == len(rows)
