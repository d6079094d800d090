"""Routing rules on the lifecycle moments (completed, failed, dead-lettered): a child published into
the rule's queue in the moment's transaction, the 5-hop breaker, and moments that still happen when
the child cannot be published."""

from __future__ import annotations

import pytest

from postbox.errors import Unprocessable
from postbox.work import audit, browse, messages, queues, routing, scopes


@pytest.fixture
def shop(tenant):
    p = tenant.principal
    s = scopes.create_scope(p, {"slug": "shop"})
    jobs = queues.create_queue(p, s["id"], {"slug": "jobs", "max_retries": 2})
    side = queues.create_queue(p, s["id"], {"slug": "side"})
    return p, s, jobs, side


def _rule(p, s, trigger, target, **fields):
    return routing.create_rule(p, s["id"], {"name": f"on-{trigger}", "trigger": trigger,
                                            "action": {"type": "route", "queue_id": target["id"]}, **fields})


def _pending(p, s, q):
    return browse.list_messages(p, s["id"], q["id"], "pending")[0]


def _publish(p, s, q, **fields):
    return messages.publish(p, s["id"], q["id"], {"body": {"order": 7}, "correlation_id": "c-1", **fields})[0]


def _claim_one(p, s, q):
    [m] = messages.claim(p, s["id"], q["id"], 1, 60)
    return m


def _is_child_of(child, parent, trigger, rule):
    assert child["parent_id"] == parent["id"] and child["causation_id"] == parent["id"]
    assert child["correlation_id"] == parent["correlation_id"] and child["body"] == parent["body"]
    assert child["labels"]["routing.trigger"] == trigger
    assert (child["source_type"], child["source_id"]) == ("routing_rule", rule["id"])


def test_completed_publishes_a_child_for_the_matching_messages_only(shop):
    p, s, jobs, side = shop
    rule = _rule(p, s, "message_completed", side, conditions={"field": "labels.kind", "op": "eq", "value": "order"})
    order = _publish(p, s, jobs, labels={"kind": "order"})
    other = _publish(p, s, jobs, labels={"kind": "note"}, correlation_id="c-2")
    for m in (_claim_one(p, s, jobs), _claim_one(p, s, jobs)):
        messages.finish(p, s["id"], m["id"], "complete", {"response": {"ok": True}})
    [child] = _pending(p, s, side)
    _is_child_of(child, order, "message_completed", rule)
    assert other["id"] not in {child["parent_id"]}
    # the child's publish is in the audit trail, its actor the rule
    trail = [(e["event_type"], e["actor_type"]) for e in audit.trace(p, s["id"], "c-1")]
    assert trail[-1] == ("scaiqueue.message.published", "routing_rule")


def test_batch_completions_route_too(shop):
    p, s, jobs, side = shop
    _rule(p, s, "message_completed", side)
    for i in range(3):
        _publish(p, s, jobs, correlation_id=f"b-{i}")
    claimed = messages.claim(p, s["id"], jobs["id"], 3, 60)
    answers = messages.finish_batch(p, s["id"], "complete", [{"id": m["id"]} for m in claimed])
    assert all(a["ok"] for a in answers)
    assert sorted(c["parent_id"] for c in _pending(p, s, side)) == sorted(m["id"] for m in claimed)


def test_failed_publishes_a_child_while_the_message_is_retried(shop):
    p, s, jobs, side = shop
    rule = _rule(p, s, "message_failed", side)
    msg = _publish(p, s, jobs)
    _claim_one(p, s, jobs)
    failed = messages.finish(p, s["id"], msg["id"], "fail", {"reason": "flaky"})
    assert failed["state"] == "pending"  # the retry goes on
    [child] = _pending(p, s, side)
    _is_child_of(child, msg, "message_failed", rule)


def test_dead_lettered_publishes_a_child_besides_the_dead_letter_copy(shop):
    p, s, jobs, side = shop
    rule = _rule(p, s, "message_dead_lettered", side)
    msg = _publish(p, s, jobs, max_retries=1)
    _claim_one(p, s, jobs)
    assert messages.finish(p, s["id"], msg["id"], "fail", {"reason": "broken"})["state"] == "dead_lettered"
    [child] = _pending(p, s, side)
    _is_child_of(child, msg, "message_dead_lettered", rule)
    [copy] = browse.list_messages(p, s["id"], s["system_queues"]["_dead_letter"], "pending")[0]
    assert copy["causation_id"] == msg["id"]


def test_the_loop_breaker_stops_after_five_generations(shop):
    p, s, jobs, _ = shop
    _rule(p, s, "message_completed", jobs, source={"queue_id": jobs["id"]})  # completing one makes another
    _publish(p, s, jobs)
    generations = 0
    while claimed := messages.claim(p, s["id"], jobs["id"], 1, 60):
        messages.finish(p, s["id"], claimed[0]["id"], "complete", {})
        generations += 1
        assert generations <= 6
    assert generations == 6  # the original and five descendants
    stopped = audit.query(p, s["id"], event_type="scaiqueue.routing.stopped")[0]
    assert len(stopped) == 1 and stopped[0]["details"]["reason"].startswith("loop breaker: 5 hops")


def test_a_paused_target_does_not_stop_the_completion(shop):
    p, s, jobs, side = shop
    _rule(p, s, "message_completed", side)
    queues.set_paused(p, s["id"], side["id"], True)
    msg = _publish(p, s, jobs)
    _claim_one(p, s, jobs)
    assert messages.finish(p, s["id"], msg["id"], "complete", {})["state"] == "completed"
    assert _pending(p, s, side) == []
    [stopped] = audit.query(p, s["id"], event_type="scaiqueue.routing.stopped")[0]
    assert stopped["resource_id"] == msg["id"] and "paused" in stopped["details"]["reason"]


def test_lifecycle_rules_only_route_or_copy(shop):
    p, s, jobs, side = shop
    with pytest.raises(Unprocessable) as e:
        routing.create_rule(p, s["id"], {"name": "x", "trigger": "message_failed", "action": {"type": "archive"}})
    assert e.value.details["fields"] == [{"field": "action.type", "message": "route or copy on this trigger"}]
    rule = routing.create_rule(p, s["id"], {"name": "y", "action": {"type": "archive"}})
    with pytest.raises(Unprocessable):
        routing.update_rule(p, s["id"], rule["id"], {"trigger": "message_completed"})
    assert routing.get_rule(p, s["id"], rule["id"])["trigger"] == "message_published"  # nothing changed
    copy = routing.create_rule(p, s["id"], {"name": "z", "trigger": "message_dead_lettered",
                                            "action": {"type": "copy", "queue_id": side["id"]}})
    assert copy["trigger"] == "message_dead_lettered"


def test_the_loop_breaker_counts_only_the_tenants_own_ancestors(shop):
    """A parent_id naming another tenant's message is no ancestor: the breaker's walk stays in the
    tenant, so another tenant's chain neither stops this tenant's rule nor tells it that chain's depth."""
    from support.tenants import new_tenant

    p, s, jobs, _ = shop
    _rule(p, s, "message_completed", jobs, source={"queue_id": jobs["id"]})
    _publish(p, s, jobs)
    last = None
    while claimed := messages.claim(p, s["id"], jobs["id"], 1, 60):
        last = messages.finish(p, s["id"], claimed[0]["id"], "complete", {})
    assert last is not None  # the deepest of six generations: five ancestors
    other = new_tenant().principal
    s2 = scopes.create_scope(other, {"slug": "elsewhere"})
    jobs2 = queues.create_queue(other, s2["id"], {"slug": "jobs"})
    side2 = queues.create_queue(other, s2["id"], {"slug": "side"})
    _rule(other, s2, "message_completed", side2)
    mine = _publish(other, s2, jobs2, parent_id=last["id"])
    messages.finish(other, s2["id"], _claim_one(other, s2, jobs2)["id"], "complete", {})
    [child] = _pending(other, s2, side2)
    assert child["parent_id"] == mine["id"]
    assert audit.query(other, s2["id"], event_type="scaiqueue.routing.stopped")[0] == []
