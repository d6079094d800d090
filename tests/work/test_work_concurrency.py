"""The work surface under threads: every message claimed and completed exactly once."""

from __future__ import annotations

import threading
from collections import Counter

from postbox import db
from postbox.work import messages, queues, scopes


def test_four_consumers_drain_20000_messages_each_exactly_once(tenant):
    s = scopes.create_scope(tenant.principal, {"slug": "load"})
    q = queues.create_queue(tenant.principal, s["id"], {"slug": "jobs", "ordering": "priority"})
    with db.connection() as conn:  # 20,000 publishes through the publish function, in one statement
        conn.execute(
            "SELECT work_publish(%s, %s, %s, jsonb_build_object('body', i, 'priority',"
            " jsonb_build_object('tier', (ARRAY['critical','high','normal','low','background'])[1 + i %% 5],"
            " 'score', i %% 1001)), 'test') FROM generate_series(1, 20000) i",
            (tenant.tenant_id, s["id"], q["id"]),
        )
    got: Counter[int] = Counter()
    lock = threading.Lock()
    errors: list[BaseException] = []

    def consumer() -> None:
        try:
            while True:
                batch = messages.claim(tenant.principal, s["id"], q["id"], 100, 60)
                if not batch:
                    return
                items = [{"id": m["id"], "claim_token": m["claim_token"]} for m in batch]
                done = messages.finish_batch(tenant.principal, s["id"], "complete", items)
                assert all(d["ok"] for d in done)
                with lock:
                    got.update(m["body"] for m in batch)
        except BaseException as e:  # surfaced below: a thread's failure must fail the test
            errors.append(e)

    threads = [threading.Thread(target=consumer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert set(got) == set(range(1, 20001)) and max(got.values()) == 1
    st = queues.stats(tenant.principal, s["id"], q["id"])
    assert st["depth_current"] == 0 and st["completed_total"] == 20000 and st["published_total"] == 20000
    events = queues.stats(tenant.principal, s["id"], s["system_queues"]["_events"])
    assert events["depth_pending"] == 20000


def test_concurrent_publishes_never_overshoot_max_depth(tenant):
    s = scopes.create_scope(tenant.principal, {"slug": "bounded"})
    q = queues.create_queue(tenant.principal, s["id"], {"slug": "jobs", "max_depth": 50})
    accepted = Counter()
    lock = threading.Lock()

    def producer() -> None:
        for i in range(30):
            try:
                messages.publish(tenant.principal, s["id"], q["id"], {"body": i})
                with lock:
                    accepted["ok"] += 1
            except Exception as e:
                with lock:
                    accepted[getattr(e, "code", "other")] += 1

    threads = [threading.Thread(target=producer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert accepted == Counter({"ok": 50, "SCAIQUEUE_QUEUE_FULL": 70})
    assert queues.stats(tenant.principal, s["id"], q["id"])["depth_pending"] == 50
