"""The routes added for Queen's client, over HTTP: their status codes and refusals."""

from __future__ import annotations

from support.http import client


def test_delete_queue_and_consumer_group_need_manage_and_404_when_missing(api, gateway):
    assert api.delete("/api/v1/resources/queues/nothing").status_code == 404
    assert api.delete("/api/v1/consumer-groups/nobody").json() == {"error": "consumer group not found: nobody"}
    api.post("/api/v1/push", json={"items": [{"queue": "kept", "payload": 1}]})
    assert api.get("/api/v1/pop/queue/kept", params={"consumerGroup": "g"}).status_code == 200
    with client(gateway.url, api.tenant.key_for("write")) as writer:
        assert writer.delete("/api/v1/resources/queues/kept").status_code == 403
        assert writer.delete("/api/v1/consumer-groups/g").status_code == 403
    r = api.delete("/api/v1/consumer-groups/g", params={"deleteMetadata": "false"})
    assert r.status_code == 200 and r.json()["metadataDeleted"] is False and r.json()["partitionsReset"] == 1
    assert api.delete("/api/v1/resources/queues/kept").json()["deleted"] is True


def test_fetch_refuses_bad_entries_and_reads_with_a_read_key(api, gateway):
    assert api.post("/api/v1/fetch", json={"entries": []}).status_code == 400
    r = api.post("/api/v1/fetch", json={"entries": [{"queue": "q", "partition": "p", "offset": -1}]})
    assert r.status_code == 400 and r.json()["field"] == "entries.0.offset"
    api.post("/api/v1/push", json={"items": [{"queue": "q", "partition": "p", "payload": "x"}]})
    with client(gateway.url, api.tenant.key_for("read")) as reader:
        r = reader.post("/api/v1/fetch", json={"entries": [{"queue": "q", "partition": "p"}]})
        assert r.status_code == 200 and [x["payload"] for x in r.json()["entries"][0]["records"]] == ["x"]
        assert reader.get("/health").json()["status"] == "healthy"
        assert reader.get("/api/v1/resources/overview").json()["queues"] == 1
        assert reader.get("/api/v1/resources/queues", params={"limit": 0}).status_code == 400


def test_health_traces_and_unknown_routes_need_a_key(gateway):
    with client(gateway.url, None) as anonymous:
        assert anonymous.get("/health").status_code == 401
        assert anonymous.post("/api/v1/traces", json={"data": {}}).status_code == 401
        assert anonymous.get("/api/v1/status").status_code == 401


def test_traces_refuse_unknown_fields_and_pop_refuses_a_bad_partitions_count(api):
    r = api.post("/api/v1/traces", json={"data": {}, "colour": "red"})
    assert r.status_code == 400 and r.json()["field"] == "colour"
    assert api.get("/api/v1/pop/queue/q", params={"partitions": 0}).status_code == 400
    assert api.get("/api/v1/pop/queue/q", params={"subscriptionMode": "from_beginning"}).status_code == 204


def test_extend_answers_queens_fields(api):
    api.post("/api/v1/push", json={"items": [{"queue": "ext", "payload": 1}]})
    m = api.get("/api/v1/pop/queue/ext").json()["messages"][0]
    r = api.post(f"/api/v1/lease/{m['leaseId']}/extend", json={})
    body = r.json()
    assert r.status_code == 200 and body["success"] is True and body["renewed"] == 1
    assert body["newExpiresAt"] == body["expiresAt"] == body["leaseExpiresAt"]
