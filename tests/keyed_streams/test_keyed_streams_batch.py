"""Batch publish (`POST /v1/streams/{stream}/messages/batch`): up to 100 messages in one request and
one round trip, each with its own key, idempotency key and times; per-item results in order (a
refused item says why with the single publish's code, the others land); the request's own limits;
the backlog cap for a batch; idempotency within and across batches, also from many threads."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from postbox import tenancy
from postbox.errors import Invalid, TooManyRequests
from postbox.keyed_streams import service
from postbox.keyed_streams.publishing import Outgoing, Refused
from support.http import client

BATCH = "/v1/streams/{}/messages/batch"


def _err(r, status, code=None):
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    if code:
        assert body["error"]["code"] == code, body
    return body["error"]


def _batch(api, stream, messages, **kw):
    r = api.post(BATCH.format(stream), json={"messages": messages, **kw})
    assert r.status_code == 200, r.text
    assert set(r.json()) == {"results"}
    return r.json()["results"]


def _iso(delta: timedelta) -> str:
    return (datetime.now(UTC) + delta).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_a_batch_lands_in_order_with_each_messages_own_fields(api):
    later = _iso(timedelta(hours=1))
    results = _batch(api, "orders", [
        {"key": "tenant_42", "payload": {"order_id": 1}, "headers": {"region": "in"}, "idempotency_key": "o-1"},
        {"key": "tenant_7", "payload": [1, 2], "deliver_at": later},
        {"payload": "unkeyed", "expires_at": _iso(timedelta(days=1))},
        {"key": "tenant_42", "payload": None},
    ])
    assert [set(r) for r in results] == [{"ok", "id", "offset", "status", "replayed"}] * 4
    assert [r["ok"] for r in results] == [True] * 4 and [r["replayed"] for r in results] == [False] * 4
    assert [r["offset"] for r in results] == [0, 1, 2, 3]
    assert [r["status"] for r in results] == ["available", "scheduled", "available", "available"]
    docs = sorted(api.get("/v1/streams/orders/messages").json()["messages"], key=lambda m: m["offset"])
    assert [d["id"] for d in docs] == [r["id"] for r in results]
    assert [d["status"] for d in docs] == ["available", "scheduled", "available", "available"]
    assert [(d["key"], d["payload"]) for d in docs] == [
        ("tenant_42", {"order_id": 1}), ("tenant_7", [1, 2]), (None, "unkeyed"), ("tenant_42", None)]
    assert docs[0]["headers"] == {"region": "in"} and docs[0]["idempotency_key"] == "o-1"
    assert docs[1]["deliver_at"] is not None and docs[2]["expires_at"] is not None
    assert len({d["id"] for d in docs}) == 4 and all(d["id"].startswith("msg_") and len(d["id"]) == 25 for d in docs)
    assert {d["stream"] for d in docs} == {"orders"} and {d["project"] for d in docs} == {"default"}
    assert api.get("/v1/streams/orders/messages/1").json() == docs[1]
    got = api.get("/v1/streams/orders").json()
    assert got["messages"] == 4
    assert api.get("/v1/streams").json()["streams"][0]["scheduled"] == 1


def test_refused_items_say_why_by_position_and_the_rest_land(make_tenant, gateway):
    small = make_tenant(plan="free")  # its plan caps a message's size
    with client(gateway.url, small.key) as api:
        api.post("/v1/streams", json={"name": "s", "retention": "1d"})
        messages = [
            {"payload": 0},
            {"key": "a"},                                                    # no payload
            {"payload": 2, "colour": "red"},                                 # unknown field
            {"payload": 3, "deliver_at": "tomorrow"},                        # not a timestamp
            {"payload": 4, "deliver_at": "2030-01-01T00:00:00"},             # no zone
            {"payload": 5, "deliver_at": _iso(timedelta(days=3))},           # beyond the retention
            {"payload": 6, "expires_at": "2001-01-01T00:00:00Z"},            # past
            {"payload": 7, "deliver_at": _iso(timedelta(hours=2)), "expires_at": _iso(timedelta(hours=1))},
            {"payload": 8, "key": "k" * 257},                                # key too long
            {"payload": 9, "headers": ["x"]},                                # headers not an object
            42,                                                              # not an object
            {"payload": "x" * 300_000},                                      # over the plan's size
            {"payload": 12, "deliver_at": "9999-12-31T23:00:00-05:00"},      # beyond year 9999 in UTC
            {"payload": 13, "key": "last"},
        ]
        results = _batch(api, "s", messages)
        codes = [None if r["ok"] else r["error"]["code"] for r in results]
        assert codes == [None, "invalid_payload", "invalid_colour", "invalid_deliver_at", "invalid_deliver_at",
                         "invalid_deliver_at", "invalid_expires_at", "invalid_expires_at", "invalid_key",
                         "invalid_headers", "invalid_message", "payload_too_large", "invalid_deliver_at", None]
        for r in results:
            assert set(r) == ({"ok", "id", "offset", "status", "replayed"} if r["ok"] else {"ok", "error"})
            if not r["ok"]:
                assert set(r["error"]) == {"code", "message"} and r["error"]["message"]
        assert results[1]["error"]["message"] == "payload: Field required"
        assert results[2]["error"]["message"].startswith("colour: ")
        assert "retention" in results[5]["error"]["message"]
        assert "bytes" in results[11]["error"]["message"]
        assert [r["offset"] for r in results if r["ok"]] == [0, 1]  # consecutive offsets
        stored = api.get("/v1/streams/s/messages").json()["messages"]
        assert [(m["payload"], m["offset"]) for m in stored] == [(13, 1), (0, 0)]
        assert api.get("/v1/streams/s").json()["messages"] == 2
        # The single route refuses each of them with the same code.
        for message, code in zip(messages, codes, strict=True):
            if code is not None and isinstance(message, dict):
                _err(api.post("/v1/streams/s/messages", json=message), 413 if code == "payload_too_large" else 400,
                     code)


def test_the_requests_own_limits(api):
    _err(api.post(BATCH.format("s"), json={"messages": []}), 400, "invalid_messages")
    _err(api.post(BATCH.format("s"), json={"messages": [{"payload": i} for i in range(101)]}), 400,
         "invalid_messages")
    _err(api.post(BATCH.format("s"), json={}), 400, "invalid_messages")
    _err(api.post(BATCH.format("s"), json={"messages": {"payload": 1}}), 400, "invalid_messages")
    _err(api.post(BATCH.format("s"), json={"messages": None}), 400, "invalid_messages")
    _err(api.post(BATCH.format("s"), json={"messages": [{"payload": 1}], "colour": "red"}), 400, "invalid_colour")
    _err(api.post(BATCH.format("s"), json={"messages": [{"payload": 1}], "project": 5}), 400, "invalid_project")
    _err(api.post(BATCH.format("s"), json=[{"payload": 1}]), 400)
    _err(api.post(BATCH.format("s"), content=b"{nope", headers={"content-type": "application/json"}), 400)
    _err(api.post(BATCH.format("s"), content=b'{"messages": [{"payload": "\xff"}]}',
                  headers={"content-type": "application/json"}), 400)
    # The body parser's rules hold for the whole body: the request is refused, naming the place.
    e = _err(api.post(BATCH.format("s"), content=b'{"messages": [{"payload": 1}, {"payload": "a\\u0000b"}]}',
                      headers={"content-type": "application/json"}), 400, "invalid_messages")
    assert e["message"].startswith("messages.1.payload: ")
    _err(api.post(BATCH.format("s"), content=b'{"messages": [{"payload": NaN}]}',
                  headers={"content-type": "application/json"}), 400, "invalid_messages")
    _err(api.post(BATCH.format("has space"), json={"messages": [{"payload": 1}]}), 400, "invalid_name")
    _err(api.post(BATCH.format("s") + "?project=nowhere", json={"messages": [{"payload": 1}]}), 404,
         "project_not_found")
    _err(api.post(BATCH.format("s"), json={"messages": [{"payload": 1}], "project": "nowhere"}), 404,
         "project_not_found")
    assert _batch(api, "s", [{"payload": i} for i in range(100)])[-1]["offset"] == 99  # 100 is fine
    _err(api.get("/v1/streams/none"), 404)  # nothing above created another stream


def test_a_batch_that_publishes_nothing_creates_no_stream(api):
    results = _batch(api, "never", [{"key": "a"}, {"payload": 1, "expires_at": "2001-01-01T00:00:00Z"}])
    assert [r["ok"] for r in results] == [False, False]
    _err(api.get("/v1/streams/never"), 404, "stream_not_found")
    assert _batch(api, "never", [{"payload": 1}])[0]["ok"]  # the first that publishes creates it
    assert api.get("/v1/streams/never").json()["messages"] == 1


def test_projects_roles_and_tenants(api, gateway, make_tenant):
    tenancy.ensure_project(api.tenant.tenant_id, "payments")
    assert _batch(api, "orders", [{"payload": 1}], project="payments")[0]["offset"] == 0
    r = api.post(BATCH.format("orders") + "?project=payments", json={"messages": [{"payload": 2}]})
    assert r.json()["results"][0]["offset"] == 1
    with client(gateway.url, api.tenant.key_for("write", project="payments")) as scoped:
        r = scoped.post(BATCH.format("orders") + "?project=default", json={"messages": [{"payload": 3}]})
        assert r.json()["results"][0]["offset"] == 2  # its own project, whatever it names
    assert api.get("/v1/streams/orders?project=payments").json()["messages"] == 3
    assert api.get("/v1/streams/orders/messages/2?project=payments").json()["project"] == "payments"
    _err(api.get("/v1/streams/orders"), 404)
    with client(gateway.url, None) as anon:
        _err(anon.post(BATCH.format("orders"), json={"messages": [{"payload": 1}]}), 401, "unauthorized")
    with client(gateway.url, api.tenant.key_for("read")) as reader:
        _err(reader.post(BATCH.format("orders"), json={"messages": [{"payload": 1}]}), 403, "forbidden")
    other = make_tenant()
    with client(gateway.url, other.key) as c:
        assert _batch(c, "orders", [{"payload": "theirs"}], project="default")[0]["offset"] == 0
        _err(c.post(BATCH.format("orders"), json={"messages": [{"payload": 1}], "project": "payments"}), 404,
             "project_not_found")


def test_idempotency_within_and_across_batches(api):
    first = _batch(api, "s", [
        {"payload": "a", "idempotency_key": "A"},
        {"payload": "b", "idempotency_key": "B"},
        {"payload": "a again", "idempotency_key": "A"},       # repeats item 0 of this batch
        {"payload": "refused", "idempotency_key": "C", "expires_at": "2001-01-01T00:00:00Z"},
        {"payload": "c", "idempotency_key": "C"},             # the refused one did not take C
    ])
    assert [(r["ok"], r.get("replayed")) for r in first] == [(True, False), (True, False), (True, True),
                                                            (False, None), (True, False)]
    assert first[2] == {**first[0], "replayed": True}
    assert api.get(f"/v1/streams/s/messages/{first[4]['offset']}").json()["payload"] == "c"
    # The whole batch again (a client's retry): every message answers as before and nothing lands.
    again = _batch(api, "s", [
        {"payload": "x", "idempotency_key": "A"}, {"payload": "y", "idempotency_key": "B"},
        {"payload": "z", "idempotency_key": "A"}, {"payload": "w", "idempotency_key": "C"},
    ])
    assert [r["replayed"] for r in again] == [True] * 4
    assert [(r["id"], r["offset"]) for r in again] == [(first[i]["id"], first[i]["offset"]) for i in (0, 1, 0, 4)]
    assert api.get("/v1/streams/s").json()["messages"] == 3
    # Mixed: stored keys replay, new ones land (payloads large enough that the batch compresses).
    big = "p" * 2000
    mixed = _batch(api, "s", [{"payload": big, "idempotency_key": "D"}, {"payload": big, "idempotency_key": "B"},
                              {"payload": big + "!", "key": "k"}])
    assert [r["replayed"] for r in mixed] == [False, True, False]
    assert mixed[1] == {**first[1], "replayed": True}
    assert [r["offset"] for r in mixed] == [3, 1, 4]
    # Single publishes and batches share the keys.
    single = api.post("/v1/streams/s/messages", json={"payload": "s", "idempotency_key": "D"}).json()
    assert single["replayed"] is True and single["message"]["id"] == mixed[0]["id"]
    assert single["message"]["payload"] == big  # the original, read back from the log
    api.post("/v1/streams/s/messages", json={"payload": "e", "idempotency_key": "E"})
    assert _batch(api, "s", [{"payload": "e2", "idempotency_key": "E"}])[0]["replayed"] is True
    stored = {m["offset"]: m["payload"] for m in api.get("/v1/streams/s/messages").json()["messages"]}
    assert stored == {0: "a", 1: "b", 2: "c", 3: big, 4: big + "!", 5: "e"}


def test_the_backlog_cap_is_checked_once_per_batch(api):
    api.post("/v1/streams", json={"name": "capped", "max_backlog": 3})
    api.post("/v1/streams/capped/subscriptions", json={"name": "w"})
    # Below the cap a batch is admitted whole, even past the cap (as a single publish is checked once).
    results = _batch(api, "capped", [{"payload": i, "key": f"k{i}", "idempotency_key": f"i{i}"} for i in range(5)])
    assert all(r["ok"] for r in results)
    e = _err(api.post(BATCH.format("capped"), json={"messages": [{"payload": 9, "idempotency_key": "i0"},
                                                                 {"payload": 10}]}), 429, "backlog_full")
    assert "backlog cap of 3" in e["message"]
    assert api.get("/v1/streams/capped").json()["messages"] == 5  # nothing of it landed
    assert [r["replayed"] for r in _batch(api, "capped", [{"payload": 0, "idempotency_key": "i0"}])] == [True]
    refused = _batch(api, "capped", [{"key": "no payload"}])  # nothing would land: no 429
    assert refused[0]["error"]["code"] == "invalid_payload"
    got = api.post("/v1/streams/capped/subscriptions/w/consume", json={"max_messages": 3}).json()["messages"]
    api.post("/v1/streams/capped/subscriptions/w/ack", json={"receipts": [m["receipt"] for m in got]})
    assert _batch(api, "capped", [{"payload": 11}])[0]["ok"]  # backlog 2 again, below the cap


def test_subscriptions_receive_a_batch_in_key_order(api):
    api.post("/v1/streams", json={"name": "s"})
    api.post("/v1/streams/s/subscriptions", json={"name": "w"})
    _batch(api, "s", [{"payload": {"k": k, "n": n}, "key": k} for n in range(3) for k in ("a", "b")]
           + [{"payload": "later", "key": "c", "deliver_at": _iso(timedelta(hours=1))}])
    seen: dict[str, list[int]] = {"a": [], "b": []}
    for _ in range(3):
        got = api.post("/v1/streams/s/subscriptions/w/consume", json={"max_messages": 10}).json()["messages"]
        assert sorted(m["key"] for m in got) == ["a", "b"]  # one per key in flight, the scheduled one waits
        for m in got:
            seen[m["key"]].append(m["payload"]["n"])
        api.post("/v1/streams/s/subscriptions/w/ack", json={"receipts": [m["receipt"] for m in got]})
    assert seen == {"a": [0, 1, 2], "b": [0, 1, 2]}
    assert api.get("/v1/streams/s/subscriptions/w").json()["acked"] == 6


def test_one_round_trip_per_batch(tenant, monkeypatch):
    p = tenant.principal
    service.publish(p, "s", None, [Outgoing(payload=0)])  # warm the pool's connection
    sent: list[str] = []
    real = psycopg.Connection.execute

    def counting(self, query, *args, **kwargs):
        sent.append(str(query))
        return real(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", counting)
    items = [Outgoing(payload={"n": i}, key=f"k{i % 7}", idempotency_key=f"i{i % 50}") for i in range(100)]
    answers = service.publish_each(p, "s", None, items + [Refused("invalid_payload", "payload: Field required")])
    assert len(sent) == 1 and "keyed_stream_publish" in sent[0]
    assert [a[1] for a in answers[:100]] == [False] * 50 + [True] * 50 and isinstance(answers[100], Refused)
    sent.clear()
    service.publish(p, "new-stream", None, [Outgoing(payload=1)])  # a first publish creates it in the same call
    assert len(sent) == 1


def test_the_domains_all_or_nothing_publish_raises_the_first_refusal(tenant):
    p = tenant.principal
    past = datetime.now(UTC) - timedelta(days=1)
    with pytest.raises(Invalid) as error:
        service.publish(p, "s", None, [Outgoing(payload=1), Outgoing(payload=2, expires_at=past)])
    assert error.value.code == "invalid_expires_at"
    with pytest.raises(Exception):  # noqa: B017 - the stream was never created
        service.get_stream(p, "s", None)
    answers = service.publish_each(p, "s", None, [Outgoing(payload=1), Outgoing(payload=2, expires_at=past)])
    assert isinstance(answers[1], Refused) and answers[1].code == "invalid_expires_at" and answers[1].status == 400
    assert service.get_stream(p, "s", None)["messages"] == 1
    service.create_stream(p, "capped", None, None, 1)
    service.publish(p, "capped", None, [Outgoing(payload=1)])
    with pytest.raises(TooManyRequests):
        service.publish_each(p, "capped", None, [Outgoing(payload=2)])


def test_concurrent_batches_with_shared_idempotency_keys_publish_each_key_once(tenant):
    """Eight threads publish overlapping batches into a stream none of them has created: each key is
    published exactly once, every answer for a key is that one message, and nothing else lands."""
    p = tenant.principal
    threads_n, rounds, keys_n = 8, 6, 120
    answers: list[tuple[str, dict, bool]] = []
    guard = threading.Lock()
    errors: list[BaseException] = []
    start = threading.Barrier(threads_n)

    def worker(t: int) -> None:
        try:
            start.wait()
            for r in range(rounds):
                # each batch: 40 shared keys chosen by thread and round, plus 5 messages of its own
                shared = [(t * 7 + r * 13 + j * 3) % keys_n for j in range(40)]
                batch = [Outgoing(payload={"key": k}, key=f"u{k % 9}", idempotency_key=f"K{k}") for k in shared]
                batch += [Outgoing(payload={"own": (t, r, j)}, key=f"t{t}") for j in range(5)]
                got = service.publish_each(p, "race", None, batch)
                with guard:
                    for out, a in zip(batch, got, strict=True):
                        assert not isinstance(a, Refused), a
                        answers.append((out.idempotency_key or f"own-{a[0]['offset']}", a[0], a[1]))
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    by_key: dict[str, list[tuple[dict, bool]]] = {}
    for key, doc, replayed in answers:
        by_key.setdefault(key, []).append((doc, replayed))
    shared_keys = {k for k in by_key if k.startswith("K")}
    for key in shared_keys:
        docs = by_key[key]
        assert sum(1 for _, replayed in docs if not replayed) == 1, key  # published once
        assert len({(d["offset"], d["id"]) for d, _ in docs}) == 1, key  # every answer is that message
    own = [k for k in by_key if k.startswith("own-")]
    assert len(own) == threads_n * rounds * 5
    stream = service.get_stream(p, "race", None)
    assert stream["messages"] == len(shared_keys) + len(own)
    stored = service.browse(p, "race", None, key=None, status=None, q=None, limit=500, before_offset=None)
    offsets = [m["offset"] for m in stored["messages"]]
    assert sorted(offsets) == list(range(stream["messages"]))  # gapless, no duplicate
    assert sorted(m["idempotency_key"] for m in stored["messages"] if m["idempotency_key"]) == sorted(shared_keys)


def test_batch_publishers_and_acking_consumers_at_once_lose_double_and_deadlock_nothing(tenant):
    """Three threads publish batches while four consume and ack: every message is delivered exactly
    once, in order per key, and no call fails (a publish took the subscription row before the units
    an ack held, and the two deadlocked)."""
    p = tenant.principal
    service.publish(p, "live", None, [Outgoing(payload=0, key="warmup")])
    service.create_subscription(p, "live", None, "w", max_deliveries=5, lease_ms=30_000, start="latest")
    producers, batches, keys_each = 3, 30, 4
    seen: dict[str, list[int]] = {f"p{w}k{k}": [] for w in range(producers) for k in range(keys_each)}
    guard, done, errors = threading.Lock(), threading.Event(), []

    def producer(w: int) -> None:
        try:
            for b in range(batches):
                got = service.publish_each(p, "live", None, [
                    Outgoing(payload={"seq": b * 3 + j}, key=f"p{w}k{k}") for j in range(3) for k in range(keys_each)])
                assert not any(isinstance(a, Refused) for a in got)
        except BaseException as e:  # reported below
            errors.append(e)

    def consumer() -> None:
        try:
            while True:
                got = service.consume(p, "live", None, "w", max_messages=5, lease_ms=None, wait_ms=0)["messages"]
                if not got:
                    if done.is_set():
                        return
                    time.sleep(0.005)
                    continue
                with guard:
                    for m in got:
                        if m["key"] in seen:
                            seen[m["key"]].append(m["payload"]["seq"])
                assert service.ack(p, "live", None, "w", [m["receipt"] for m in got])["lost"] == []
        except BaseException as e:  # reported below
            errors.append(e)

    pthreads = [threading.Thread(target=producer, args=(w,)) for w in range(producers)]
    cthreads = [threading.Thread(target=consumer) for _ in range(4)]
    for t in pthreads + cthreads:
        t.start()
    for t in pthreads:
        t.join(timeout=120)
    done.set()
    for t in cthreads:
        t.join(timeout=120)
    assert not errors, errors
    assert seen == {k: list(range(batches * 3)) for k in seen}
    sub = service.get_subscription(p, "live", None, "w")
    assert (sub["pending"], sub["acked"]) == (0, producers * batches * 3 * keys_each)
