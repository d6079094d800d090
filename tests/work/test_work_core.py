"""The work surface's domain on real PostgreSQL: scopes, queues, publish, claim order, finishing."""

from __future__ import annotations

import time
from datetime import datetime

import pytest

from postbox.errors import Conflict, Forbidden, NotFound, TooManyRequests
from postbox.work import browse, messages, queues, scopes
from support.clock import db_now, wait_for_db_clock


def _wait_past(iso: str) -> None:
    wait_for_db_clock(datetime.fromisoformat(iso))


def _scope(tenant, slug="orders", **fields):
    return scopes.create_scope(tenant.principal, {"slug": slug, **fields})


def _queue(tenant, scope, slug="jobs", **fields):
    return queues.create_queue(tenant.principal, scope["id"], {"slug": slug, **fields})


def _publish(tenant, scope, queue, body="x", **fields):
    return messages.publish(tenant.principal, scope["id"], queue["id"], {"body": body, **fields})[0]


def _claim(tenant, scope, queue, n=10, vt=None):
    return messages.claim(tenant.principal, scope["id"], queue["id"], n, vt)


def _stats(tenant, scope, queue):
    return queues.stats(tenant.principal, scope["id"], queue["id"])


def test_scope_creation_makes_five_system_queues_and_defaults(tenant):
    s = _scope(tenant, defaults={"ordering": "priority", "max_retries": 5})
    assert s["display_name"] == "orders" and s["state"] == "active"
    assert sorted(s["system_queues"]) == sorted(scopes.SYSTEM_QUEUES)
    q = _queue(tenant, s)
    assert q["ordering"] == "priority" and q["max_retries"] == 5 and q["consumer_mode"] == "competing"
    q2 = _queue(tenant, s, "other", ordering="deadline")
    assert q2["ordering"] == "deadline"
    with pytest.raises(Conflict) as e:
        _scope(tenant)
    assert e.value.code == "SCAIQUEUE_SLUG_CONFLICT"
    with pytest.raises(Conflict) as e:
        _queue(tenant, s)
    assert e.value.code == "SCAIQUEUE_SLUG_CONFLICT"


ALLOWED = {
    ("active", "pause"), ("active", "drain"), ("active", "archive"),
    ("paused", "resume"), ("paused", "drain"), ("paused", "archive"),
    ("draining", "archive"), ("archived", "unarchive"),
}


def _scope_in(tenant, state, slug):
    s = _scope(tenant, slug)
    path = {"active": [], "paused": ["pause"], "draining": ["drain"], "archived": ["archive"]}[state]
    for action in path:
        s = scopes.transition(tenant.principal, s["id"], action)
    return s


@pytest.mark.parametrize("state", ["active", "paused", "draining", "archived"])
def test_scope_transition_matrix(tenant, state):
    for action, (_, target) in scopes.TRANSITIONS.items():
        s = _scope_in(tenant, state, f"s-{state}-{action}")
        if (state, action) in ALLOWED:
            assert scopes.transition(tenant.principal, s["id"], action)["state"] == target
        else:
            with pytest.raises(Conflict) as e:
                scopes.transition(tenant.principal, s["id"], action)
            assert e.value.code == "SCAIQUEUE_INVALID_TRANSITION"
            assert scopes.get_scope(tenant.principal, s["id"])["state"] == state


def test_scope_delete_only_when_archived_and_publish_refused_unless_active(tenant):
    s = _scope(tenant)
    q = _queue(tenant, s)
    _publish(tenant, s, q)
    with pytest.raises(Conflict) as e:
        scopes.delete_scope(tenant.principal, s["id"])
    assert e.value.code == "SCAIQUEUE_INVALID_TRANSITION"
    for action in ("pause", "drain", "archive"):
        scopes.transition(tenant.principal, s["id"], action)
        with pytest.raises(Conflict) as e:
            _publish(tenant, s, q)
        assert e.value.code == "SCAIQUEUE_SCOPE_PAUSED"
    scopes.delete_scope(tenant.principal, s["id"])
    with pytest.raises(NotFound) as e:
        scopes.get_scope(tenant.principal, s["id"])
    assert e.value.code == "SCAIQUEUE_SCOPE_NOT_FOUND"


def test_draining_scope_still_claims_paused_and_archived_do_not(tenant):
    s = _scope(tenant)
    q = _queue(tenant, s)
    for i in range(3):
        _publish(tenant, s, q, i)
    scopes.transition(tenant.principal, s["id"], "pause")
    assert _claim(tenant, s, q) == []
    scopes.transition(tenant.principal, s["id"], "drain")
    assert len(_claim(tenant, s, q, 1)) == 1
    scopes.transition(tenant.principal, s["id"], "archive")
    assert _claim(tenant, s, q) == []


def test_queue_pause_resume_and_delete_rules(tenant):
    s = _scope(tenant)
    q = _queue(tenant, s)
    _publish(tenant, s, q)
    queues.set_paused(tenant.principal, s["id"], q["id"], True)
    with pytest.raises(Conflict) as e:
        _publish(tenant, s, q)
    assert e.value.code == "SCAIQUEUE_QUEUE_PAUSED"
    assert _claim(tenant, s, q) == []
    queues.set_paused(tenant.principal, s["id"], q["id"], False)
    with pytest.raises(Conflict) as e:
        queues.delete_queue(tenant.principal, s["id"], q["id"])
    assert e.value.code == "SCAIQUEUE_INVALID_TRANSITION"
    [m] = _claim(tenant, s, q)
    messages.finish(tenant.principal, s["id"], m["id"], "complete", {})
    queues.delete_queue(tenant.principal, s["id"], q["id"])
    with pytest.raises(NotFound):
        queues.get_queue(tenant.principal, s["id"], q["id"])
    dead_letter = s["system_queues"]["_dead_letter"]
    with pytest.raises(Conflict) as e:
        queues.delete_queue(tenant.principal, s["id"], dead_letter)
    assert e.value.code == "SCAIQUEUE_INVALID_TRANSITION"


def test_publish_defaults_and_fields(tenant):
    s = _scope(tenant)
    q = _queue(tenant, s)
    m = _publish(tenant, s, q, {"a": 1}, labels={"tier": "gold"}, correlation_id="c-1", hitl_spec={"x": 1},
                 ttl_seconds=60)
    assert m["state"] == "pending" and m["type"] == "task" and m["priority"] == {"tier": "normal", "score": 500}
    assert m["max_retries"] == 3 and m["visibility_timeout_s"] == 30 and m["content_type"] == "application/json"
    assert m["body"] == {"a": 1} and m["labels"] == {"tier": "gold"} and m["expires_at"] is not None
    assert m["source_id"] == tenant.principal.key_id
    got = browse.get_message(tenant.principal, s["id"], q["id"], m["id"])
    assert got["hitl_spec"] == {"x": 1} and got["correlation_id"] == "c-1"
    assert _stats(tenant, s, q)["depth_pending"] == 1


def test_fifo_priority_and_deadline_claim_orders(tenant):
    s = _scope(tenant)
    fifo = _queue(tenant, s, "fifo")
    ids = [_publish(tenant, s, fifo, i)["id"] for i in range(5)]
    assert [m["id"] for m in _claim(tenant, s, fifo, 5)] == ids

    prio = _queue(tenant, s, "prio", ordering="priority")
    sent = [("low", 900), ("critical", 10), ("normal", 500), ("normal", 900), ("high", 1), ("background", 1000),
            ("normal", 900)]
    by_key = {}
    for i, (tier, score) in enumerate(sent):
        by_key[i] = _publish(tenant, s, prio, i, priority={"tier": tier, "score": score})["id"]
    order = [m["body"] for m in _claim(tenant, s, prio, 10)]
    assert order == [1, 4, 3, 6, 2, 0, 5]

    dl = _queue(tenant, s, "dl", ordering="deadline")
    _publish(tenant, s, dl, "none")
    _publish(tenant, s, dl, "late", deadline="2099-01-03T00:00:00Z")
    _publish(tenant, s, dl, "early", deadline="2099-01-01T00:00:00Z")
    _publish(tenant, s, dl, "mid", deadline="2099-01-02T00:00:00Z")
    assert [m["body"] for m in _claim(tenant, s, dl, 10)] == ["early", "mid", "late", "none"]


def test_claim_records_claimer_attempts_and_token(tenant):
    s = _scope(tenant)
    q = _queue(tenant, s)
    _publish(tenant, s, q)
    [m] = _claim(tenant, s, q, 5, 120)
    assert m["state"] == "claimed" and m["attempts"] == 1 and m["claimed_by"] == tenant.principal.key_id
    assert m["claim_token"] and m["claim_expires_at"]
    st = _stats(tenant, s, q)
    assert (st["depth_current"], st["depth_pending"], st["depth_claimed"]) == (1, 0, 1)


def test_complete_stores_response_and_emits_event_with_correlation(tenant):
    s = _scope(tenant)
    q = _queue(tenant, s)
    _publish(tenant, s, q, correlation_id="corr-9")
    [m] = _claim(tenant, s, q)
    done = messages.finish(tenant.principal, s["id"], m["id"], "complete",
                           {"response": {"ok": True}, "claim_token": m["claim_token"]})
    assert done["state"] == "completed" and done["response"] == {"ok": True} and done["ended_at"]
    with pytest.raises(Conflict) as e:
        messages.finish(tenant.principal, s["id"], m["id"], "complete", {})
    assert e.value.code == "SCAIQUEUE_NOT_CLAIMED"
    events_q = {"id": s["system_queues"]["_events"]}
    [event] = browse.list_messages(tenant.principal, s["id"], events_q["id"], "pending")[0]
    assert event["type"] == "scaiqueue.message.completed" and event["correlation_id"] == "corr-9"
    body = event["body"]
    assert set(body) == {"event_type", "event_id", "source", "tenant_id", "payload", "timestamp"}
    assert body["payload"]["correlation_id"] == "corr-9" and body["payload"]["message_id"] == m["id"]
    assert body["tenant_id"] == tenant.tenant_id
    chain = browse.correlation_chain(tenant.principal, s["id"], "corr-9")
    assert [c["id"] for c in chain] == [m["id"], event["id"]]


def test_retry_with_backoff_then_dead_letter(tenant):
    s = _scope(tenant)
    q = _queue(tenant, s)
    _publish(tenant, s, q, "job", max_retries=2, correlation_id="c")
    [m] = _claim(tenant, s, q)
    failed = messages.finish(tenant.principal, s["id"], m["id"], "fail", {"reason": "boom"})
    assert failed["state"] == "pending" and failed["failure_reason"] == "boom"
    assert _claim(tenant, s, q) == []  # backing off: 2^0 = 1 s
    _wait_past(failed["visible_at"])
    [again] = _claim(tenant, s, q)
    assert again["attempts"] == 2
    dead = messages.finish(tenant.principal, s["id"], m["id"], "fail", {"reason": "boom twice"})
    assert dead["state"] == "dead_lettered" and dead["failure_reason"] == "boom twice"
    [copy] = _claim(tenant, s, {"id": s["system_queues"]["_dead_letter"]})
    assert copy["body"] == "job" and copy["causation_id"] == m["id"] and copy["failure_reason"] == "boom twice"
    events = browse.list_messages(tenant.principal, s["id"], s["system_queues"]["_events"], "pending")[0]
    assert [e["type"] for e in events] == ["scaiqueue.message.dead_lettered"]
    st = _stats(tenant, s, q)
    assert st["depth_current"] == 0 and st["dead_lettered_total"] == 1


def test_release_extend_cancel_and_not_claimed(tenant):
    s = _scope(tenant)
    q = _queue(tenant, s)
    _publish(tenant, s, q)
    for action in ("complete", "fail", "release", "extend"):
        m = browse.list_messages(tenant.principal, s["id"], q["id"], "pending")[0][0]
        with pytest.raises(Conflict) as e:
            messages.finish(tenant.principal, s["id"], m["id"], action, {"seconds": 10})
        assert e.value.code == "SCAIQUEUE_NOT_CLAIMED"
    [m] = _claim(tenant, s, q, vt=30)
    extended = messages.finish(tenant.principal, s["id"], m["id"], "extend", {"seconds": 600})
    assert extended["claim_expires_at"] > m["claim_expires_at"]
    released = messages.finish(tenant.principal, s["id"], m["id"], "release", {})
    assert released["state"] == "pending" and released["attempts"] == 0
    cancelled = messages.finish(tenant.principal, s["id"], m["id"], "cancel", {})
    assert cancelled["state"] == "cancelled"
    with pytest.raises(Conflict) as e:
        messages.finish(tenant.principal, s["id"], m["id"], "cancel", {})
    assert e.value.code == "SCAIQUEUE_INVALID_TRANSITION"
    assert _stats(tenant, s, q)["depth_current"] == 0
    with pytest.raises(NotFound) as e:
        messages.finish(tenant.principal, s["id"], "00000000-0000-0000-0000-000000000000", "complete", {})
    assert e.value.code == "SCAIQUEUE_MESSAGE_NOT_FOUND"


def test_expired_claim_comes_back_and_old_token_is_refused(tenant):
    s = _scope(tenant)
    q = _queue(tenant, s)
    _publish(tenant, s, q)
    [first] = _claim(tenant, s, q, vt=1)
    assert _claim(tenant, s, q) == []
    _wait_past(first["claim_expires_at"])
    [second] = _claim(tenant, s, q, vt=60)  # no agent ran: the claim recovers it
    assert second["id"] == first["id"] and second["attempts"] == 2
    assert second["claim_token"] != first["claim_token"]
    with pytest.raises(Conflict) as e:
        messages.finish(tenant.principal, s["id"], first["id"], "complete", {"claim_token": first["claim_token"]})
    assert e.value.code == "SCAIQUEUE_NOT_CLAIMED"
    messages.finish(tenant.principal, s["id"], first["id"], "complete", {"claim_token": second["claim_token"]})
    st = _stats(tenant, s, q)
    assert (st["depth_pending"], st["depth_claimed"], st["completed_total"]) == (0, 0, 1)


def test_idempotency_replays_and_conflicts(tenant):
    s = _scope(tenant)
    q = _queue(tenant, s)
    first, replayed = messages.publish(tenant.principal, s["id"], q["id"], {"body": {"n": 1}, "idempotency_key": "k"})
    again, replayed2 = messages.publish(tenant.principal, s["id"], q["id"], {"body": {"n": 1}, "idempotency_key": "k"})
    assert not replayed and replayed2 and again["id"] == first["id"]
    with pytest.raises(Conflict) as e:
        messages.publish(tenant.principal, s["id"], q["id"], {"body": {"n": 2}, "idempotency_key": "k"})
    assert e.value.code == "SCAIQUEUE_IDEMPOTENCY_CONFLICT"
    assert _stats(tenant, s, q)["depth_pending"] == 1


def test_overflow_reject_and_drop_oldest(tenant):
    s = _scope(tenant)
    q = _queue(tenant, s, "bounded", max_depth=2)
    _publish(tenant, s, q, 1)
    _publish(tenant, s, q, 2)
    with pytest.raises(TooManyRequests) as e:
        _publish(tenant, s, q, 3)
    assert e.value.code == "SCAIQUEUE_QUEUE_FULL" and e.value.status == 429
    d = _queue(tenant, s, "dropping", max_depth=2, overflow_policy="drop_oldest")
    oldest = _publish(tenant, s, d, 1)
    _publish(tenant, s, d, 2)
    _publish(tenant, s, d, 3)
    assert [m["body"] for m in _claim(tenant, s, d)] == [2, 3]
    dropped = browse.get_message(tenant.principal, s["id"], d["id"], oldest["id"])
    assert dropped["state"] == "dead_lettered" and dropped["failure_reason"].startswith("overflow")
    assert _stats(tenant, s, {"id": s["system_queues"]["_dead_letter"]})["depth_pending"] == 1


def test_delayed_visible_at_and_paging_by_state(tenant):
    s = _scope(tenant)
    q = _queue(tenant, s)
    later = (db_now().timestamp() + 3600)
    delayed = _publish(tenant, s, q, "later", visible_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(later)))
    assert _claim(tenant, s, q) == []
    ids = [delayed["id"]] + [_publish(tenant, s, q, i)["id"] for i in range(4)]
    page1, cursor = browse.list_messages(tenant.principal, s["id"], q["id"], "pending", limit=3)
    page2, end = browse.list_messages(tenant.principal, s["id"], q["id"], "pending", limit=3, cursor=cursor)
    assert [m["id"] for m in page1 + page2] == ids and end is None


def test_other_tenant_sees_404_and_roles_map_to_operations(tenant, make_tenant):
    s = _scope(tenant)
    q = _queue(tenant, s)
    other = make_tenant()
    with pytest.raises(NotFound) as e:
        scopes.get_scope(other.principal, s["id"])
    assert e.value.code == "SCAIQUEUE_SCOPE_NOT_FOUND"
    with pytest.raises(NotFound) as e:
        messages.publish(other.principal, s["id"], q["id"], {"body": 1})
    assert e.value.code == "SCAIQUEUE_SCOPE_NOT_FOUND"
    reader = tenant.principal_for("read")
    writer = tenant.principal_for("write")
    assert scopes.get_scope(reader, s["id"])["id"] == s["id"]
    with pytest.raises(Forbidden):
        messages.publish(reader, s["id"], q["id"], {"body": 1})
    messages.publish(writer, s["id"], q["id"], {"body": 1})
    assert len(messages.claim(writer, s["id"], q["id"], 1, None)) == 1
    with pytest.raises(Forbidden):
        scopes.create_scope(writer, {"slug": "nope"})


def test_published_and_claimed_events_only_where_the_scope_asks(tenant):
    quiet = _scope(tenant, "quiet")
    loud = _scope(tenant, "loud", emit_events=["published", "claimed"])
    assert loud["emit_events"] == ["published", "claimed"] and quiet["emit_events"] == []
    for s in (quiet, loud):
        q = _queue(tenant, s)
        _publish(tenant, s, q, correlation_id="c")
        _claim(tenant, s, q)
    quiet_events = browse.list_messages(tenant.principal, quiet["id"], quiet["system_queues"]["_events"], "pending")[0]
    loud_events = browse.list_messages(tenant.principal, loud["id"], loud["system_queues"]["_events"], "pending")[0]
    assert quiet_events == []
    assert [e["type"] for e in loud_events] == ["scaiqueue.message.published", "scaiqueue.message.claimed"]
    assert all(e["correlation_id"] == "c" for e in loud_events)
    assert loud_events[1]["body"]["payload"]["claimed_by"] == tenant.principal.key_id


def test_batch_fail_dead_letters_after_the_last_attempt_and_ids_act_once(tenant):
    s = _scope(tenant)
    q = _queue(tenant, s)
    other = _scope(tenant, "other")
    foreign = _publish(tenant, other, _queue(tenant, other), "theirs")
    _publish(tenant, s, q, "last", max_retries=1)
    _publish(tenant, s, q, "retry", max_retries=3)
    last, retry = _claim(tenant, s, q, 2)
    items = [{"id": last["id"], "reason": "r1"},
             {"id": retry["id"], "reason": "r2", "claim_token": retry["claim_token"]},
             {"id": retry["id"]}, {"id": foreign["id"]}, {"id": "nope"}]
    out = messages.finish_batch(tenant.principal, s["id"], "fail", items)
    assert [(o["ok"], o.get("state"), o.get("error", {}).get("code")) for o in out] == [
        (True, "dead_lettered", None), (True, "pending", None), (False, None, "SCAIQUEUE_NOT_CLAIMED"),
        (False, None, "SCAIQUEUE_MESSAGE_NOT_FOUND"), (False, None, "SCAIQUEUE_MESSAGE_NOT_FOUND")]
    assert browse.get_message(tenant.principal, s["id"], q["id"], last["id"])["failure_reason"] == "r1"
    assert browse.get_message(tenant.principal, s["id"], q["id"], retry["id"])["failure_reason"] == "r2"
    st = _stats(tenant, s, q)
    assert (st["depth_pending"], st["depth_claimed"], st["dead_lettered_total"]) == (1, 0, 1)
    assert _stats(tenant, s, {"id": s["system_queues"]["_dead_letter"]})["depth_pending"] == 1


@pytest.mark.parametrize("start_paused", [False, True])
def test_queue_pause_and_resume_from_either_state(tenant, start_paused):
    s = _scope(tenant)
    q = _queue(tenant, s)
    if start_paused:
        queues.set_paused(tenant.principal, s["id"], q["id"], True)
    assert queues.set_paused(tenant.principal, s["id"], q["id"], True)["state"] == "paused"
    assert queues.set_paused(tenant.principal, s["id"], q["id"], False)["state"] == "active"
    assert queues.set_paused(tenant.principal, s["id"], q["id"], False)["state"] == "active"
    _publish(tenant, s, q)
    assert _stats(tenant, s, q)["depth_pending"] == 1
