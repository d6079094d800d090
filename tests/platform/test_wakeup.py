"""Long-poll wake-ups: a send NOTIFYs the queue's registered waiters, and only when someone waits."""

from __future__ import annotations

import threading
import time

from postbox import db, wakeup
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
    t = threading.Thread(target=lambda: result.setdefault("r", wakeup.long_poll(attempt, 20)))
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
    assert wakeup.long_poll(lambda: ([], [channel]), 0.3, recheck_s=0.1) == []
    assert not _registered(channel)
