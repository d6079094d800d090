"""What Queen's client relies on, at the domain layer: ordered ids, duplicates answering the stored id,
pops of missing queues, multi-partition pops, acks without a lease, `dlq` acks, required leases, and
the whole-queue and whole-group operations."""

from __future__ import annotations

import threading
import uuid

import pytest

from postbox.errors import Conflict, NotFound
from postbox.partitioned import reads, service
from postbox.partitioned.consume import Ack
from postbox.partitioned.produce import Item, uuid7s
from postbox.partitioned.service import PopRequest


def _push(p, queue, values, partition="Default"):
    return service.push(p, [Item(queue, v, partition) for v in values])


def test_ids_are_uuid7_and_sort_in_the_order_they_are_made_across_threads():
    made: list[list[str]] = []

    def make():
        made.append([i for _ in range(200) for i in uuid7s(5)])

    threads = [threading.Thread(target=make) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for ids in made:
        assert ids == sorted(ids)  # each thread's ids: in the order it made them
        assert all(uuid.UUID(i).version == 7 and uuid.UUID(i).variant == uuid.RFC_4122 for i in ids)
    every = [i for ids in made for i in ids]
    assert len(set(every)) == len(every) == 4000


def test_ids_keep_their_order_when_the_clock_steps_back_and_across_a_48_bit_carry(monkeypatch):
    from postbox.partitioned import produce

    ahead = produce.uuid7s(1)[0]
    last = produce._last[0] + 10_000_000  # the clock is now behind the last id: its millisecond is kept
    monkeypatch.setattr(produce, "_last", [last, (1 << 48) * 5 - 3])
    ids = produce.uuid7s(6) + produce.uuid7s(2)
    assert ids == sorted(ids) and len(set(ids)) == 8 and ahead < ids[0]
    assert ids[2].endswith("-ffffffffffff") and ids[3].endswith("-000000000000")
    assert all(uuid.UUID(i).version == 7 and uuid.UUID(i).variant == uuid.RFC_4122 for i in ids)


def test_pushed_ids_sort_in_push_order_within_a_partition(tenant):
    p = tenant.principal
    pushed = [r["messageId"] for _ in range(20) for r in _push(p, "ordered", list(range(10)))]
    assert pushed == sorted(pushed)
    popped = service.pop(p, PopRequest("ordered", batch=1000))
    assert [m["id"] for m in popped] == pushed


def test_a_duplicate_answers_the_stored_message_id(tenant):
    p = tenant.principal
    first = service.push(p, [Item("dups", 1, transaction_id="t1")])[0]
    again = service.push(p, [Item("dups", 2, transaction_id="t1"), Item("dups", 3, transaction_id="t2"),
                             Item("dups", 4, transaction_id="t2")])
    assert [r["status"] for r in again] == ["duplicate", "queued", "duplicate"]
    assert again[0]["messageId"] == first["messageId"] and again[0]["offset"] == first["offset"]
    assert again[2]["messageId"] == again[1]["messageId"]  # a repeat within the call: its first copy's


def test_pop_of_a_queue_or_partition_not_there_is_empty_and_a_waiting_pop_sees_its_first_push(tenant):
    p = tenant.principal
    assert service.pop(p, PopRequest("nowhere")) == []
    assert service.pop(p, PopRequest("nowhere", partition="p")) == []
    got: list = []
    waiter = threading.Thread(target=lambda: got.extend(
        service.pop(p, PopRequest("soon", partition="p", wait=True, timeout_ms=8000))))
    waiter.start()
    threading.Event().wait(0.3)
    _push(p, "soon", ["hello"], partition="p")
    waiter.join(10)
    assert [m["data"] for m in got] == ["hello"]


def test_a_pop_over_several_partitions_shares_its_batch(tenant):
    p = tenant.principal
    for name in ("a", "b", "c"):
        _push(p, "sweep", [f"{name}{n}" for n in range(4)], partition=name)
    got = service.pop(p, PopRequest("sweep", batch=6, partitions=3))
    assert len(got) == 6
    by_partition = {m["partition"]: m["leaseId"] for m in got}
    assert len(by_partition) == 2 and len(set(by_partition.values())) == 1  # one lease over both, as Queen's
    rest = service.pop(p, PopRequest("sweep", batch=100, partitions=3))
    assert len(rest) == 4 and {m["partition"] for m in rest}.isdisjoint(by_partition)


def _pop_two_partitions(p, queue):
    for name in ("a", "b"):
        _push(p, queue, [f"{name}{n}" for n in range(3)], partition=name)
    got = service.pop(p, PopRequest(queue, batch=10, partitions=2))
    assert len(got) == 6 and len({m["leaseId"] for m in got}) == 1
    by = {}
    for m in got:
        by.setdefault(m["partition"], []).append(m)
    return got[0]["leaseId"], by["a"], by["b"]


def test_a_multi_partition_lease_renews_and_acks_every_partition_it_covers(tenant):
    p = tenant.principal
    service.configure(p, "shared", {"leaseTime": 30})
    lease, a, b = _pop_two_partitions(p, "shared")
    renewed = service.extend(p, lease, 120)
    assert renewed["success"] is True
    assert {g["leased"] for part in service.queue_resource(p, "shared")["partitions"]
            for g in part["consumerGroups"]} == {True}
    # a partial ack on one partition keeps the lease on both; acking each partition's last releases it
    done = service.ack(p, [Ack(lease, "completed", a[0]["transactionId"], a[0]["partitionId"])])
    assert done[0]["partitionId"] == a[0]["partitionId"] and done[0]["leaseReleased"] is False
    done = service.ack(p, [Ack(lease, "completed", m["transactionId"], m["partitionId"]) for m in (a[-1], b[-1])])
    assert [d["partitionId"] for d in done] == [a[-1]["partitionId"], b[-1]["partitionId"]]
    assert all(d["leaseReleased"] for d in done)
    with pytest.raises(Conflict):
        service.extend(p, lease, 60)
    assert service.pop(p, PopRequest("shared", batch=10, partitions=2)) == []


def test_a_multi_partition_lease_nacked_on_one_partition_keeps_the_other(tenant):
    p = tenant.principal
    lease, a, b = _pop_two_partitions(p, "half")
    done = service.ack(p, [Ack(lease, "failed", a[0]["transactionId"], a[0]["partitionId"])])
    assert done[0]["leaseReleased"] is True
    again = service.pop(p, PopRequest("half", batch=10, partitions=2))
    assert [m["data"] for m in again] == ["a0", "a1", "a2"] and again[0]["leaseId"] != lease
    # the other partition's lease is still live and acks by the same lease id
    assert service.extend(p, lease, 60)["partitionId"] == b[0]["partitionId"]
    done = service.ack(p, [Ack(lease, "completed", b[-1]["transactionId"], b[-1]["partitionId"])])
    assert done[0]["leaseReleased"] is True


def test_a_whole_lease_ack_naming_no_partition_commits_every_partition_of_the_lease(tenant):
    p = tenant.principal
    lease, a, b = _pop_two_partitions(p, "whole")
    service.ack(p, [Ack(lease, "completed")])
    assert service.pop(p, PopRequest("whole", batch=10, partitions=2)) == []
    lease, a, b = _pop_two_partitions(p, "bytx")
    done = service.ack(p, [Ack(lease, "completed", b[-1]["transactionId"])])  # found on its partition
    assert done[0]["partitionId"] == b[0]["partitionId"] and done[0]["leaseReleased"] is True
    assert service.extend(p, lease, 60)["partitionId"] == a[0]["partitionId"]


def test_an_ack_without_a_lease_uses_the_partitions_live_lease(tenant):
    p = tenant.principal
    _push(p, "bare", [1, 2])
    got = service.pop(p, PopRequest("bare", batch=2))
    done = service.ack(p, [Ack(None, "completed", got[-1]["transactionId"], got[-1]["partitionId"])])
    assert done[0]["leaseId"] == got[0]["leaseId"] and done[0]["leaseReleased"] is True
    with pytest.raises(Conflict):  # nothing leased now
        service.ack(p, [Ack(None, "completed", got[-1]["transactionId"], got[-1]["partitionId"])])


def test_an_ack_with_status_dlq_dead_letters_at_once_whatever_the_retries(tenant):
    p = tenant.principal
    service.configure(p, "dq", {"retryLimit": 10, "dlqAfterMaxRetries": False})
    _push(p, "dq", ["bad", "next"])
    got = service.pop(p, PopRequest("dq"))
    done = service.ack(p, [Ack(got[0]["leaseId"], "dlq", got[0]["transactionId"], got[0]["partitionId"],
                               error="poison")])
    assert done[0]["dlq"] is True
    dead = service.dead_letters(p, "dq", None, None, 10, 0)
    assert [m["data"] for m in dead["messages"]] == ["bad"] and dead["messages"][0]["errorMessage"] == "poison"
    assert [m["data"] for m in service.pop(p, PopRequest("dq"))] == ["next"]


def test_a_transactions_required_leases_must_all_be_live(tenant):
    p = tenant.principal
    _push(p, "req", [1])
    got = service.pop(p, PopRequest("req"))
    with pytest.raises(Conflict):
        service.transaction(p, [[Item("req-out", 1)]], [got[0]["leaseId"], str(uuid.uuid4())])
    with pytest.raises(NotFound):
        service.queue_resource(p, "req-out")  # nothing applied
    service.transaction(p, [Ack(got[0]["leaseId"], "completed", got[0]["transactionId"]), [Item("req-out", 1)]],
                        [got[0]["leaseId"]])
    assert service.queue_resource(p, "req-out")["counters"]["pushed"] == 1


def test_delete_queue_removes_everything_and_a_push_starts_afresh(tenant, make_tenant):
    p = tenant.principal
    _push(p, "gone", [1, 2], partition="x")
    service.pop(p, PopRequest("gone", consumer_group="g"))
    with pytest.raises(NotFound):
        service.delete_queue(make_tenant().principal, "gone")  # another tenant's: missing
    assert service.delete_queue(p, "gone") == {"deleted": True, "queue": "gone", "messagesRemoved": 2}
    with pytest.raises(NotFound):
        service.delete_queue(p, "gone")
    _push(p, "gone", [3], partition="x")
    assert [m["data"] for m in service.pop(p, PopRequest("gone", consumer_group="g", batch=10))] == [3]


def test_delete_consumer_group_starts_it_over(tenant):
    p = tenant.principal
    _push(p, "cg", [1, 2])
    got = service.pop(p, PopRequest("cg", consumer_group="g", batch=10))
    service.ack(p, [Ack(got[0]["leaseId"])])
    assert service.pop(p, PopRequest("cg", consumer_group="g")) == []
    assert service.delete_group(p, "g")["deleted"] is True
    assert [m["data"] for m in service.pop(p, PopRequest("cg", consumer_group="g", batch=10))] == [1, 2]
    with pytest.raises(NotFound):
        service.delete_group(p, "never")


def test_list_overview_and_fetch(tenant):
    p = tenant.principal
    _push(p, "l1", [1, 2, 3], partition="a")
    _push(p, "l2", [4])
    listed = service.list_queues(p, 10, 0)
    assert [(q["name"], q["partitions"], q["messages"]) for q in listed["queues"]] == [("l1", 1, 3), ("l2", 1, 1)]
    assert listed["total"] == 2
    seen = service.overview(p)
    assert (seen["queues"], seen["partitions"], seen["messages"], seen["counters"]["pushed"]) == (2, 2, 4, 4)
    answer = service.fetch(p, [reads.FetchEntry("l1", "a", 1), reads.FetchEntry("l1", "zz"),
                               reads.FetchEntry("l1", "a", 9)], 1024)
    assert [r["payload"] for r in answer[0]["records"]] == [2, 3] and answer[0]["highWatermark"] == 3
    assert answer[1]["error"] == reads.UNKNOWN_TOPIC_OR_PARTITION
    assert answer[2]["error"] == reads.OFFSET_OUT_OF_RANGE
    one = service.fetch(p, [reads.FetchEntry("l1", "a", 0)], 1)  # the budget still returns one record
    assert [r["payload"] for r in one[0]["records"]] == [1]
