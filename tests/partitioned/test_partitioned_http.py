"""The partitioned queue surface over HTTP through the local gateway: every route and status."""

from __future__ import annotations

import json

from functions.api.partitioned.app import handler
from functions.local.lambda_context import LocalContext
from support.events import api_event
from support.http import client


def _push(api, queue, values, partition="Default", **extra):
    r = api.post("/api/v1/push", json={"items": [{"queue": queue, "partition": partition, "payload": v, **extra}
                                                 for v in values]})
    assert r.status_code == 201, r.text
    return r.json()


def test_push_pop_ack_round_trip(api):
    pushed = _push(api, "orders", [{"n": 1}, {"n": 2}])
    assert [p["status"] for p in pushed] == ["queued", "queued"]
    r = api.get("/api/v1/pop/queue/orders", params={"batch": 10})
    assert r.status_code == 200
    messages = r.json()["messages"]
    assert [m["data"] for m in messages] == [{"n": 1}, {"n": 2}] == [m["payload"] for m in messages]
    for key in ("transactionId", "partitionId", "leaseId", "createdAt"):
        assert all(m[key] for m in messages)
    r = api.post("/api/v1/ack", json={"transactionId": messages[-1]["transactionId"], "leaseId": messages[0]["leaseId"],
                                      "partitionId": messages[0]["partitionId"], "status": "completed"})
    assert r.status_code == 200 and r.json()["leaseReleased"] is True
    assert api.get("/api/v1/pop/queue/orders").status_code == 204


def test_data_field_and_partition_route_and_duplicates(api):
    r = api.post("/api/v1/push", json={"items": [
        {"queue": "q", "partition": "p1", "data": "a", "transactionId": "t1"},
        {"queue": "q", "partition": "p1", "data": "b", "transactionId": "t1"},
    ]})
    assert [x["status"] for x in r.json()] == ["queued", "duplicate"]
    assert api.get("/api/v1/pop/queue/q/partition/Default").status_code == 204  # no such partition yet: empty
    r = api.get("/api/v1/pop/queue/q/partition/p1", params={"batch": 5, "autoAck": "true"})
    assert [m["data"] for m in r.json()["messages"]] == ["a"] and r.json()["messages"][0]["leaseId"] is None
    assert api.get("/api/v1/pop/queue/q/partition/p1").status_code == 204


def test_consumer_groups_and_subscription_mode(api):
    _push(api, "g", [1, 2])
    got = api.get("/api/v1/pop/queue/g", params={"batch": 5, "consumerGroup": "a", "autoAck": "true"}).json()
    assert [m["data"] for m in got["messages"]] == [1, 2] and got["messages"][0]["consumerGroup"] == "a"
    got = api.get("/api/v1/pop/queue/g", params={"batch": 5, "consumerGroup": "b", "autoAck": "true"}).json()
    assert [m["data"] for m in got["messages"]] == [1, 2]
    r = api.get("/api/v1/pop/queue/g", params={"consumerGroup": "c", "subscriptionMode": "new"})
    assert r.status_code == 204
    r = api.get("/api/v1/pop/queue/g", params={"consumerGroup": "d", "subscriptionFrom": "2000-01-01T00:00:00Z",
                                                "batch": 5})
    assert len(r.json()["messages"]) == 2
    r = api.get("/api/v1/pop/queue/g", params={"consumerGroup": "e", "subscriptionFrom": "yesterday"})
    assert r.status_code == 400 and "subscriptionFrom" in r.json()["error"]


def test_configure_and_bad_bodies_are_400_naming_the_field(api):
    r = api.post("/api/v1/configure", json={"queue": "c", "options": {"leaseTime": 60, "retryLimit": 1}})
    assert r.status_code == 200
    assert r.json()["options"]["leaseTime"] == 60 and r.json()["options"]["retryLimit"] == 1
    r = api.post("/api/v1/configure", json={"queue": "c", "options": {"leaseTime": "long"}})
    assert r.status_code == 400 and r.json()["error"].startswith("options.leaseTime")
    r = api.post("/api/v1/push", json={"items": [{"partition": "x", "payload": 1}]})
    assert r.status_code == 400 and r.json()["error"].startswith("items.0.queue")
    r = api.post("/api/v1/push", content=b"{nope", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "error" in r.json()
    r = api.post("/api/v1/push", json={"items": [{"queue": "bad name!", "payload": 1}]})
    assert r.status_code == 400 and r.json()["error"].startswith("items.0.queue")
    r = api.post("/api/v1/ack", json={"transactionId": "x"})
    assert r.status_code == 400 and r.json()["error"].startswith("leaseId")
    _push(api, "c", [1])
    r = api.get("/api/v1/pop/queue/c", params={"batch": 0})
    assert r.status_code == 400 and r.json()["error"].startswith("batch")


def test_unknown_and_foreign_queues_are_404(api, gateway, make_tenant):
    # Popping a queue that does not exist (yet) is empty, as in Queen: a worker may start first.
    assert api.get("/api/v1/pop/queue/nothing").status_code == 204
    assert api.get("/api/v1/resources/queues/nothing").json() == {"error": "queue not found: nothing"}
    _push(api, "private", [1])
    msg = api.get("/api/v1/pop/queue/private").json()["messages"][0]
    with client(gateway.url, make_tenant().key) as other:
        assert other.get("/api/v1/pop/queue/private").status_code == 204  # another tenant's: as if missing
        r = other.post("/api/v1/ack", json={"leaseId": msg["leaseId"], "transactionId": msg["transactionId"],
                                            "partitionId": msg["partitionId"]})
        assert r.status_code == 404
        assert other.post(f"/api/v1/lease/{msg['leaseId']}/extend", json={"seconds": 10}).status_code == 409
        assert other.get("/api/v1/dlq", params={"queue": "private"}).status_code == 404
    # nothing changed: the owner's lease still acks
    r = api.post("/api/v1/ack", json={"leaseId": msg["leaseId"], "transactionId": msg["transactionId"]})
    assert r.status_code == 200


def test_stale_lease_is_409_and_extend_and_batch_ack(api):
    _push(api, "l", [1, 2, 3])
    msgs = api.get("/api/v1/pop/queue/l", params={"batch": 3}).json()["messages"]
    r = api.post(f"/api/v1/lease/{msgs[0]['leaseId']}/extend", json={"seconds": 120})
    assert r.status_code == 200 and r.json()["leaseExpiresAt"]
    assert api.post(f"/api/v1/lease/{msgs[0]['leaseId']}/extend").status_code == 200  # the queue's leaseTime
    r = api.post("/api/v1/ack/batch", json={"acknowledgments": [
        {"transactionId": m["transactionId"], "leaseId": m["leaseId"], "partitionId": m["partitionId"],
         "status": "completed"} for m in msgs]})
    assert r.status_code == 200 and r.json()["processed"] == 3
    r = api.post("/api/v1/ack", json={"transactionId": msgs[0]["transactionId"], "leaseId": msgs[0]["leaseId"]})
    assert r.status_code == 409 and "lease" in r.json()["error"]
    assert api.post(f"/api/v1/lease/{msgs[0]['leaseId']}/extend", json={"seconds": 5}).status_code == 409
    assert api.post("/api/v1/lease/not-a-uuid/extend", json={"seconds": 5}).status_code == 409


def test_transaction_commits_together_or_not_at_all(api):
    _push(api, "src", [1])
    m = api.get("/api/v1/pop/queue/src").json()["messages"][0]
    ack = {"type": "ack", "transactionId": m["transactionId"], "leaseId": m["leaseId"],
           "partitionId": m["partitionId"], "status": "completed"}
    r = api.post("/api/v1/transaction", json={"operations": [
        ack, {"type": "push", "items": [{"queue": "sink", "payload": "x"}]},
        {"type": "push", "items": [{"queue": "no/slash", "payload": "y"}]}]})
    assert r.status_code == 400
    assert api.get("/api/v1/resources/queues/sink").status_code == 404  # rolled back: not even created
    r = api.post("/api/v1/transaction", json={"operations": [
        ack, {"type": "push", "items": [{"queue": "sink", "payload": "x"}]}]})
    assert r.status_code == 200 and r.json()["success"] is True
    assert api.get("/api/v1/pop/queue/sink").json()["messages"][0]["data"] == "x"
    assert api.get("/api/v1/pop/queue/src").status_code == 204
    r = api.post("/api/v1/transaction", json={"operations": [{"type": "nope"}]})
    assert r.status_code == 400


def test_failed_acks_dead_letter_and_replay(api):
    api.post("/api/v1/configure", json={"queue": "dl", "options": {"retryLimit": 0}})
    _push(api, "dl", ["bad"])
    m = api.get("/api/v1/pop/queue/dl").json()["messages"][0]
    r = api.post("/api/v1/ack", json={"transactionId": m["transactionId"], "leaseId": m["leaseId"],
                                      "status": "failed", "error": "boom"})
    assert r.status_code == 200 and r.json()["dlq"] is True
    dead = api.get("/api/v1/dlq", params={"queue": "dl"}).json()
    assert dead["total"] == 1 and dead["messages"][0]["data"] == "bad"
    assert api.post("/api/v1/dlq/replay", json={"ids": [dead["messages"][0]["id"]]}).json()["replayed"] == 1
    assert api.get("/api/v1/pop/queue/dl").json()["messages"][0]["data"] == "bad"
    assert api.post("/api/v1/dlq/replay", json={"ids": [dead["messages"][0]["id"]]}).status_code == 404
    assert api.post("/api/v1/dlq/replay", json={"ids": []}).status_code == 400


def test_long_poll_is_bounded_and_returns_204(api):
    api.post("/api/v1/configure", json={"queue": "lp"})
    r = api.get("/api/v1/pop/queue/lp", params={"wait": "true", "timeout": 300})
    assert r.status_code == 204


def test_handler_without_a_key_is_401_and_read_keys_cannot_push(tenant):
    ctx = LocalContext("partitioned")
    result = handler(api_event("POST", "/api/v1/push", body={"items": [{"queue": "q", "payload": 1}]}), ctx)
    assert result["statusCode"] == 401 and "error" in json.loads(result["body"])
    reader = tenant.key_for("read")
    result = handler(api_event("POST", "/api/v1/push", key=reader, body={"items": [{"queue": "q", "payload": 1}]}),
                     ctx)
    assert result["statusCode"] == 403
    result = handler(api_event("GET", "/api/v1/dlq", key=reader), ctx)
    assert result["statusCode"] == 200 and json.loads(result["body"])["total"] == 0


def test_queue_resource_shows_counters_partitions_and_groups(api, gateway, make_tenant):
    _push(api, "res", [1, 2, 3])
    _push(api, "res", [1], partition="P2", transactionId="same")
    _push(api, "res", [1], partition="P2", transactionId="same")  # a duplicate: not counted
    got = api.get("/api/v1/pop/queue/res/partition/Default", params={"batch": 2, "consumerGroup": "g"}).json()
    msg = got["messages"][-1]
    assert api.post("/api/v1/ack", json={"leaseId": msg["leaseId"], "transactionId": msg["transactionId"],
                                         "partitionId": msg["partitionId"]}).status_code == 200
    api.get("/api/v1/pop/queue/res/partition/Default", params={"consumerGroup": "g"})  # holds a lease
    r = api.get("/api/v1/resources/queues/res")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["queue"] == "res" and body["options"]["retryLimit"] == 3
    assert body["counters"] == {"pushed": 4, "acked": 2, "failed": 0, "deadLettered": 0, "replayed": 0}
    parts = {p["name"]: p for p in body["partitions"]}
    assert parts["Default"] == {"name": "Default", "partitionId": msg["partitionId"], "nextOffset": 3,
                                "startOffset": 0,
                                "consumerGroups": [{"name": "g", "committedOffset": 2, "lag": 1, "leased": True}]}
    assert parts["P2"]["nextOffset"] == 1 and parts["P2"]["consumerGroups"] == [
        {"name": "g", "committedOffset": 0, "lag": 1, "leased": False}]
    missing = api.get("/api/v1/resources/queues/nothing")
    assert missing.status_code == 404 and missing.json() == {"error": "queue not found: nothing"}
    with client(gateway.url, make_tenant().key) as other:
        foreign = other.get("/api/v1/resources/queues/res")
        assert foreign.status_code == 404 and foreign.json() == {"error": "queue not found: res"}
    with client(gateway.url, api.tenant.key_for("read")) as reader:
        assert reader.get("/api/v1/resources/queues/res").status_code == 200


def test_queue_resource_without_a_key_is_401(gateway):
    with client(gateway.url, None) as anonymous:
        r = anonymous.get("/api/v1/resources/queues/res")
    assert r.status_code == 401 and "error" in r.json()
