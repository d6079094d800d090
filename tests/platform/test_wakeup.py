"""Long-poll wake-ups: a send NOTIFYs the queue's registered waiters, and only when someone waits; the
process listens on one connection of its own for all its waiters, which hold no pooled connection."""

from __future__ import annotations

import threading
import time

from postbox import config, db, listener, wait_slots, wakeup
from postbox.queues import service


def _queue_channel(tenant, name):
    with db.transaction() as conn:
        qid = conn.execute("SELECT id FROM queues WHERE tenant_id = %s AND name = %s", (tenant.tenant_id, name))
        return f"queue_{qid.fetchone()[0]}"


def _registered(channel) -> bool:
    with db.transaction() as conn:
        return conn.execute("SELECT count(*) FROM waiters WHERE channel = %s", (channel,)).fetchone()[0] > 0


def test_a_send_wakes_a_registered_waiter(tenant):
    service.create_queue(tenant.principal, "q", {})
    channel = _queue_channel(tenant, "q")
    woken = {}
    t = threading.Thread(target=lambda: woken.setdefault("by_send", wakeup.wait([channel], 30)))
    t.start()
    deadline = time.monotonic() + 10
    while not _registered(channel) and time.monotonic() < deadline:
        time.sleep(0.02)
    service.send_messages(tenant.principal, "q", ["hello"])
    t.join(30)
    assert woken["by_send"] is True
    assert not _registered(channel)  # the waiter cleans up after itself


def test_a_wait_without_a_send_times_out_unwoken(tenant):
    service.create_queue(tenant.principal, "q", {})
    assert wakeup.wait([_queue_channel(tenant, "q")], 0.2) is False


def test_sends_to_other_queues_do_not_wake(tenant):
    service.create_queue(tenant.principal, "a", {})
    service.create_queue(tenant.principal, "b", {})
    channel = _queue_channel(tenant, "a")
    woken = {}
    t = threading.Thread(target=lambda: woken.setdefault("a", wakeup.wait([channel], 1.0)))
    t.start()
    while not _registered(channel):
        time.sleep(0.02)
    service.send_messages(tenant.principal, "b", ["not for a"])
    t.join(10)
    assert woken["a"] is False


def test_long_poll_is_woken_by_notify_not_by_its_recheck(tenant, notify_only):
    """With the re-check a minute away, only the send's NOTIFY can end this wait in time."""
    service.create_queue(tenant.principal, "q", {})
    channel = _queue_channel(tenant, "q")
    found = []
    tries = []

    def attempt():
        tries.append(1)
        return list(found), [channel]

    result = {}
    t = threading.Thread(target=lambda: result.setdefault(
        "r", wakeup.long_poll(attempt, 20, caller=wait_slots.caller(tenant.principal))))
    t.start()
    notify_only.wait_until_asleep()
    found.append("hello")
    service.send_messages(tenant.principal, "q", ["hello"])
    t.join(15)
    assert result.get("r") == ["hello"]
    assert notify_only.woken == [True]  # one sleep, ended by the send's NOTIFY
    assert len(tries) == 3  # the first try, the try once listening, the try after the wake-up


def test_long_poll_gives_up_at_its_timeout_with_the_last_result(tenant):
    service.create_queue(tenant.principal, "q", {})
    channel = _queue_channel(tenant, "q")
    caller = wait_slots.caller(tenant.principal)
    assert wakeup.long_poll(lambda: ([], [channel]), 0.3, caller=caller, recheck_s=0.1) == []
    assert not _registered(channel)


def test_one_registration_per_channel_however_many_wait_on_it(tenant):
    """The process LISTENs and registers once per channel, for all of its waiters, until the last leaves."""
    service.create_queue(tenant.principal, "q", {})
    channel = _queue_channel(tenant, "q")
    release = threading.Event()
    inside = []

    def hold():
        with listener.current().waiting([channel], time.monotonic() + 30):
            inside.append(1)
            release.wait(30)

    holders = [threading.Thread(target=hold) for _ in range(10)]
    for t in holders:
        t.start()
    _until(lambda: len(inside) == 10)
    assert _registrations(channel) == 1
    release.set()
    for t in holders:
        t.join(10)
    assert _registrations(channel) == 0


def test_waiting_requests_hold_no_pooled_connection(tenant, monkeypatch):
    """Twenty long polls wait on a pool of two, which still serves sends and reads; a send to their
    queue wakes them, and each takes one message."""
    monkeypatch.setenv("POSTBOX_POOL_MAX", "2")
    _reopen_pool()
    try:
        service.create_queue(tenant.principal, "waited", {})
        service.create_queue(tenant.principal, "busy", {})
        got = []

        def poll():
            got.append(service.read_messages(tenant.principal, "waited", 1, 30, wait_seconds=20))

        polls = [threading.Thread(target=poll) for _ in range(20)]
        for t in polls:
            t.start()
        _until(lambda: _slots(tenant) == 20)
        for i in range(5):  # the pool serves others meanwhile (a waiting request held it before)
            service.send_messages(tenant.principal, "busy", [i])
            assert [m["message"] for m in service.read_messages(tenant.principal, "busy", 1, 30)] == [i]
        sent = service.send_messages(tenant.principal, "waited", list(range(20)))
        for t in polls:
            t.join(30)
        assert sorted(m["msg_id"] for answer in got for m in answer) == sorted(sent)
        assert [len(answer) for answer in got] == [1] * 20
    finally:
        monkeypatch.undo()
        _reopen_pool()


def test_a_lost_listening_connection_comes_back_and_wakes_again(tenant, notify_only, monkeypatch):
    monkeypatch.setattr(listener, "RECONNECT_S", 0.2)
    service.create_queue(tenant.principal, "q", {})
    channel = _queue_channel(tenant, "q")
    found = []
    t = threading.Thread(target=lambda: found.append(
        service.read_messages(tenant.principal, "q", 1, 30, wait_seconds=20)))
    t.start()
    notify_only.wait_until_asleep()
    with db.connection() as conn:  # the listening session (its last statement registered the channel)
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                     " WHERE query LIKE 'INSERT INTO waiters%%' AND state = 'idle'")
    _until(lambda: _registrations(channel) == 2)  # registered again on a new connection (the old row stays
    service.send_messages(tenant.principal, "q", ["after"])  # until it runs out): a NOTIFY reaches it
    t.join(15)
    assert [m["message"] for m in found[0]] == ["after"]  # long before the minute's re-check


def _registrations(channel) -> int:
    with db.connection() as conn:
        return conn.execute("SELECT count(*) FROM waiters WHERE channel = %s AND until > clock_timestamp()",
                            (channel,)).fetchone()[0]


def _slots(tenant) -> int:
    with db.connection() as conn:
        return conn.execute("SELECT count(*) FROM wait_slots WHERE caller = %s AND until > clock_timestamp()",
                            (wait_slots.caller(tenant.principal).key,)).fetchone()[0]


def _reopen_pool():
    config.reset()
    db.close_pool()


def _until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "not in time"
        time.sleep(0.02)
