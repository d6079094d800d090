"""Streams lifecycle on PostgreSQL, by the database clock: scheduled delivery, expiry, cancel,
retention (rows and log segments), idempotent replays, backlog caps, overlapping agents."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from postbox import db
from postbox.errors import Conflict, Invalid, NotFound, TooManyRequests
from postbox.keyed_streams import lifecycle, service
from postbox.keyed_streams.publishing import Outgoing
from postbox.log_engine import store
from support.clock import db_now, wait_for_db_clock


def _publish(principal, stream, **item):
    [(doc, replayed)] = service.publish(principal, stream, None, [Outgoing(**item)])
    return doc, replayed


def _statuses(principal, stream):
    found = service.browse(principal, stream, None, key=None, status=None, q=None, limit=500, before_offset=None)
    return {m["payload"]: m["status"] for m in found["messages"]}


def _stored_status(tenant_id, offset):
    with db.transaction() as conn:
        return conn.execute(
            'SELECT m.status FROM stream_messages m JOIN streams s ON s.id = m.stream_id'
            ' WHERE s.tenant_id = %s AND m."offset" = %s', (tenant_id, offset)).fetchone()[0]


def test_scheduled_messages_become_available_by_the_database_clock(tenant):
    p = tenant.principal
    _publish(p, "s", payload="now")
    service.create_subscription(p, "s", None, "w", max_deliveries=5, lease_ms=30_000, start="latest")
    due = db_now() + timedelta(milliseconds=400)
    doc, _ = _publish(p, "s", payload="later", deliver_at=due, key="a")
    assert doc["status"] == "scheduled" and doc["deliver_at"].endswith("Z")
    assert service.consume(p, "s", None, "w", max_messages=5, lease_ms=None, wait_ms=0)["messages"] == []
    wait_for_db_clock(due)
    assert _stored_status(tenant.tenant_id, doc["offset"]) == "scheduled"
    assert lifecycle.sweep_schedules()["available"] >= 1  # the agent, on time
    assert _stored_status(tenant.tenant_id, doc["offset"]) == "available"
    got = service.consume(p, "s", None, "w", max_messages=5, lease_ms=None, wait_ms=0)["messages"]
    assert [m["payload"] for m in got] == ["later"]
    assert service.get_stream(p, "s", None)["messages"] == 2
    assert service.list_streams(p, None)["streams"][0]["scheduled"] == 0


def test_browse_and_consume_do_not_wait_for_the_agent(tenant):
    p = tenant.principal
    due = db_now() + timedelta(milliseconds=300)
    doc, _ = _publish(p, "s", payload="later", deliver_at=due)
    assert _statuses(p, "s") == {"later": "scheduled"}
    wait_for_db_clock(due)
    assert _statuses(p, "s") == {"later": "available"}


def test_expired_messages_are_marked_and_counted(tenant):
    p = tenant.principal
    expires = db_now() + timedelta(milliseconds=400)
    doc, _ = _publish(p, "s", payload="brief", expires_at=expires)
    _publish(p, "s", payload="lasting")
    deliver, late = db_now() + timedelta(milliseconds=100), db_now() + timedelta(milliseconds=400)
    _publish(p, "s", payload="scheduled-then-expired", deliver_at=deliver, expires_at=late)
    wait_for_db_clock(late)
    lifecycle.sweep_schedules()
    assert _stored_status(tenant.tenant_id, doc["offset"]) == "expired"
    assert _statuses(p, "s") == {"brief": "expired", "lasting": "available", "scheduled-then-expired": "expired"}
    assert [m["payload"] for m in service.browse(p, "s", None, key=None, status="expired", q=None, limit=10,
                                                 before_offset=None)["messages"]] == ["scheduled-then-expired",
                                                                                     "brief"]


def test_publish_rejects_times_the_clock_has_passed(tenant):
    p = tenant.principal
    past = db_now() - timedelta(seconds=1)
    with pytest.raises(Invalid):
        _publish(p, "s", payload=1, expires_at=past)
    soon = db_now() + timedelta(seconds=60)
    with pytest.raises(Invalid):
        _publish(p, "s", payload=1, deliver_at=soon, expires_at=soon)
    with pytest.raises(Invalid):  # further away than the default 7d retention
        _publish(p, "s", payload=1, deliver_at=db_now() + timedelta(days=8))
    doc, _ = _publish(p, "s", payload=1, deliver_at=past)  # a past deliver_at is available now
    assert doc["status"] == "available"


def test_cancel_a_scheduled_message(tenant):
    p = tenant.principal
    doc, _ = _publish(p, "s", payload="x", deliver_at=db_now() + timedelta(hours=1))
    assert service.cancel(p, "s", None, doc["offset"])["status"] == "cancelled"
    with pytest.raises(Conflict):
        service.cancel(p, "s", None, doc["offset"])
    with pytest.raises(NotFound):
        service.cancel(p, "s", None, 999)
    assert service.list_streams(p, None)["streams"][0]["scheduled"] == 0


def test_idempotent_replays_return_the_original(tenant):
    p = tenant.principal
    first, replayed = _publish(p, "s", payload={"v": 1}, key="a", idempotency_key="order-1")
    assert not replayed
    again, replayed = _publish(p, "s", payload={"v": 2}, key="b", idempotency_key="order-1")
    assert replayed and again == first
    batch = service.publish(p, "s", None, [Outgoing(payload=3, idempotency_key="order-2"),
                                           Outgoing(payload=4, idempotency_key="order-2"),
                                           Outgoing(payload=5, idempotency_key="order-1")])
    assert [r for _, r in batch] == [False, True, True]
    assert batch[0][0] == batch[1][0] and batch[2][0] == first
    assert service.get_stream(p, "s", None)["messages"] == 2


def test_concurrent_replays_publish_once(tenant):
    p = tenant.principal
    _publish(p, "s", payload=0)
    results = []

    def go():
        results.append(_publish(p, "s", payload="x", idempotency_key="once"))

    threads = [threading.Thread(target=go) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({doc["id"] for doc, _ in results}) == 1
    assert sorted(r for _, r in results) == [False] + [True] * 5
    assert service.get_stream(p, "s", None)["messages"] == 2


def test_backlog_cap_answers_429_until_subscriptions_catch_up(tenant):
    p = tenant.principal
    service.create_stream(p, "capped", None, None, 3)
    service.create_subscription(p, "capped", None, "w", max_deliveries=5, lease_ms=30_000, start="latest")
    for i in range(3):
        _publish(p, "capped", payload=i, key="k")
    with pytest.raises(TooManyRequests):
        _publish(p, "capped", payload=3)
    [m] = service.consume(p, "capped", None, "w", max_messages=1, lease_ms=None, wait_ms=0)["messages"]
    service.ack(p, "capped", None, "w", [m["receipt"]])
    _publish(p, "capped", payload=3)  # one slot freed
    service.patch_stream(p, "capped", None, {"max_backlog": 0})
    _publish(p, "capped", payload=4)  # cap cleared


def test_retention_removes_rows_and_segments(tenant):
    p = tenant.principal
    # 3 s of retention: the fourth message must still be inside it when the sweeps run, on a loaded
    # machine too (with 1 s, a sweep that started over a second late found all four expired).
    service.create_stream(p, "short", None, "3s", None)
    service.create_subscription(p, "short", None, "w", max_deliveries=5, lease_ms=30_000, start="latest")
    for i in range(3):
        _publish(p, "short", payload=i, key="k")
    old = db_now() + timedelta(milliseconds=3100)
    wait_for_db_clock(old)
    _publish(p, "short", payload=3, key="k")
    threads = [threading.Thread(target=lifecycle.sweep_retention) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert service.get_stream(p, "short", None)["messages"] == 1
    assert list(_statuses(p, "short")) == [3]
    assert service.get_subscription(p, "short", None, "w")["pending"] == 1
    with db.transaction() as conn:
        partition = conn.execute("SELECT partition_id FROM streams WHERE tenant_id = %s", (tenant.tenant_id,)
                                 ).fetchone()[0]
        assert [e.payload for e in store.read(conn, partition, 0)] == [b"3"]
    [m] = service.consume(p, "short", None, "w", max_messages=5, lease_ms=None, wait_ms=0)["messages"]
    assert m["payload"] == 3


def test_forever_keeps_everything(tenant):
    p = tenant.principal
    service.create_stream(p, "kept", None, "forever", None)
    _publish(p, "kept", payload=1)
    lifecycle.sweep_retention()
    got = service.get_stream(p, "kept", None)
    assert (got["retention"], got["effective_retention_ms"], got["messages"]) == ("forever", None, 1)
