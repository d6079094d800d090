"""Streams delivery on PostgreSQL: per-key order under concurrent consumers, leases, redelivery,
nacks, dead letters, expiry while pending, and where a new subscription starts."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

from postbox import db
from postbox.keyed_streams import lifecycle, service
from postbox.keyed_streams.publishing import Outgoing
from support.clock import db_now, wait_for_db_clock


def _publish(principal, stream, items):
    return service.publish(principal, stream, None, [Outgoing(**i) for i in items])


def _sub(principal, stream, name="workers", **kw):
    options = {"max_deliveries": 5, "lease_ms": 30_000, "start": "latest", **kw}
    return service.create_subscription(principal, stream, None, name, **options)


def _consume(principal, stream, sub="workers", n=10, lease_ms=None):
    return service.consume(principal, stream, None, sub, max_messages=n, lease_ms=lease_ms, wait_ms=0)["messages"]


def test_per_key_order_under_four_concurrent_consumers(tenant):
    p = tenant.principal
    _publish(p, "orders", [{"payload": 0, "key": "warmup"}])
    _sub(p, "orders")
    keys, per_key = [f"k{i}" for i in range(8)], 25
    # Interleave keys so every key's messages are spread over the log.
    _publish(p, "orders", [{"payload": {"k": k, "seq": s}, "key": k} for s in range(per_key) for k in keys])
    _publish(p, "orders", [{"payload": {"k": None, "seq": s}} for s in range(20)])  # unkeyed: no order

    seen: dict[str, list[int]] = {k: [] for k in keys}
    unkeyed: list[int] = []
    in_flight: set[str] = set()
    guard = threading.Lock()
    violations: list[str] = []
    errors: list[BaseException] = []

    def consumer() -> None:
        idle = 0
        try:
            while idle < 5:
                got = _consume(p, "orders", n=3)
                if not got:
                    idle += 1
                    time.sleep(0.02)
                    continue
                idle = 0
                with guard:
                    for m in got:
                        k = m["key"]
                        if k is None:
                            unkeyed.append(m["offset"])
                            continue
                        if k in in_flight:
                            violations.append(f"{k} in flight twice")
                        in_flight.add(k)
                        seen[k].append(m["payload"]["seq"])
                time.sleep(0.001)
                with guard:  # released before the ack, so a later claim of the key is no false alarm
                    for m in got:
                        in_flight.discard(m["key"])
                acked = service.ack(p, "orders", None, "workers", [m["receipt"] for m in got])
                assert acked["lost"] == []
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=consumer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert not violations, violations
    for k in keys:
        assert seen[k] == list(range(per_key)), (k, seen[k])
    assert len(unkeyed) == len(set(unkeyed)) == 20
    sub = service.get_subscription(p, "orders", None, "workers")
    assert (sub["pending"], sub["in_flight"], sub["acked"], sub["dead"]) == (0, 0, 8 * 25 + 20, 0)


def test_one_key_is_never_in_flight_twice(tenant):
    p = tenant.principal
    _publish(p, "s", [{"payload": 0}])
    _sub(p, "s")
    _publish(p, "s", [{"payload": i, "key": "same"} for i in range(3)] + [{"payload": 9, "key": "other"}])
    first = _consume(p, "s", n=10)
    assert sorted((m["key"], m["payload"]) for m in first) == [("other", 9), ("same", 0)]
    assert _consume(p, "s", n=10) == []  # "same" is leased; its next message waits for the ack
    service.ack(p, "s", None, "workers", [m["receipt"] for m in first if m["key"] == "same"])
    assert [m["payload"] for m in _consume(p, "s", n=10)] == [1]


def test_redelivery_after_the_lease_expires_and_a_stale_receipt_is_lost(tenant):
    p = tenant.principal
    _publish(p, "s", [{"payload": 0}])
    _sub(p, "s", lease_ms=300)
    _publish(p, "s", [{"payload": "job", "key": "a"}])
    [first] = _consume(p, "s")
    assert first["attempt"] == 1
    assert _consume(p, "s") == []
    with db.transaction() as conn:
        until = conn.execute("SELECT lease_until FROM stream_sub_keys k JOIN stream_subscriptions s"
                             " ON s.id = k.sub_id JOIN streams t ON t.id = s.stream_id"
                             " WHERE t.tenant_id = %s", (tenant.tenant_id,)).fetchone()[0]
    wait_for_db_clock(until)
    [again] = _consume(p, "s")
    assert (again["offset"], again["attempt"]) == (first["offset"], 2)
    assert service.ack(p, "s", None, "workers", [first["receipt"]]) == {"acked": [], "lost": [first["offset"]]}
    assert service.ack(p, "s", None, "workers", [again["receipt"]]) == {"acked": [again["offset"]], "lost": []}


def test_nack_redelivers_and_dead_letters_after_max_deliveries(tenant):
    p = tenant.principal
    _publish(p, "s", [{"payload": 0}])
    _sub(p, "s", max_deliveries=2)
    _publish(p, "s", [{"payload": "poison", "key": "a"}, {"payload": "next", "key": "a"}])
    for attempt in (1, 2):
        [m] = _consume(p, "s")
        assert (m["payload"], m["attempt"]) == ("poison", attempt)
        assert service.nack(p, "s", None, "workers", [m["receipt"]], 0)["released"] == [m["offset"]]
    [m] = _consume(p, "s")
    assert m["payload"] == "next"  # the poison message went dead and the key moved on
    sub = service.get_subscription(p, "s", None, "workers")
    assert (sub["dead"], sub["pending"]) == (1, 1)
    dead = service.dead_letters(p, "s", None, "workers", limit=10, before_offset=None)["messages"]
    assert [(d["payload"], d["attempts"]) for d in dead] == [("poison", 2)]


def test_nack_with_a_delay_holds_the_key_back(tenant):
    p = tenant.principal
    _publish(p, "s", [{"payload": 0}])
    _sub(p, "s")
    _publish(p, "s", [{"payload": 1, "key": "a"}, {"payload": 2, "key": "b"}])
    got = _consume(p, "s")
    a = next(m for m in got if m["key"] == "a")
    service.nack(p, "s", None, "workers", [a["receipt"]], 60_000)
    service.ack(p, "s", None, "workers", [m["receipt"] for m in got if m["key"] == "b"])
    assert _consume(p, "s") == []


def test_expired_messages_leave_the_subscriptions(tenant):
    p = tenant.principal
    _publish(p, "s", [{"payload": 0}])
    _sub(p, "s")
    expires = db_now() + timedelta(milliseconds=500)
    _publish(p, "s", [{"payload": "soon", "key": "a", "expires_at": expires}, {"payload": "stays", "key": "b"}])
    wait_for_db_clock(expires)
    assert [m["payload"] for m in _consume(p, "s")] == ["stays"]
    assert service.get_subscription(p, "s", None, "workers")["pending"] == 1


def test_a_subscription_starts_at_the_latest_message_unless_told_earliest(tenant):
    p = tenant.principal
    _publish(p, "s", [{"payload": i, "key": "a"} for i in range(3)])
    _sub(p, "s", "late")
    _sub(p, "s", "early", start="earliest")
    assert _consume(p, "s", "late") == []
    assert [m["payload"] for m in _consume(p, "s", "early")] == [0]
    assert service.get_subscription(p, "s", None, "early")["pending"] == 3


def test_promotion_feeds_subscriptions_once_even_when_sweeps_overlap(tenant):
    p = tenant.principal
    _publish(p, "s", [{"payload": 0}])
    _sub(p, "s")
    due = db_now() + timedelta(milliseconds=300)
    _publish(p, "s", [{"payload": i, "key": f"k{i % 5}", "deliver_at": due} for i in range(60)])
    wait_for_db_clock(due)
    threads = [threading.Thread(target=lifecycle.sweep_schedules, kwargs={"batch": 7}) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert service.get_subscription(p, "s", None, "workers")["pending"] == 60
    listed = service.list_streams(p, None)["streams"][0]
    assert (listed["scheduled"], listed["messages"], listed["active_keys"]) == (0, 61, 5)


def test_publishers_and_consumers_at_once_lose_and_double_nothing(tenant):
    p = tenant.principal
    _publish(p, "live", [{"payload": 0, "key": "warmup"}])
    _sub(p, "live")
    producers, keys_each, per_key = 2, 3, 15
    expected = {f"p{w}k{k}": list(range(per_key)) for w in range(producers) for k in range(keys_each)}
    seen: dict[str, list[int]] = {k: [] for k in expected}
    guard, done, errors = threading.Lock(), threading.Event(), []

    def producer(w: int) -> None:
        try:
            for s in range(per_key):
                for k in range(keys_each):
                    _publish(p, "live", [{"payload": {"seq": s}, "key": f"p{w}k{k}"}])
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    def consumer() -> None:
        try:
            while True:
                got = _consume(p, "live", n=4)
                if not got:
                    if done.is_set():
                        return
                    time.sleep(0.01)
                    continue
                with guard:
                    for m in got:
                        if m["key"] in seen:
                            seen[m["key"]].append(m["payload"]["seq"])
                assert service.ack(p, "live", None, "workers", [m["receipt"] for m in got])["lost"] == []
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    pthreads = [threading.Thread(target=producer, args=(w,)) for w in range(producers)]
    cthreads = [threading.Thread(target=consumer) for _ in range(4)]
    for t in pthreads + cthreads:
        t.start()
    for t in pthreads:
        t.join(timeout=120)
    done.set()
    for t in cthreads:
        t.join(timeout=120)
    assert not errors, errors
    assert seen == expected
    sub = service.get_subscription(p, "live", None, "workers")
    assert (sub["pending"], sub["acked"]) == (0, producers * keys_each * per_key)  # warmup predates it


def test_an_unacked_message_goes_dead_when_its_leases_run_out(tenant):
    p = tenant.principal
    _publish(p, "s", [{"payload": 0}])
    _sub(p, "s", max_deliveries=1, lease_ms=200)
    _publish(p, "s", [{"payload": "stuck", "key": "a"}, {"payload": "after", "key": "a"}])
    [m] = _consume(p, "s")
    assert m["payload"] == "stuck"
    with db.transaction() as conn:
        until = conn.execute("SELECT clock_timestamp() + interval '200 milliseconds'").fetchone()[0]
    wait_for_db_clock(until)
    assert [x["payload"] for x in _consume(p, "s")] == ["after"]
    assert service.get_subscription(p, "s", None, "workers")["dead"] == 1
