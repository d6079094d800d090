"""Partitioned queues on real PostgreSQL: order, leases, groups, retries, DLQ, transactions."""

from __future__ import annotations

import threading
import time

import pytest

from postbox import db
from postbox.errors import Conflict, Invalid, NotFound
from postbox.partitioned import consume, maintenance, payloads, service
from postbox.partitioned.consume import Ack
from postbox.partitioned.produce import MAX_PAYLOAD_BYTES, Item
from postbox.partitioned.service import PopRequest


def _push(principal, queue, payloads_, partition="Default", **kw):
    return service.push(principal, [Item(queue, p, partition, **kw) for p in payloads_])


def _pop(principal, queue, **kw):
    return service.pop(principal, PopRequest(queue, **kw))


def _ack_all(principal, messages, status="completed"):
    return service.ack(principal, [Ack(m["leaseId"], status, m["transactionId"], m["partitionId"])
                                   for m in messages])


def test_push_creates_queue_and_partition_and_pop_returns_the_message_shape(tenant):
    p = tenant.principal
    pushed = _push(p, "orders", [{"n": 1}, {"n": 2}])
    assert [r["status"] for r in pushed] == ["queued", "queued"] and [r["offset"] for r in pushed] == [0, 1]
    got = _pop(p, "orders", batch=10)
    assert [m["data"] for m in got] == [{"n": 1}, {"n": 2}] and got[0]["payload"] == {"n": 1}
    m = got[0]
    assert m["partition"] == "Default" and m["leaseId"] and m["transactionId"] == pushed[0]["transactionId"]
    assert m["partitionId"] == pushed[0]["partitionId"] and m["createdAt"].endswith("Z")
    assert m["consumerGroup"] is None


def test_duplicate_transaction_ids_are_reported_not_stored_twice(tenant):
    p = tenant.principal
    first = service.push(p, [Item("q", 1, transaction_id="t1"), Item("q", 2, transaction_id="t2")])
    again = service.push(p, [Item("q", 9, transaction_id="t1"), Item("q", 3, transaction_id="t3")])
    assert [r["status"] for r in again] == ["duplicate", "queued"]
    assert again[0]["offset"] == first[0]["offset"]
    # the same transaction id in another partition is a different message
    other = service.push(p, [Item("q", 1, "P2", transaction_id="t1")])
    assert other[0]["status"] == "queued"
    assert [m["data"] for m in _pop(p, "q", partition="Default", batch=10)] == [1, 2, 3]


def test_order_within_a_partition_under_concurrent_pushers(tenant):
    p = tenant.principal
    per_pusher, pushers = 200, 4

    errors = []

    def pusher(k):
        try:
            for start in range(0, per_pusher, 20):
                service.push(p, [Item("ord", {"k": k, "i": i}, f"P{i % 2}") for i in range(start, start + 20)])
        except Exception as e:  # a push that failed is this test's failure, not a missing offset
            errors.append(e)

    threads = [threading.Thread(target=pusher, args=(k,)) for k in range(pushers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for part in ("P0", "P1"):
        seen = []
        while batch := _pop(p, "ord", partition=part, batch=1000, auto_ack=True):
            seen += batch
        assert [m["offset"] for m in seen] == list(range(pushers * per_pusher // 2))
        for k in range(pushers):  # each pusher's messages keep its order
            mine = [m["data"]["i"] for m in seen if m["data"]["k"] == k]
            assert mine == sorted(mine) and len(mine) == per_pusher // 2


def test_one_lease_per_partition_and_group_and_expiry_redelivers(tenant):
    p = tenant.principal
    service.configure(p, "lq", {"leaseTime": 1})
    _push(p, "lq", list(range(5)))
    first = _pop(p, "lq", batch=2)
    assert [m["data"] for m in first] == [0, 1]
    assert _pop(p, "lq", batch=2) == []  # the partition is leased to someone else
    assert _pop(p, "lq", batch=2, consumer_group="other")  # another group is independent
    time.sleep(1.2)
    again = _pop(p, "lq", batch=2)
    assert [m["data"] for m in again] == [0, 1] and again[0]["leaseId"] != first[0]["leaseId"]
    assert again[0]["retryCount"] == 1
    with pytest.raises(Conflict):  # the expired lease is refused and changes nothing
        _ack_all(p, first)
    _ack_all(p, again)
    assert [m["data"] for m in _pop(p, "lq", batch=10)] == [2, 3, 4]


def test_concurrent_pops_on_one_partition_never_share_a_batch(tenant):
    p = tenant.principal
    _push(p, "ex", list(range(300)))
    seen, lock = [], threading.Lock()

    def consumer():
        while True:
            got = _pop(p, "ex", batch=7)
            if not got:
                if len(seen) >= 300:
                    return
                continue
            with lock:
                seen.extend(m["data"] for m in got)
            _ack_all(p, got)

    threads = [threading.Thread(target=consumer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == list(range(300))  # strict order: one lease at a time


def test_two_consumer_groups_each_get_every_message(tenant):
    p = tenant.principal
    for part in ("a", "b", "c"):
        _push(p, "g", [f"{part}{i}" for i in range(30)], partition=part)
    for group in ("analytics", "billing"):
        got = []
        while batch := _pop(p, "g", batch=8, consumer_group=group):
            got += [m["data"] for m in batch]
            _ack_all(p, batch)
        assert sorted(got) == sorted(f"{x}{i}" for x in "abc" for i in range(30))


def test_subscription_new_and_from_a_time(tenant):
    p = tenant.principal
    _push(p, "s", ["old1", "old2"])
    assert _pop(p, "s", consumer_group="fresh", start="new") == []
    with db.transaction() as conn:
        mark = conn.execute("SELECT clock_timestamp()").fetchone()[0]
    _push(p, "s", ["new1"])
    assert [m["data"] for m in _pop(p, "s", consumer_group="fresh", start="new", batch=5)] == ["new1"]
    assert [m["data"] for m in _pop(p, "s", consumer_group="since", start=mark, batch=5)] == ["new1"]
    assert [m["data"] for m in _pop(p, "s", consumer_group="everything", batch=5)] == ["old1", "old2", "new1"]
    # a partition created after a 'new' group joined is read from its start
    _push(p, "s", ["later"], partition="P2")
    assert [m["data"] for m in _pop(p, "s", consumer_group="fresh", partition="P2", batch=5)] == ["later"]


def test_ack_by_transaction_commits_up_to_that_message_and_releases_at_the_end(tenant):
    p = tenant.principal
    _push(p, "pa", list(range(4)))
    got = _pop(p, "pa", batch=4)
    res = service.ack(p, [Ack(got[1]["leaseId"], "completed", got[1]["transactionId"])])
    assert res[0]["leaseReleased"] is False
    service.ack(p, [Ack(got[0]["leaseId"], "completed", got[0]["transactionId"])])  # already committed: no-op
    assert _pop(p, "pa", batch=4) == []  # still leased
    res = service.ack(p, [Ack(got[3]["leaseId"], "completed", got[3]["transactionId"])])
    assert res[0]["leaseReleased"] is True
    assert _pop(p, "pa", batch=4) == []  # all consumed
    with pytest.raises(Conflict):
        service.ack(p, [Ack(got[3]["leaseId"], "completed", got[3]["transactionId"])])


def test_failed_ack_retries_after_delay_then_dead_letters_and_moves_on(tenant):
    p = tenant.principal
    service.configure(p, "r", {"retryLimit": 2, "retryDelay": 0})
    _push(p, "r", ["poison", "ok"], partition="A")
    for attempt in range(3):
        got = _pop(p, "r", batch=1)
        assert got[0]["data"] == "poison" and got[0]["retryCount"] == attempt
        res = service.ack(p, [Ack(got[0]["leaseId"], "failed", got[0]["transactionId"], error="boom")])
        assert res[0]["dlq"] is (attempt == 2)
    assert [m["data"] for m in _pop(p, "r", batch=5)] == ["ok"]
    dead = service.dead_letters(p, "r", None, None, 10, 0)
    assert dead["total"] == 1 and dead["messages"][0]["data"] == "poison"
    assert dead["messages"][0]["errorMessage"] == "boom" and dead["messages"][0]["retryCount"] == 2
    replayed = service.replay(p, [int(dead["messages"][0]["id"])])
    assert replayed["replayed"] == 1
    assert service.dead_letters(p, "r", None, None, 10, 0)["total"] == 0
    with pytest.raises(NotFound):
        service.replay(p, [int(dead["messages"][0]["id"])])


def test_retry_delay_holds_the_batch_back(tenant):
    p = tenant.principal
    service.configure(p, "rd", {"retryDelay": 60_000})
    _push(p, "rd", ["x"])
    got = _pop(p, "rd")
    service.ack(p, [Ack(got[0]["leaseId"], "failed")])
    assert _pop(p, "rd") == []


def test_transaction_is_atomic_a_failing_push_rolls_back_the_ack(tenant):
    p = tenant.principal
    _push(p, "src", [1, 2])
    got = _pop(p, "src", batch=2)
    ack = Ack(got[0]["leaseId"], "completed", got[1]["transactionId"], got[0]["partitionId"])
    with pytest.raises(Invalid):
        service.transaction(p, [ack, [Item("sink", {"ok": 1})], [Item("bad queue name!", 1)]])
    with pytest.raises(NotFound):
        service.queue_resource(p, "sink")  # the sink was never created
    assert _pop(p, "src", batch=2) == []  # still leased: the ack rolled back
    results = service.transaction(p, [ack, [Item("sink", {"ok": 1})]])
    assert results[0]["type"] == "ack" and results[1]["results"][0]["status"] == "queued"
    assert [m["data"] for m in _pop(p, "sink")] == [{"ok": 1}]


def test_cycle_form_ack_lease_partial_count_keeps_the_lease(tenant):
    p = tenant.principal
    _push(p, "cy", list(range(5)))
    got = _pop(p, "cy", batch=5)
    lease = got[0]["leaseId"]
    with db.transaction() as conn:
        out = consume.ack_lease(conn, p.tenant_id, lease, release=False, count=2)
    assert out == {"success": True, "count": 2, "lease_released": False, "dlq": False}
    with db.transaction() as conn:
        out = consume.ack_lease(conn, p.tenant_id, lease, status="nope")
    assert out["count"] == 0 and out["lease_released"] is True
    assert [m["data"] for m in _pop(p, "cy", batch=5)] == [2, 3, 4]


def test_foreign_lease_and_queue_are_refused(tenant, make_tenant):
    p, other = tenant.principal, make_tenant().principal
    _push(p, "mine", [1])
    got = _pop(p, "mine")
    assert _pop(other, "mine") == []  # another tenant's queue is as empty as a missing one
    with pytest.raises(NotFound):  # another tenant's partition is missing
        service.ack(other, [Ack(got[0]["leaseId"], "completed", got[0]["transactionId"], got[0]["partitionId"])])
    with pytest.raises(Conflict):
        service.ack(other, [Ack(got[0]["leaseId"])])
    with pytest.raises(Conflict):
        service.extend(other, got[0]["leaseId"], 30)
    assert _pop(p, "mine", partition="nope") == []  # a partition that does not exist yet is empty
    assert service.extend(p, got[0]["leaseId"], 600)["leaseId"] == got[0]["leaseId"]
    _ack_all(p, got)


def test_delayed_processing_holds_new_messages(tenant):
    p = tenant.principal
    service.configure(p, "d", {"delayedProcessing": 3600})
    _push(p, "d", [1])
    assert _pop(p, "d") == []


def test_encrypted_queue_stores_ciphertext_and_returns_plaintext(tenant):
    payloads.reset()
    p = tenant.principal
    service.configure(p, "enc", {"encryptionEnabled": True})
    _push(p, "enc", [{"secret": "s3cr3t-value"}])
    with db.transaction() as conn:
        raw = conn.execute(
            "SELECT frames FROM log_segments s JOIN log_partitions lp ON lp.id = s.partition_id"
            " JOIN pq_queues q ON q.id = lp.owner_id AND lp.owner_kind = 'pq' WHERE q.tenant_id = %s",
            (p.tenant_id,)).fetchone()[0]
    assert b"s3cr3t-value" not in bytes(raw)
    assert _pop(p, "enc")[0]["data"] == {"secret": "s3cr3t-value"}


def test_long_poll_wakes_on_push(tenant, notify_only):
    p = tenant.principal
    service.configure(p, "lp", {})
    got = []
    t = threading.Thread(target=lambda: got.extend(_pop(p, "lp", wait=True, timeout_ms=2500)))
    t.start()
    notify_only.wait_until_asleep()
    _push(p, "lp", ["hello"])
    t.join()
    assert [m["data"] for m in got] == ["hello"]
    assert notify_only.woken == [True]


def test_agent_sweeps_expired_leases_and_retention_safely_when_overlapping(tenant):
    p = tenant.principal
    service.configure(p, "ag", {"leaseTime": 1, "retryLimit": 0, "retentionSeconds": 1})
    _push(p, "ag", ["a", "b"])
    _pop(p, "ag", batch=2)
    time.sleep(1.2)
    results = []
    threads = [threading.Thread(target=lambda: results.append(maintenance.sweep_leases())) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r["deadLettered"] for r in results) >= 1
    assert service.dead_letters(p, "ag", None, None, 10, 0)["total"] == 2  # once, not twice
    removed = []
    threads = [threading.Thread(target=lambda: removed.append(maintenance.sweep_retention())) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    _push(p, "ag", ["c"])
    assert [m["data"] for m in _pop(p, "ag", batch=5)] == ["c"]


def test_bad_input_is_invalid(tenant):
    p = tenant.principal
    with pytest.raises(Invalid):
        service.push(p, [])
    with pytest.raises(Invalid):
        service.push(p, [Item("ok", 1, "a/b")])
    _push(p, "ok", [1])
    with pytest.raises(Invalid):
        _pop(p, "ok", batch=0)
    with pytest.raises(Invalid):
        service.configure(p, "ok", {"nonsense": 1})



def test_cursor_reads_match_the_store_across_segments_compression_and_retention(tenant):
    from postbox.log_engine import cursors, store
    from postbox.log_engine.frames import Record

    with db.transaction() as conn:
        part = store.ensure_partition(conn, tenant.tenant_id, "test-cursors", 1, "p")
        for size in (1, 7, 300, 2, 50):  # raw and zstd segments of different sizes
            store.append(conn, part.id, [Record(f"m{i}".encode() * (1 + i % 40), id=f"id{i}", key="k",
                                                headers=b"h" if i % 2 else None) for i in range(size)])
    with db.transaction() as conn:
        for start, count, until in ((0, 1000, None), (3, 5, None), (8, 1, None), (8, 300, 200), (359, 5, None),
                                    (360, 5, None), (100, 0, None)):
            assert cursors.read_window(conn, part.id, start, count, until) == store.read(
                conn, part.id, start, max_records=count, until_offset=until) if count else True
        store.drop_before(conn, part.id, 8)  # the first two segments go
        assert cursors.read_window(conn, part.id, 0, 3) == store.read(conn, part.id, 0, max_records=3)
        assert [e.offset for e in cursors.read_window(conn, part.id, 0, 3)] == [8, 9, 10]


def test_transaction_with_a_stale_lease_rolls_back_its_pushes(tenant):
    p = tenant.principal
    _push(p, "tsrc", [1])
    got = _pop(p, "tsrc")
    _ack_all(p, got)
    with pytest.raises(Conflict):
        service.transaction(p, [[Item("tsink", 1)], Ack(got[0]["leaseId"], "completed", got[0]["transactionId"])])
    with pytest.raises(NotFound):
        service.queue_resource(p, "tsink")  # never created


def test_a_transactions_pushes_answer_per_operation_whatever_their_order(tenant):
    """A transaction's pushes are made as one (their partitions locked in one order), yet each
    operation answers for its own items, indexed and refused as its own, in the order given."""
    p = tenant.principal
    _push(p, "tx", [0])
    got = _pop(p, "tx")
    ack = Ack(got[0]["leaseId"], "completed", got[0]["transactionId"], got[0]["partitionId"])
    later, earlier = [Item("tx", "b1", "p2"), Item("tx", "b2", "p1")], [Item("tx", "a1", "p1"), Item("tx", "a2", "p2")]
    results = service.transaction(p, [[*later], ack, [*earlier], [Item("tx", "c", "p1", transaction_id="t1"),
                                                                  Item("tx", "c", "p1", transaction_id="t1")]])
    assert [r["type"] for r in results] == ["push", "ack", "push", "push"]
    assert [[x["index"] for x in r["results"]] for r in results if r["type"] == "push"] == [[0, 1], [0, 1], [0, 1]]
    offset = dict(zip(["b1", "b2", "a1", "a2"], [x["offset"] for x in results[0]["results"] + results[2]["results"]],
                      strict=True))
    assert offset["b2"] < offset["a1"] and offset["b1"] < offset["a2"]  # each partition in the order given
    assert [x["status"] for x in results[3]["results"]] == ["queued", "duplicate"]
    with pytest.raises(Invalid) as refused:
        service.transaction(p, [[Item("tx", 1)], [Item("tx", 2), Item("tx", 3, transaction_id="")]])
    assert refused.value.message.startswith("items[1].transactionId")


def test_oversized_payload_is_413_and_nothing_is_stored(tenant):
    from postbox.errors import TooLarge

    with pytest.raises(TooLarge):
        service.push(tenant.principal, [Item("big", "x"), Item("big", "y" * MAX_PAYLOAD_BYTES)])
    with pytest.raises(NotFound):
        service.queue_resource(tenant.principal, "big")


def test_encryption_without_a_key_on_lambda_is_unavailable(monkeypatch):
    from postbox.errors import Unavailable

    monkeypatch.delenv("POSTBOX_ENCRYPTION_KEY", raising=False)
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "partitioned")
    payloads.reset()
    try:
        with pytest.raises(Unavailable):
            payloads.seal(b"x")
        monkeypatch.setenv("POSTBOX_ENCRYPTION_KEY", payloads.dev_key_b64())
        payloads.reset()
        assert payloads.open_envelope(payloads.seal(b"x")) == b"x"
    finally:
        payloads.reset()


def test_the_agent_handler_runs_both_sweeps(database_url):
    from functions.agents.partitioned_maintenance import handler
    from functions.local.lambda_context import LocalContext

    out = handler({}, LocalContext("partitioned-maintenance"))
    assert set(out) == {"released", "deadLettered", "retentionRemoved"}


def test_cycle_form_ack_lease_commits_the_whole_batch_and_refuses_a_stale_lease(tenant):
    p = tenant.principal
    _push(p, "cw", list(range(3)))
    got = _pop(p, "cw", batch=3)
    with db.transaction() as conn:
        out = consume.ack_lease(conn, p.tenant_id, got[0]["leaseId"], partition_id=got[0]["partitionId"],
                                consumer_group="__QUEUE_MODE__")
    assert out == {"success": True, "count": 3, "lease_released": True, "dlq": False}
    with pytest.raises(Conflict), db.transaction() as conn:
        consume.ack_lease(conn, p.tenant_id, got[0]["leaseId"])
    with pytest.raises(NotFound), db.transaction() as conn:
        consume.ack_lease(conn, p.tenant_id, got[0]["leaseId"], partition_id="999999999")


def test_a_failing_group_does_not_hold_back_another(tenant):
    p = tenant.principal
    service.configure(p, "iso", {"retryLimit": 0})
    _push(p, "iso", ["a", "b"])
    bad = _pop(p, "iso", batch=2, consumer_group="flaky")
    assert service.ack(p, [Ack(bad[0]["leaseId"], "failed")])[0]["dlq"] is True
    assert [m["data"] for m in _pop(p, "iso", batch=5, consumer_group="steady")] == ["a", "b"]
    dead = service.dead_letters(p, "iso", None, "flaky", 10, 0)
    assert dead["total"] == 2 and {m["consumerGroup"] for m in dead["messages"]} == {"flaky"}
    assert service.dead_letters(p, "iso", None, "steady", 10, 0)["total"] == 0


def test_completed_retention_drops_only_what_every_group_consumed(tenant):
    p = tenant.principal
    service.configure(p, "cr", {"completedRetentionSeconds": 1})
    _push(p, "cr", ["old1"])
    _push(p, "cr", ["old2"])
    _ack_all(p, _pop(p, "cr", batch=1))  # the default group consumed the first segment only
    assert _pop(p, "cr", batch=1, consumer_group="late", start="new") == []  # a group that starts at the end
    time.sleep(1.2)
    maintenance.sweep_retention()
    with db.transaction() as conn:
        left = conn.execute(
            "SELECT s.first_offset FROM log_segments s JOIN log_partitions lp ON lp.id = s.partition_id"
            " JOIN pq_queues q ON q.id = lp.owner_id AND lp.owner_kind = 'pq' WHERE q.tenant_id = %s"
            " ORDER BY 1", (p.tenant_id,)).fetchall()
    assert left == [(1,)]  # the consumed segment went, the unconsumed one stayed
    assert [m["data"] for m in _pop(p, "cr", batch=5)] == ["old2"]
