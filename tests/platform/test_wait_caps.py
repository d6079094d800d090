"""A caller's cap of waiting requests: a request that goes to wait holds one of its caller's slots
(its key's tenant; an anonymous reader's address) until it answers; over the cap it is a 429 with
Retry-After in the surface's own envelope, having waited for nothing. A request answered at once
needs no slot."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from postbox import config, db, errors, wait_slots
from postbox.wait_slots import Caller
from support.http import client


def _held(key: str) -> int:
    with db.connection() as conn:
        return conn.execute("SELECT count(*) FROM wait_slots WHERE caller = %s AND until > clock_timestamp()",
                            (key,)).fetchone()[0]


def _until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "not in time"
        time.sleep(0.02)


@pytest.fixture
def caps(monkeypatch):
    """caps(per_tenant, per_address): the caps this test's requests meet."""

    def set_caps(per_tenant: int, per_address: int = 16) -> None:
        monkeypatch.setenv("POSTBOX_WAITS_PER_TENANT", str(per_tenant))
        monkeypatch.setenv("POSTBOX_WAITS_PER_ADDRESS", str(per_address))
        config.reset()

    return set_caps


def _tenant_name(tenant_id: str) -> str:
    with db.connection() as conn:
        return conn.execute("SELECT name FROM tenants WHERE id = %s", (tenant_id,)).fetchone()[0]


# ---- the slots ----------------------------------------------------------------------------------------


def test_concurrent_waits_take_exactly_the_callers_cap_of_slots(database_url):
    caller = Caller(f"test:{uuid.uuid4()}", 5)
    release = threading.Event()
    outcomes: list[str] = []
    lock = threading.Lock()

    def wait() -> None:
        try:
            with wait_slots.held(caller, 30):
                with lock:
                    outcomes.append("held")
                release.wait(30)
        except errors.TooManyRequests as refused:
            assert refused.status == 429 and refused.details["retry_after"] >= 1
            with lock:
                outcomes.append("refused")

    threads = [threading.Thread(target=wait) for _ in range(20)]
    for t in threads:
        t.start()
    _until(lambda: len(outcomes) == 20)
    assert sorted(outcomes) == ["held"] * 5 + ["refused"] * 15
    assert _held(caller.key) == 5
    release.set()
    for t in threads:
        t.join(10)
    assert _held(caller.key) == 0  # each gave its slot back


def test_a_slot_whose_lease_ran_out_is_taken_over(database_url):
    key = f"test:{uuid.uuid4()}"
    with db.connection() as conn:
        take = "SELECT wait_slot_take(%s, gen_random_uuid(), %s, 1)"
        assert conn.execute(take, (key, 0.2)).fetchone()[0] is True
        assert conn.execute(take, (key, 30)).fetchone()[0] is False
        time.sleep(0.3)  # the first wait never gave its slot back (its process died)
        assert conn.execute(take, (key, 30)).fetchone()[0] is True


def test_the_caller_is_the_keys_tenant_or_an_anonymous_readers_address(tenant, caps):
    caps(per_tenant=7, per_address=3)
    assert wait_slots.caller(tenant.principal) == Caller(f"tenant:{tenant.tenant_id}", 7)
    assert wait_slots.caller(tenant.principal_for("read"), "10.0.0.1") == Caller(f"tenant:{tenant.tenant_id}", 7)
    assert wait_slots.caller(tenant.principal_for("anon"), "10.0.0.1") == Caller("address:10.0.0.1", 3)
    assert wait_slots.caller(None, "10.0.0.2") == Caller("address:10.0.0.2", 3)


# ---- every surface's answer -------------------------------------------------------------------------


def test_a_wait_over_the_tenants_cap_is_429_with_retry_after_in_each_surfaces_envelope(api, caps):
    caps(per_tenant=1)
    api.post("/api/v1/queues", json={"name": "q"})
    api.post("/api/v1/queues", json={"name": "full"})
    api.post("/v1/streams", json={"name": "s"})
    api.post("/v1/streams/s/subscriptions", json={"name": "w"})
    durable = f"/v1/stream/d-{uuid.uuid4().hex[:8]}"
    api.put(durable, content=b"x", headers={"content-type": "text/plain"})
    api.post("/api/v1/queues/full/send", json={"message": "here already"})
    waits = [
        ("queues", api.post, "/api/v1/queues/q/read", {"json": {"wait_seconds": 10}}),
        ("keyed_streams", api.post, "/v1/streams/s/subscriptions/w/consume", {"json": {"wait_ms": 10000}}),
        ("partitioned", api.get, "/api/v1/pop/queue/pq", {"params": {"wait": "true", "timeout": 10000}}),
        ("durable", api.get, durable, {"params": {"offset": "now", "live": "long-poll"}}),
        ("durable", api.get, durable, {"params": {"offset": "now", "live": "sse"}}),
    ]
    with wait_slots.held(wait_slots.caller(api.tenant.principal), 30):  # the tenant's one slot, taken
        for surface, call, path, options in waits:
            r = call(path, **options)
            assert r.status_code == 429, (surface, path, r.status_code, r.text)
            assert int(r.headers["retry-after"]) >= 1, (surface, r.headers)
            body = r.json()
            if surface == "queues":
                assert "wait at once" in body["detail"], body
            elif surface == "keyed_streams":
                assert body["error"]["code"] == "too_many_waits", body
            elif surface == "partitioned":
                assert "wait at once" in body["error"], body
            else:
                assert body["error"]["code"] == "LIVE_READS_EXHAUSTED", body
        # a read that finds a message at once does not wait, so it needs no slot
        found = api.post("/api/v1/queues/full/read", json={"wait_seconds": 10})
        assert [m["message"] for m in found.json()["messages"]] == ["here already"]
    assert api.post("/api/v1/queues/q/read", json={"wait_seconds": 0.3}).json() == {"messages": []}


def test_long_polls_hold_slots_while_they_wait_and_give_them_back(api, gateway, caps):
    caps(per_tenant=2)
    api.post("/api/v1/queues", json={"name": "q"})
    key = wait_slots.caller(api.tenant.principal).key
    answers: list[list] = []

    def poll() -> None:
        with client(gateway.url, api.tenant.key) as c:
            answers.append(c.post("/api/v1/queues/q/read", json={"wait_seconds": 10}).json()["messages"])

    polls = [threading.Thread(target=poll) for _ in range(2)]
    for t in polls:
        t.start()
    _until(lambda: _held(key) == 2)
    third = api.post("/api/v1/queues/q/read", json={"wait_seconds": 10})
    assert third.status_code == 429 and third.headers["retry-after"]
    api.post("/api/v1/queues/q/send_batch", json={"messages": ["a", "b"]})
    for t in polls:
        t.join(15)
    assert sorted(m["message"] for answer in answers for m in answer) == ["a", "b"]
    assert _held(key) == 0
    assert api.post("/api/v1/queues/q/read", json={"wait_seconds": 0.3}).status_code == 200


def test_anonymous_readers_of_a_public_stream_are_capped_by_their_address(api, gateway, caps, monkeypatch):
    caps(per_tenant=100, per_address=1)
    monkeypatch.setenv("POSTBOX_LONG_POLL_MS", "300")
    config.reset()
    name = f"pub-{uuid.uuid4().hex[:8]}"
    api.put(f"/v1/stream/{name}", content=b"hello", headers={"content-type": "text/plain", "postbox-public": "true"})
    public = f"/{_tenant_name(api.tenant.tenant_id)}/s.{name}"
    tail = {"offset": "now", "live": "long-poll"}
    with client(gateway.url, None) as anonymous, client(gateway.url, api.tenant.key_for("anon")) as anon_key:
        with wait_slots.held(wait_slots.caller(None, "127.0.0.1"), 30):  # this address's one slot, taken
            for reader in (anonymous, anon_key):
                r = reader.get(public, params=tail)
                assert r.status_code == 429, r.text
                assert r.json()["error"]["code"] == "LIVE_READS_EXHAUSTED" and int(r.headers["retry-after"]) >= 1
            assert anonymous.get(public).status_code == 200  # a read that does not wait
            assert api.get(public, params=tail).status_code == 204  # the tenant's key: its own slots
        assert anonymous.get(public, params=tail).status_code == 204  # the slot given back: it waits again

