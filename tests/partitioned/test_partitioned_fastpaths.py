"""The one-round-trip paths (pq_push, pq_pop, the one-statement ack) and their fall-backs:
a stale encryption guess, ids already stored, a lease whose last id was never recorded."""

from __future__ import annotations

import threading

from postbox import db
from postbox.partitioned import produce, service
from postbox.partitioned.consume import Ack
from postbox.partitioned.produce import Item
from postbox.partitioned.service import PopRequest


def _pop(principal, queue, **kw):
    return service.pop(principal, PopRequest(queue, **kw))


def _stored(queue_name, tenant_id):
    with db.connection() as conn:
        return conn.execute(
            "SELECT s.codec, s.frames FROM log_segments s JOIN log_partitions p ON p.id = s.partition_id"
            " JOIN pq_queues q ON q.id = p.owner_id AND p.owner_kind = 'pq'"
            " WHERE q.tenant_id = %s AND q.name = %s ORDER BY s.end_offset", (tenant_id, queue_name)).fetchall()


def test_a_stale_encryption_guess_is_corrected_and_nothing_is_appended_twice(tenant):
    p = tenant.principal
    service.push(p, [Item("secret", {"n": 0})])  # the process now believes "secret" is not encrypted
    service.configure(p, "secret", {"encryptionEnabled": True})
    pushed = service.push(p, [Item("secret", {"n": 1}), Item("other", {"n": 2})])
    assert [r["offset"] for r in pushed] == [1, 0]
    assert len(_stored("secret", tenant.tenant_id)) == 2
    service.configure(p, "secret", {"encryptionEnabled": False})  # and now it believes the opposite
    service.push(p, [Item("secret", {"n": 3})])
    got = _pop(p, "secret", batch=10)
    assert [m["data"] for m in got] == [{"n": 0}, {"n": 1}, {"n": 3}]
    assert [m["offset"] for m in got] == [0, 1, 2]
    assert b'"n":1' not in b"".join(bytes(f) for c, f in _stored("secret", tenant.tenant_id) if c == 0)


def test_ids_already_stored_are_reported_with_their_offsets_and_the_rest_appended_once(tenant):
    p = tenant.principal
    service.push(p, [Item("d", "a", transaction_id="t1"), Item("d", "b", "P2", transaction_id="t1")])
    pushed = service.push(p, [Item("d", "c", transaction_id="t2"), Item("d", "a2", transaction_id="t1"),
                              Item("d", "c2", transaction_id="t2"), Item("d", "b2", "P2", transaction_id="t1"),
                              Item("d", "e", "P2")])
    assert [(r["status"], r["offset"]) for r in pushed] == [
        ("queued", 1), ("duplicate", 0), ("duplicate", 1), ("duplicate", 0), ("queued", 1)]
    again = service.push(p, [Item("d", "x", transaction_id="t1"), Item("d", "y", transaction_id="t2")])
    assert [(r["status"], r["offset"]) for r in again] == [("duplicate", 0), ("duplicate", 1)]
    assert [m["data"] for m in _pop(p, "d", partition="Default", batch=10)] == ["a", "c"]


def test_concurrent_pushers_of_one_transaction_id_store_it_once(tenant):
    p = tenant.principal
    results, errors = [], []

    def pusher(k):
        try:
            for n in range(20):
                results.append(service.push(p, [Item("race", {"k": k, "n": n}, transaction_id=f"t{n}"),
                                                Item("race", {"k": k}, "Other", transaction_id=f"t{n}")]))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=pusher, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    queued = [r for batch in results for r in batch if r["status"] == "queued"]
    assert len(queued) == 40  # 20 ids x 2 partitions, each stored once
    assert len(_pop(p, "race", partition="Default", batch=100)) == 20


def test_push_inside_a_callers_transaction_rolls_back_with_it(tenant):
    p = tenant.principal
    try:
        with db.transaction() as conn:
            produce.push(conn, tenant.tenant_id, [Item("tx", 1, transaction_id="once")])
            raise RuntimeError("caller fails")
    except RuntimeError:
        pass
    assert not _queue_exists(tenant, "tx")  # the queue it created went too
    assert service.push(p, [Item("tx", 2, transaction_id="once")])[0]["status"] == "queued"


def _queue_exists(tenant, name):
    with db.connection() as conn:
        return conn.execute("SELECT 1 FROM pq_queues WHERE tenant_id = %s AND name = %s",
                            (tenant.tenant_id, name)).fetchone() is not None


def test_an_ack_naming_the_last_message_works_when_the_last_id_was_never_recorded(tenant):
    p = tenant.principal
    service.push(p, [Item("lost", n) for n in range(5)])
    got = _pop(p, "lost", batch=3)
    with db.connection() as conn:  # as if the popper died between its two statements
        conn.execute("UPDATE log_cursors SET batch_last_id = NULL WHERE lease_id = %s", (got[-1]["leaseId"],))
    done = service.ack(p, [Ack(got[-1]["leaseId"], "completed", got[-1]["transactionId"], got[-1]["partitionId"])])
    assert done[0]["leaseReleased"] is True
    assert [m["data"] for m in _pop(p, "lost", batch=10)] == [3, 4]


def test_auto_ack_pops_commit_at_once(tenant):
    p = tenant.principal
    service.push(p, [Item("auto", n) for n in range(4)])
    first = _pop(p, "auto", batch=3, auto_ack=True)
    assert [m["data"] for m in first] == [0, 1, 2] and first[0]["leaseId"] is None
    assert [m["data"] for m in _pop(p, "auto", batch=3, auto_ack=True)] == [3]
    assert _pop(p, "auto", batch=3) == []


def test_a_batch_of_payloads_decodes_as_one_by_one():
    from postbox.partitioned import payloads

    assert payloads.decode_many([b"1", b"{}", b'"x"', b"null"], [None] * 4) == [1, {}, "x", None]
    assert payloads.decode_many([payloads.seal(b"[1]"), b"2"], [payloads.ENCRYPTED, None]) == [[1], 2]
    assert payloads.decode_many([b"1", b"{}", b'"x"'], [None] * 3) == [1, {}, "x"]
