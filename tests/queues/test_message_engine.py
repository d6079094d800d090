"""The message engine on real PostgreSQL: claims, counters, and no message lost or doubled."""

from __future__ import annotations

import threading
from collections import Counter

from postbox import db
from postbox.queues import engine, service


def _queue(tenant, name="q", **settings):
    service.create_queue(tenant.principal, name, settings)
    with db.transaction() as conn:
        row = conn.execute("SELECT id, visibility_timeout_sec, max_reads, dead_letter_queue_id FROM queues"
                           " WHERE tenant_id = %s AND name = %s", (tenant.tenant_id, name)).fetchone()
    return engine.QueueRef(*row)


def test_four_threads_read_and_archive_20000_messages_each_exactly_once(tenant):
    ref = _queue(tenant)
    sent = []
    for start in range(0, 20_000, 100):
        sent += service.send_messages(tenant.principal, "q", list(range(start, start + 100)))
    assert len(set(sent)) == 20_000
    got: Counter[int] = Counter()
    lock = threading.Lock()
    errors = []

    def worker():
        try:
            while True:
                with db.transaction() as conn:
                    batch = engine.read(conn, ref, 100, 60)
                if not batch:
                    return
                ids = [m.msg_id for m in batch]
                with db.transaction() as conn:
                    archived = engine.archive(conn, ref.id, ids)
                assert archived == sorted(ids)
                with lock:
                    got.update(ids)
        except Exception as e:  # surfaced below: a thread's assertion must fail the test
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert set(got) == set(sent) and max(got.values()) == 1 and sum(got.values()) == 20_000
    metrics = service.queue_metrics(tenant.principal, "q")
    assert metrics["queue_length"] == 0 and metrics["archived"] == 20_000 and metrics["total_messages"] == 20_000


def test_concurrent_senders_keep_counters_exact(tenant):
    _queue(tenant)

    def sender():
        for _ in range(20):
            service.send_messages(tenant.principal, "q", [{"x": 1}] * 50)

    threads = [threading.Thread(target=sender) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    q = service.get_queue(tenant.principal, "q")
    assert q["sent_total"] == 4000 and q["queue_length"] == 4000 and q["metrics"]["visible"] == 4000
    assert q["stored_bytes"] == 4000 * len('{"x":1}')


def test_read_claims_in_msg_id_order_and_skips_locked_rows(tenant):
    ref = _queue(tenant)
    ids = service.send_messages(tenant.principal, "q", list(range(10)))
    with db.transaction() as holder:
        first = engine.read(holder, ref, 3, 30)
        assert [m.msg_id for m in first] == ids[:3]
        # While the first claim is uncommitted, a second reader skips those rows instead of waiting.
        with db.transaction() as other:
            second = engine.read(other, ref, 3, 30)
        assert [m.msg_id for m in second] == ids[3:6]


def test_pop_is_at_most_once(tenant):
    ref = _queue(tenant)
    service.send_messages(tenant.principal, "q", [1, 2, 3])
    with db.transaction() as conn:
        assert [m.message for m in engine.pop(conn, ref.id, 2)] == [1, 2]
    with db.transaction() as conn:
        assert [m.message for m in engine.pop(conn, ref.id, 5)] == [3]
        assert engine.pop(conn, ref.id, 5) == []


def test_dead_letter_keeps_the_message_id_and_counts_both_queues(tenant):
    _queue(tenant, "dlq")
    ref = _queue(tenant, "q", max_reads=1, dead_letter_queue="dlq")
    [msg_id] = service.send_messages(tenant.principal, "q", ["poison"])
    with db.transaction() as conn:
        assert len(engine.read(conn, ref, 1, 0)) == 1
    with db.transaction() as conn:
        assert engine.read(conn, ref, 1, 0) == []
    dlq = service.get_queue(tenant.principal, "dlq")
    src = service.get_queue(tenant.principal, "q")
    assert dlq["queue_length"] == 1 and dlq["sent_total"] == 1
    assert src["queue_length"] == 0 and src["dead_total"] == 1
    [waiting] = service.browse_messages(tenant.principal, "dlq", "waiting", 10, None)["messages"]
    assert waiting["msg_id"] == msg_id and waiting["dead_lettered"] is True
