"""Flows domain on real PostgreSQL: registration outcomes and the quota gate, state reads, and the
cycle's one transaction (state ops + sink pushes + the source ack under the lease)."""

from __future__ import annotations

import threading
import uuid

import pytest

from postbox import db, tenancy
from postbox.errors import Conflict, Forbidden, Invalid, NotFound
from postbox.flows import cycle, queries, quotas, state
from postbox.flows.cycle import AckRequest, CycleRequest
from postbox.partitioned import payloads, service
from postbox.partitioned.produce import Item
from postbox.partitioned.service import PopRequest


@pytest.fixture
def granted(tenant):
    quotas.grant(tenant.tenant_id)
    return tenant


def _register(p, name="q1", h="h1", **kw):
    args = {"source_queue": "src", "sink_queue": "out", **kw}
    return queries.register(p, name, args["source_queue"], args["sink_queue"], h, kw.get("reset", False))


def _source(p, n=3, queue="src", partition="Default", group="g"):
    """Push n messages and pop them: (the leased messages, their partition id)."""
    service.push(p, [Item(queue, {"i": i}, partition) for i in range(n)])
    got = service.pop(p, PopRequest(queue, partition=partition, batch=n, consumer_group=group))
    return got, got[0]["partitionId"]


def _cursor(partition_id, group="g"):
    with db.transaction() as conn:
        return conn.execute("SELECT committed, lease_id IS NOT NULL, total_consumed FROM log_cursors"
                            " WHERE partition_id = %s AND consumer_group = %s", (int(partition_id), group)).fetchone()


def _rows(p, qid, pid, **kw):
    return state.get(p, qid, pid, **kw)["rows"]


def _sink(p, queue="out", group="check"):
    out = []
    try:
        while got := service.pop(p, PopRequest(queue, batch=1000, consumer_group=group, auto_ack=True)):
            out += got
    except NotFound:  # the queue was never created (a rolled-back cycle creates nothing)
        pass
    return out


# ---- registration ---------------------------------------------------------------------------------

def test_registration_outcomes(granted):
    p = granted.principal
    first = _register(p)
    assert first["fresh"] is True and first["reset"] is False and first["config_hash"] == "h1"
    qid = first["query_id"]
    assert uuid.UUID(qid).version == 7
    got, pid = _source(p)
    cycle.run(p, CycleRequest(qid, pid, "g", [{"type": "upsert", "key": "k", "value": {"acc": 1}}]))

    same = _register(p, source_queue="src2", sink_queue="")
    assert same["query_id"] == qid and same["fresh"] is False and same["reset"] is False
    with db.transaction() as conn:
        assert conn.execute("SELECT source_queue, sink_queue FROM flow_queries WHERE id = %s",
                            (qid,)).fetchone() == ("src2", None)
    assert [r["key"] for r in _rows(p, qid, pid)] == ["k"]           # state kept

    with pytest.raises(Conflict) as refused:
        _register(p, h="h2")
    assert "q1" in refused.value.message and refused.value.details["query_id"] == qid
    assert [r["key"] for r in _rows(p, qid, pid)] == ["k"]

    reset = _register(p, h="h2", reset=True)
    assert reset["reset"] is True and reset["fresh"] is False and reset["config_hash"] == "h2"
    assert _rows(p, qid, pid) == []
    assert _register(p, h="h2")["fresh"] is False


def _options(p, queue):
    return service.configure(p, queue, {})["options"]


def test_registration_gives_the_source_queue_flows_lease_and_retry_defaults(granted):
    p = granted.principal
    _register(p, "fresh-source", source_queue="made.by.registration")      # created by the registration
    assert (_options(p, "made.by.registration")["leaseTime"], _options(p, "made.by.registration")["retryLimit"]) \
        == (30, 100)
    service.push(p, [Item("pushed.first", 1)])                             # created by a push: queue defaults
    assert _options(p, "pushed.first")["leaseTime"] == 300
    _register(p, "pushed-first", source_queue="pushed.first")
    assert (_options(p, "pushed.first")["leaseTime"], _options(p, "pushed.first")["retryLimit"]) == (30, 100)
    service.configure(p, "chosen", {"leaseTime": 300, "retryLimit": 5})   # the owner's choice is kept
    _register(p, "chosen", source_queue="chosen")
    assert (_options(p, "chosen")["leaseTime"], _options(p, "chosen")["retryLimit"]) == (300, 5)


def test_names_are_per_tenant(granted, make_tenant):
    other = make_tenant()
    quotas.grant(other.tenant_id)
    a = _register(granted.principal, "shared")
    b = _register(other.principal, "shared", h="different")
    assert a["query_id"] != b["query_id"] and b["fresh"] is True


def test_missing_config_hash_is_invalid(granted):
    with pytest.raises(Invalid):
        _register(granted.principal, h="")


def test_quota_gate_denies_new_names_only(tenant):
    p = tenant.principal
    with pytest.raises(Forbidden) as denied:
        _register(p, "a")
    assert denied.value.details["denied"] is True and "no grant" in denied.value.message
    with db.transaction() as conn:
        assert conn.execute("SELECT count(*) FROM flow_queries WHERE tenant_id = %s",
                            (tenant.tenant_id,)).fetchone()[0] == 0

    quotas.grant(tenant.tenant_id, max_queries=2)
    _register(p, "a")
    _register(p, "b")
    with pytest.raises(Forbidden) as full:
        _register(p, "c")
    assert "max_queries" in full.value.message

    quotas.revoke(tenant.tenant_id)
    assert _register(p, "a")["fresh"] is False                 # existing names always pass
    assert _register(p, "b", h="new", reset=True)["reset"] is True
    with pytest.raises(Forbidden) as disabled:
        _register(p, "d")
    assert "disabled" in disabled.value.message
    listed = {g["tenant_id"]: g for g in quotas.list_grants()}
    assert listed[tenant.tenant_id]["enabled"] is False and listed[tenant.tenant_id]["queries"] == 2


def test_quota_cap_holds_under_concurrent_registrations(tenant):
    quotas.grant(tenant.tenant_id, max_queries=3)
    results = []

    def one(i):
        try:
            _register(tenant.principal, f"n{i}")
            results.append("ok")
        except Forbidden:
            results.append("denied")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert results.count("ok") == 3 and results.count("denied") == 5


def test_the_default_tenant_never_reads_the_grants(database_url):
    tid = tenancy.tenant_id_by_name("default") or tenancy.create_tenant("default", plan="pro")
    with db.transaction() as conn:
        conn.execute("DELETE FROM flow_quotas WHERE tenant_id = %s", (tid,))
    p = tenancy.resolve_key(tenancy.create_key(tid, "write").key)
    assert _register(p, f"default-{uuid.uuid4().hex[:8]}")["fresh"] is True


def test_roles(granted):
    reader = granted.principal_for("read")
    with pytest.raises(Forbidden):
        _register(reader)
    qid = _register(granted.principal)["query_id"]
    _, pid = _source(granted.principal)
    assert _rows(reader, qid, pid) == []                      # reading state needs read only
    with pytest.raises(Forbidden):
        cycle.run(reader, CycleRequest(qid, pid))


# ---- state reads ----------------------------------------------------------------------------------

def test_state_get_filters_are_anded_and_ordered_by_key(granted):
    p = granted.principal
    qid = _register(p)["query_id"]
    _, pid = _source(p)
    ops = [
        {"type": "upsert", "key": "tumb:60\x1fb\x1fx", "value": {"acc": 2, "windowEnd": 2000}},
        {"type": "upsert", "key": "tumb:60\x1fa\x1fx", "value": {"acc": 1, "windowEnd": 1000}},
        {"type": "upsert", "key": "tumb:60\x1fc\x1fx", "value": {"acc": 3, "windowEnd": "3000"}},
        {"type": "upsert", "key": "tumb:6\x1fz", "value": {"acc": 9, "windowEnd": 10}},
        {"type": "upsert", "key": "__wm__", "value": {"eventTimeMs": 5}},
    ]
    assert cycle.run(p, CycleRequest(qid, pid, "g", ops))["success"] is True
    keys = lambda **kw: [r["key"] for r in _rows(p, qid, pid, **kw)]  # noqa: E731
    assert keys() == ["__wm__", "tumb:6\x1fz", "tumb:60\x1fa\x1fx", "tumb:60\x1fb\x1fx", "tumb:60\x1fc\x1fx"]
    assert keys(key_prefix="tumb:60\x1f") == ["tumb:60\x1fa\x1fx", "tumb:60\x1fb\x1fx", "tumb:60\x1fc\x1fx"]
    assert keys(key_prefix="tumb:60\x1f", ripe_at_or_before=2000) == ["tumb:60\x1fa\x1fx", "tumb:60\x1fb\x1fx"]
    # a string windowEnd never matches ripeness; absent keys are absent, not null
    assert keys(ripe_at_or_before=10**15) == ["tumb:6\x1fz", "tumb:60\x1fa\x1fx", "tumb:60\x1fb\x1fx"]
    assert keys(keys=["nope", "tumb:60\x1fb\x1fx", "tumb:6\x1fz"], key_prefix="tumb:60\x1f") == ["tumb:60\x1fb\x1fx"]
    assert keys(keys=["nope"]) == []
    assert keys(keys=[], key_prefix="") == keys()
    row = _rows(p, qid, pid, keys=["tumb:60\x1fa\x1fx"])[0]
    assert row["value"] == {"acc": 1, "windowEnd": 1000} and row["updated_at"].endswith("Z")


def test_state_get_ownership(granted, make_tenant):
    p = granted.principal
    qid = _register(p)["query_id"]
    _, pid = _source(p)
    other = make_tenant()
    quotas.grant(other.tenant_id)
    oqid = _register(other.principal)["query_id"]
    _, opid = _source(other.principal)
    cycle.run(other.principal, CycleRequest(oqid, opid, "g", [{"type": "upsert", "key": "k", "value": 1}]))
    with pytest.raises(NotFound) as gate:
        state.get(p, qid, opid)                                # another tenant's partition
    assert gate.value.code == "ownership" and gate.value.message == "not found"
    with pytest.raises(NotFound):
        state.get(p, qid, "999999999")                         # a missing one: the same answer
    assert state.get(p, oqid, pid) == {"success": True, "rows": []}   # another tenant's query: empty
    assert state.get(p, "not-a-uuid", pid) == {"success": True, "rows": []}
    with pytest.raises(Invalid):
        state.get(p, "", pid)


# ---- the cycle --------------------------------------------------------------------------------------

def test_cycle_commits_state_pushes_and_ack_together(granted):
    p = granted.principal
    qid = _register(p)["query_id"]
    got, pid = _source(p, 3)
    ack = AckRequest(got[0]["leaseId"], "completed", 3, got[-1]["transactionId"])
    body = cycle.run(p, CycleRequest(
        qid, pid, "g",
        [{"type": "upsert", "key": "k1", "value": {"acc": 1}}, {"type": "upsert", "key": "k2", "value": 2},
         {"type": "delete", "key": "k1"}, {"type": "upsert", "key": "k2", "value": 3}],
        [{"queue": "out", "payload": {"n": 1}}, {"queue": "out", "data": {"n": 2}, "partition": "P"},
         {"queue": "", "payload": "skipped"}, {"queue": "out", "payload": {"n": 3}, "transactionId": "fixed"}],
        ack,
    ))
    assert body["success"] is True and body["queueName"] == "src" and body["state_ops_applied"] == 4
    assert body["query_id"] == qid and body["partition_id"] == pid
    assert body["ack_result"] == {"success": True, "count": 3, "lease_released": True, "dlq": False}
    assert [(r["queue"], r["partition"], r["status"], r["baseOffset"]) for r in body["push_results"]] == [
        ("out", "Default", "queued", 0), ("out", "P", "queued", 0)]
    assert [(r["key"], r["value"]) for r in _rows(p, qid, pid)] == [("k2", 3)]
    assert _cursor(pid) == (3, False, 3)
    sink = _sink(p)
    assert sorted(m["data"]["n"] for m in sink) == [1, 2, 3]
    stamped = [m for m in sink if m["data"]["n"] == 1][0]
    assert uuid.UUID(stamped["transactionId"]).version == 7 and stamped["messageId"] == stamped["transactionId"]
    assert [m for m in sink if m["data"]["n"] == 3][0]["transactionId"] == "fixed"
    # A replayed cycle (lost response) cannot commit twice: the lease is gone.
    again = cycle.run(p, CycleRequest(qid, pid, "g", [], [{"queue": "out", "payload": {"n": 4}}], ack))
    assert again["success"] is False and "lease" in again["error"]
    assert len(_sink(p, group="check2")) == 3


def test_a_typo_in_an_op_type_commits_nothing(granted):
    p = granted.principal
    qid = _register(p)["query_id"]
    got, pid = _source(p, 2)
    body = cycle.run(p, CycleRequest(
        qid, pid, "g", [{"type": "upsert", "key": "a", "value": 1}, {"type": "upsret", "key": "b", "value": 2}],
        [{"queue": "out", "payload": 1}], AckRequest(got[0]["leaseId"], count=2)))
    assert body["success"] is False and "upsret" in body["error"]
    assert body["state_ops_applied"] == 0 and body["ack_result"] is None
    assert _rows(p, qid, pid) == [] and _sink(p) == [] and _cursor(pid)[:2] == (0, True)


@pytest.mark.parametrize("lease", ["foreign", "expired", "released", "garbage"])
def test_a_cycle_without_the_lease_rolls_its_sink_pushes_back(granted, make_tenant, lease):
    p = granted.principal
    qid = _register(p)["query_id"]
    got, pid = _source(p, 2)
    lease_id = got[0]["leaseId"]
    if lease == "foreign":
        _, other_pid = _source(p, 1, partition="other")
        lease_id = service.pop(p, PopRequest("src", partition="other", batch=1, consumer_group="g2"))[0]["leaseId"]
    elif lease == "expired":
        with db.transaction() as conn:
            conn.execute("UPDATE log_cursors SET lease_expires_at = clock_timestamp() - interval '1 second'"
                         " WHERE lease_id = %s", (lease_id,))
    elif lease == "released":
        service.ack(p, [service.Ack(lease_id, "completed", None, pid)])
    else:
        lease_id = "not-a-lease"
    body = cycle.run(p, CycleRequest(qid, pid, "g", [{"type": "upsert", "key": "a", "value": 1}],
                                     [{"queue": "out", "payload": 1}, {"queue": "fresh-sink", "payload": 2}],
                                     AckRequest(lease_id, count=2)))
    assert body["success"] is False and body["error"]
    assert _rows(p, qid, pid) == [] and _sink(p) == []
    with db.transaction() as conn:
        assert conn.execute("SELECT count(*) FROM pq_queues WHERE tenant_id = %s AND name = 'fresh-sink'",
                            (granted.tenant_id,)).fetchone()[0] == 0


def test_cycle_ownership_and_unknown_query(granted, make_tenant):
    p = granted.principal
    qid = _register(p)["query_id"]
    got, pid = _source(p, 1)
    other = make_tenant()
    _, opid = _source(other.principal, 1)
    with pytest.raises(NotFound) as gate:
        cycle.run(p, CycleRequest(qid, opid, "g"))
    assert gate.value.code == "ownership"
    quotas.grant(other.tenant_id)
    oqid = _register(other.principal)["query_id"]
    body = cycle.run(p, CycleRequest(oqid, pid, "g", [{"type": "upsert", "key": "a", "value": 1}]))
    assert body == {**body, "success": False, "error": "query not found"}
    with pytest.raises(Invalid):
        cycle.run(p, CycleRequest("", pid))


def test_ack_statuses(granted):
    p = granted.principal
    qid = _register(p)["query_id"]

    # ok + release_lease false: exactly `count` frames, lease kept (the gate's partial ack)
    got, pid = _source(p, 5, partition="A")
    body = cycle.run(p, CycleRequest(qid, pid, "g", ack=AckRequest(got[0]["leaseId"], "ok", 2), release_lease=False))
    assert body["ack_result"] == {"success": True, "count": 2, "lease_released": False, "dlq": False}
    assert _cursor(pid) == (2, True, 2)

    # a misspelt status is a nack: lease released, cursor untouched, count forced to 0
    got, pid = _source(p, 3, partition="B")
    body = cycle.run(p, CycleRequest(qid, pid, "g", ack=AckRequest(got[0]["leaseId"], "completd", 3)))
    assert body["success"] is True and body["ack_result"]["count"] == 0 and body["ack_result"]["lease_released"]
    assert _cursor(pid)[:2] == (0, False)
    again = service.pop(p, PopRequest("src", partition="B", batch=10, consumer_group="g"))
    assert [m["data"]["i"] for m in again] == [0, 1, 2]

    # ack: null is an idle-flush cycle: no cursor movement, the lease untouched
    got, pid = _source(p, 2, partition="C")
    body = cycle.run(p, CycleRequest(qid, pid, "g", [{"type": "upsert", "key": "x", "value": 1}], None, None))
    assert body["success"] is True and body["ack_result"] is None
    assert _cursor(pid) == (0, True, 0)

    # an absent status counts as success; consumer_group defaults to __QUEUE_MODE__
    service.push(p, [Item("src", 1, "D")])
    got = service.pop(p, PopRequest("src", partition="D", batch=1))
    body = cycle.run(p, CycleRequest(qid, got[0]["partitionId"], None, ack=AckRequest(got[0]["leaseId"], None)))
    assert body["ack_result"]["count"] == 1 and _cursor(got[0]["partitionId"], "__QUEUE_MODE__")[0] == 1


def test_sink_queues_are_created_in_the_tenant_and_encrypted_ones_get_envelopes(granted, make_tenant):
    p = granted.principal
    qid = _register(p)["query_id"]
    other = make_tenant()
    service.configure(other.principal, "secret-sink", {"encryptionEnabled": False})
    service.configure(p, "secret-sink", {"encryptionEnabled": True})
    got, pid = _source(p, 1)
    body = cycle.run(p, CycleRequest(qid, pid, "g", [], [{"queue": "secret-sink", "payload": {"pin": 1234}},
                                                         {"queue": "brand-new", "payload": 1}],
                                     AckRequest(got[0]["leaseId"])))
    assert body["success"] is True
    with db.transaction() as conn:
        frames = conn.execute(
            "SELECT s.frames FROM log_segments s JOIN log_partitions lp ON lp.id = s.partition_id"
            " JOIN pq_queues q ON q.id = lp.owner_id WHERE lp.owner_kind = 'pq' AND q.tenant_id = %s"
            " AND q.name = 'secret-sink'", (granted.tenant_id,)).fetchone()[0]
        created = conn.execute("SELECT tenant_id::text FROM pq_queues WHERE name = 'brand-new'"
                               " AND tenant_id = %s", (granted.tenant_id,)).fetchone()
    assert b"1234" not in bytes(frames) and created == (granted.tenant_id,)
    assert _sink(p, "secret-sink")[0]["data"] == {"pin": 1234}
    assert _sink(other.principal, "secret-sink") == []
    payloads.reset()


def test_a_parked_pop_on_the_sink_wakes_on_commit(granted):
    p = granted.principal
    qid = _register(p)["query_id"]
    got, pid = _source(p, 1)
    service.push(p, [Item("out", "seed")])
    assert _sink(p, group="waiter")  # the group now exists and is drained
    woke: list = []
    t = threading.Thread(target=lambda: woke.extend(service.pop(
        p, PopRequest("out", batch=10, wait=True, timeout_ms=2500, consumer_group="waiter"))))
    t.start()
    body = cycle.run(p, CycleRequest(qid, pid, "g", [], [{"queue": "out", "payload": "hello"}],
                                     AckRequest(got[0]["leaseId"])))
    t.join()
    assert body["success"] is True and [m["data"] for m in woke] == ["hello"]


def test_racing_cycles_on_one_lease_commit_exactly_once(granted):
    p = granted.principal
    qid = _register(p)["query_id"]
    got, pid = _source(p, 4)
    answers: list = [None] * 6
    start = threading.Barrier(6)

    def racer(i):
        start.wait()
        answers[i] = cycle.run(p, CycleRequest(
            qid, pid, "g", [{"type": "upsert", "key": "winner", "value": i}],
            [{"queue": "out", "payload": i}], AckRequest(got[0]["leaseId"], "completed", 4)))

    threads = [threading.Thread(target=racer, args=(i,)) for i in range(6)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    winners = [i for i, a in enumerate(answers) if a["success"]]
    assert len(winners) == 1
    assert [m["data"] for m in _sink(p)] == winners
    assert [r["value"] for r in _rows(p, qid, pid)] == winners and _cursor(pid) == (4, False, 4)
