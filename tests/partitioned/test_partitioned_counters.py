"""Per-queue counters on real PostgreSQL: kept by push, ack (every kind), nack, dead-lettering,
replay and flows cycles, exact under concurrent pushers; and the queue's resource view."""

from __future__ import annotations

import threading

import pytest

from postbox import db
from postbox.errors import Conflict, NotFound
from postbox.flows import cycle, queries, quotas
from postbox.flows.cycle import AckRequest, CycleRequest
from postbox.partitioned import consume, maintenance, service
from postbox.partitioned.consume import Ack
from postbox.partitioned.produce import Item
from postbox.partitioned.service import PopRequest


def _counters(p, queue):
    return service.queue_resource(p, queue)["counters"]


def _expect(p, queue, **kw):
    want = {"pushed": 0, "acked": 0, "failed": 0, "deadLettered": 0, "replayed": 0, **kw}
    assert _counters(p, queue) == want


def _pop(p, queue, **kw):
    return service.pop(p, PopRequest(queue, **kw))


def test_pushes_count_records_appended_not_duplicates(tenant):
    p = tenant.principal
    service.push(p, [Item("c", 1, transaction_id="t1"), Item("c", 2, transaction_id="t1"),
                     Item("c", 3, transaction_id="t2"), Item("c", 4, "P2")])
    _expect(p, "c", pushed=3)
    again = service.push(p, [Item("c", 9, transaction_id="t1"), Item("c", 5, transaction_id="t3"),
                             Item("other", 1)])
    assert [r["status"] for r in again] == ["duplicate", "queued", "queued"]
    _expect(p, "c", pushed=4)
    _expect(p, "other", pushed=1)


def test_whole_partial_auto_and_batch_acks_count_records_committed(tenant):
    p = tenant.principal
    service.push(p, [Item("a", i) for i in range(10)])
    got = _pop(p, "a", batch=3)
    service.ack(p, [Ack(got[0]["leaseId"], "completed", None, got[0]["partitionId"])])  # the one-statement ack
    _expect(p, "a", pushed=10, acked=3)
    got = _pop(p, "a", batch=4)
    service.ack(p, [Ack(got[0]["leaseId"], "completed", got[1]["transactionId"], got[0]["partitionId"])])  # partial
    _expect(p, "a", pushed=10, acked=5)
    service.ack(p, [Ack(got[0]["leaseId"], "completed", got[3]["transactionId"], got[0]["partitionId"])])  # the rest
    _expect(p, "a", pushed=10, acked=7)
    got = _pop(p, "a", batch=2, auto_ack=True)
    assert len(got) == 2
    _expect(p, "a", pushed=10, acked=9)
    # another group acks the same records again: counted per queue, over groups
    got = _pop(p, "a", batch=100, consumer_group="g2", auto_ack=True)
    assert len(got) == 10
    _expect(p, "a", pushed=10, acked=19)
    got = _pop(p, "a", batch=5)
    assert len(got) == 1
    service.transaction(p, [Ack(got[0]["leaseId"], "completed", got[0]["transactionId"], got[0]["partitionId"])])
    _expect(p, "a", pushed=10, acked=20)


def test_a_refused_ack_counts_nothing(tenant):
    p = tenant.principal
    service.push(p, [Item("r", 1)])
    got = _pop(p, "r")
    service.ack(p, [Ack(got[0]["leaseId"])])
    with pytest.raises(Conflict):
        service.ack(p, [Ack(got[0]["leaseId"])])
    _expect(p, "r", pushed=1, acked=1)


def test_ack_lease_partial_count_and_failure(tenant):
    p = tenant.principal
    service.push(p, [Item("l", i) for i in range(5)])
    got = _pop(p, "l", batch=5)
    with db.transaction() as conn:
        out = consume.ack_lease(conn, tenant.tenant_id, got[0]["leaseId"], release=False, count=2)
    assert out["count"] == 2
    _expect(p, "l", pushed=5, acked=2)
    with db.transaction() as conn:
        consume.ack_lease(conn, tenant.tenant_id, got[0]["leaseId"], status="failed")
    _expect(p, "l", pushed=5, acked=2, failed=3)


def test_nacks_dead_letters_and_replays(tenant):
    p = tenant.principal
    service.configure(p, "d", {"retryLimit": 1, "retryDelay": 0})
    service.push(p, [Item("d", i) for i in range(3)])
    got = _pop(p, "d", batch=3)
    # the first completes, the second fails: the rest of the lease (2 records) fails
    service.ack(p, [Ack(got[0]["leaseId"], "completed", got[0]["transactionId"]),
                    Ack(got[0]["leaseId"], "failed", got[1]["transactionId"], error="boom")])
    _expect(p, "d", pushed=3, acked=1, failed=2)
    got = _pop(p, "d", batch=3)
    assert len(got) == 2 and got[0]["retryCount"] == 1
    result = service.ack(p, [Ack(got[0]["leaseId"], "failed")])  # past retryLimit: dead letters
    assert result[0]["dlq"] is True
    _expect(p, "d", pushed=3, acked=1, failed=4, deadLettered=2)
    dead = service.dead_letters(p, "d", None, None, 10, 0)["messages"]
    service.replay(p, [int(m["id"]) for m in dead])
    _expect(p, "d", pushed=3, acked=1, failed=4, deadLettered=2, replayed=2)
    got = _pop(p, "d", batch=10, auto_ack=True)
    assert [m["data"] for m in got] == [1, 2]
    _expect(p, "d", pushed=3, acked=3, failed=4, deadLettered=2, replayed=2)


def test_expired_leases_dead_lettered_by_the_sweep_are_counted(tenant):
    p = tenant.principal
    service.configure(p, "x", {"retryLimit": 0})
    service.push(p, [Item("x", i) for i in range(2)])
    got = _pop(p, "x", batch=2)
    with db.transaction() as conn:
        conn.execute("UPDATE log_cursors SET lease_expires_at = clock_timestamp() - interval '1 second'"
                     " WHERE lease_id = %s", (got[0]["leaseId"],))
    maintenance.sweep_leases()
    _expect(p, "x", pushed=2, deadLettered=2)  # an expiry is not a nack


def test_a_flows_cycle_counts_its_sink_pushes_and_its_ack(tenant):
    p = tenant.principal
    quotas.grant(tenant.tenant_id)
    qid = queries.register(p, "counted", "src", "out", "h1", False)["query_id"]
    service.push(p, [Item("src", {"i": i}) for i in range(3)])
    got = _pop(p, "src", batch=3, consumer_group="g")
    pid = got[0]["partitionId"]
    body = cycle.run(p, CycleRequest(
        qid, pid, "g", [],
        [{"queue": "out", "payload": 1}, {"queue": "out", "payload": 2, "partition": "P"},
         {"queue": "out", "payload": 3, "transactionId": "once"}, {"queue": "out", "payload": 4,
                                                                   "transactionId": "once"}],
        AckRequest(got[0]["leaseId"], "completed", 3, got[-1]["transactionId"]),
    ))
    assert body["success"] is True
    _expect(p, "src", pushed=3, acked=3)
    _expect(p, "out", pushed=3)
    # a partial cycle ack (no release) counts what it commits
    service.push(p, [Item("src", {"i": i}) for i in range(3, 7)])
    got = _pop(p, "src", batch=4, consumer_group="g")
    body = cycle.run(p, CycleRequest(qid, pid, "g", [], [], AckRequest(got[0]["leaseId"], "completed", 2),
                                     release_lease=False))
    assert body["success"] is True, body
    _expect(p, "src", pushed=7, acked=5)


def test_concurrent_pushers_keep_counters_exact(tenant):
    p = tenant.principal
    per_thread, threads, errors = 40, 4, []

    def pusher(k):
        try:
            for i in range(0, per_thread, 10):
                service.push(p, [Item("conc", {"k": k, "i": i + j}, f"P{(i + j) % 3}") for j in range(10)]
                             + [Item("conc", "dup", "P0", transaction_id=f"t{i}")])
                got = _pop(p, "conc", batch=5, consumer_group=f"w{k}", auto_ack=True)
                assert got
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    workers = [threading.Thread(target=pusher, args=(k,)) for k in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors
    view = service.queue_resource(p, "conc")
    total = sum(part["nextOffset"] for part in view["partitions"])
    assert total == per_thread * threads + per_thread // 10  # each "tI" stored once over all threads
    assert view["counters"]["pushed"] == total
    committed = sum(g["committedOffset"] for part in view["partitions"] for g in part["consumerGroups"])
    assert view["counters"]["acked"] == committed
    with db.transaction() as conn:
        slots = conn.execute("SELECT count(*) FROM pq_counters c JOIN pq_queues q ON q.id = c.queue_id"
                             " WHERE q.tenant_id = %s AND q.name = 'conc'", (tenant.tenant_id,)).fetchone()[0]
    assert 1 <= slots <= 8


def test_resource_shows_partitions_groups_lag_and_leases(tenant, make_tenant):
    p = tenant.principal
    service.configure(p, "v", {"leaseTime": 60})
    service.push(p, [Item("v", i) for i in range(5)] + [Item("v", i, "B") for i in range(2)])
    got = _pop(p, "v", partition="Default", batch=2, consumer_group="g1")
    service.ack(p, [Ack(got[0]["leaseId"])])
    _pop(p, "v", partition="Default", batch=1, consumer_group="g1")  # a lease held
    view = service.queue_resource(p, "v")
    assert view["queue"] == "v" and view["options"]["leaseTime"] == 60
    assert view["counters"] == {"pushed": 7, "acked": 2, "failed": 0, "deadLettered": 0, "replayed": 0}
    parts = {part["name"]: part for part in view["partitions"]}
    assert set(parts) == {"B", "Default"} and parts["Default"]["nextOffset"] == 5
    assert parts["Default"]["partitionId"] == got[0]["partitionId"]
    assert parts["Default"]["consumerGroups"] == [{"name": "g1", "committedOffset": 2, "lag": 3, "leased": True}]
    assert parts["B"]["consumerGroups"] == [{"name": "g1", "committedOffset": 0, "lag": 2, "leased": False}]
    with pytest.raises(NotFound):
        service.queue_resource(make_tenant().principal, "v")
    with pytest.raises(NotFound):
        service.queue_resource(p, "missing")
