"""The flows surface (`/streams/v1`) over HTTP through the local gateway: every route, outcome and
status code of the spec, and the SDK's HTTP runner end to end (pop route + cycle route)."""

from __future__ import annotations

import json

import psycopg

from functions.api.flows.app import handler
from functions.local.lambda_context import LocalContext
from postbox.flows import quotas
from postbox_client.flows import HttpClient, Query, Runner, count
from support.events import api_event
from support.http import client


def _grant(api):
    quotas.grant(api.tenant.tenant_id)


def _register(api, name="q", h="h1", **extra):
    return api.post("/streams/v1/queries", json={"name": name, "source_queue": "src", "sink_queue": "out",
                                                 "config_hash": h, **extra})


def _leased(api, n=2, partition="Default", group="g"):
    r = api.post("/api/v1/push", json={"items": [{"queue": "src", "partition": partition, "payload": i}
                                                 for i in range(n)]})
    assert r.status_code == 201, r.text
    r = api.get(f"/api/v1/pop/queue/src/partition/{partition}", params={"batch": n, "consumerGroup": group})
    return r.json()["messages"]


def test_registration_statuses(api):
    assert _register(api, h="").status_code == 400
    r = api.post("/streams/v1/queries", json={"name": "q", "source_queue": "src"})
    assert r.status_code == 400 and r.json()["success"] is False and "config_hash" in r.json()["error"]

    denied = _register(api)
    assert denied.status_code == 403
    assert denied.json() == {"success": False, "denied": True, "error": denied.json()["error"]}
    assert "grant" in denied.json()["error"]

    _grant(api)
    fresh = _register(api)
    assert fresh.status_code == 200
    body = fresh.json()
    assert set(body) == {"success", "query_id", "name", "config_hash", "fresh", "reset"}
    assert body["success"] is True and body["fresh"] is True and body["reset"] is False and body["name"] == "q"

    again = _register(api, sink_queue="")
    assert again.status_code == 200 and again.json()["fresh"] is False and again.json()["query_id"] == body["query_id"]

    conflict = _register(api, h="h2")
    assert conflict.status_code == 409
    c = conflict.json()
    assert c["success"] is False and "'q'" in c["error"] and c["query_id"] == body["query_id"]

    reset = _register(api, h="h2", reset=True)
    assert reset.status_code == 200 and reset.json()["reset"] is True and reset.json()["config_hash"] == "h2"

    assert api.post("/streams/v1/queries", content=b"not json",
                    headers={"content-type": "application/json"}).status_code == 400


def test_unauthenticated_and_read_only_keys(api, gateway):
    _grant(api)
    with client(gateway.url, None) as anon:
        r = anon.post("/streams/v1/queries", json={"name": "q", "source_queue": "s", "config_hash": "h"})
        assert r.status_code == 401 and r.json()["success"] is False
    with client(gateway.url, api.tenant.key_for("read")) as reader:
        assert reader.post("/streams/v1/queries", json={"name": "q", "source_queue": "s",
                                                        "config_hash": "h"}).status_code == 403


def test_state_get_statuses(api, gateway, make_tenant):
    _grant(api)
    qid = _register(api).json()["query_id"]
    messages = _leased(api, 1)
    pid = messages[0]["partitionId"]
    r = api.post("/streams/v1/cycle", json={"query_id": qid, "partition_id": pid, "consumer_group": "g",
                                            "state_ops": [{"type": "upsert", "key": "b", "value": {"windowEnd": 5}},
                                                          {"type": "upsert", "key": "a", "value": {"x": 1}}]})
    assert r.json()["success"] is True
    r = api.post("/streams/v1/state/get", json={"query_id": qid, "partition_id": pid})
    assert r.status_code == 200 and [row["key"] for row in r.json()["rows"]] == ["a", "b"]
    assert set(r.json()["rows"][0]) == {"key", "value", "updated_at"}
    r = api.post("/streams/v1/state/get", json={"query_id": qid, "partition_id": pid, "keys": ["b", "zz"],
                                                "ripe_at_or_before": 5})
    assert [row["key"] for row in r.json()["rows"]] == ["b"]

    assert api.post("/streams/v1/state/get", json={"query_id": qid}).status_code == 400
    r = api.post("/streams/v1/state/get", json={"partition_id": pid, "query_id": ""})
    assert r.status_code == 400 and r.json()["success"] is False

    other = make_tenant()
    with client(gateway.url, other.key) as them:
        r = them.post("/streams/v1/state/get", json={"query_id": qid, "partition_id": pid})
        assert r.status_code == 404 and r.json() == {"error": "not found"}
        r = them.post("/api/v1/push", json={"items": [{"queue": "theirs", "payload": 1}]})
        their_pid = r.json()[0]["partitionId"]
        r = them.post("/streams/v1/state/get", json={"query_id": qid, "partition_id": their_pid})
        assert r.status_code == 200 and r.json() == {"success": True, "rows": []}   # foreign query: empty


def test_cycle_statuses_and_body(api, gateway, make_tenant):
    _grant(api)
    qid = _register(api).json()["query_id"]
    messages = _leased(api, 2)
    pid = messages[0]["partitionId"]

    typo = api.post("/streams/v1/cycle", json={
        "query_id": qid, "partition_id": pid, "consumer_group": "g",
        "state_ops": [{"type": "upsert", "key": "a", "value": 1}, {"type": "remove", "key": "a"}],
        "ack": {"leaseId": messages[0]["leaseId"], "status": "completed", "count": 2}})
    assert typo.status_code == 200 and typo.json()["success"] is False and "remove" in typo.json()["error"]

    r = api.post("/streams/v1/cycle", json={
        "query_id": qid, "partition_id": pid, "consumer_group": "g",
        "state_ops": [{"type": "upsert", "key": "a", "value": {"acc": 41}}],
        "push_items": [{"queue": "out", "payload": {"count": 41}}],
        "ack": {"transactionId": messages[-1]["transactionId"], "leaseId": messages[0]["leaseId"],
                "status": "completed", "count": 2}})
    assert r.status_code == 200
    body = r.json()
    assert set(body) == {"success", "query_id", "partition_id", "queueName", "state_ops_applied", "push_results",
                         "ack_result"}
    assert body["success"] is True and body["queueName"] == "src" and body["state_ops_applied"] == 1
    assert body["push_results"] == [{"queue": "out", "partition": "Default", "status": "queued", "baseOffset": 0}]
    assert body["push_results"][0]["partition"] == "Default" and body["push_results"][0]["baseOffset"] == 0
    assert body["ack_result"] == {"success": True, "count": 2, "lease_released": True, "dlq": False}
    popped = api.get("/api/v1/pop/queue/out", params={"batch": 10}).json()["messages"]
    assert [m["data"] for m in popped] == [{"count": 41}]

    stale = api.post("/streams/v1/cycle", json={"query_id": qid, "partition_id": pid, "consumer_group": "g",
                                                "push_items": [{"queue": "out", "payload": 2}],
                                                "ack": {"leaseId": messages[0]["leaseId"], "count": 2}})
    assert stale.status_code == 200 and stale.json()["success"] is False and stale.json()["error"]

    assert api.post("/streams/v1/cycle", json={"query_id": qid}).status_code == 400
    assert api.post("/streams/v1/cycle", json={"query_id": "", "partition_id": pid}).status_code == 400
    r = api.post("/streams/v1/cycle", json={"query_id": "00000000-0000-7000-8000-000000000000", "partition_id": pid})
    assert r.status_code == 200 and r.json()["success"] is False and r.json()["error"] == "query not found"

    other = make_tenant()
    with client(gateway.url, other.key) as them:
        r = them.post("/streams/v1/cycle", json={"query_id": qid, "partition_id": pid})
        assert r.status_code == 404 and r.json() == {"error": "not found"}
        r = them.post("/streams/v1/cycle", json={"query_id": qid, "partition_id": pid,
                                                 "state_ops": [{"type": "typo", "key": "k"}]})
        assert r.status_code == 404 and r.json() == {"error": "not found"}      # the gate runs first


def test_a_failed_call_is_a_500(api, monkeypatch):
    from postbox.flows import cycle

    def down(*_a, **_k):
        raise psycopg.OperationalError("connection refused")

    monkeypatch.setattr(cycle, "run", down)
    event = api_event("POST", "/streams/v1/cycle", key=api.tenant.key, body={"query_id": "q", "partition_id": "1"})
    out = handler(event, LocalContext("flows"))
    assert out["statusCode"] == 500 and json.loads(out["body"])["success"] is False


def test_the_http_runner_end_to_end(api, gateway):
    _grant(api)
    r = api.post("/api/v1/push", json={"items": [{"queue": "clicks", "partition": f"u{i % 2}",
                                                  "payload": {"ts": i * 1000}} for i in range(30)]})
    assert r.status_code == 201
    q = Query("clicks.per10s", "clicks").tumbling(10, event_time=lambda e: e["ts"]).aggregate(n=count()).to("c10")
    http = HttpClient(gateway.url, api.tenant.key)
    runner = Runner(q, http, batch=8, wait_ms=0)
    runner.start()
    assert runner.lag()["pending"] == 30  # over HTTP too: the resources call answers the lag
    while runner.run_once(wait_ms=0):
        pass
    runner.flush_idle(force=True)
    assert runner.lag() == {"pending": 0, "behind_s": 0.0}
    assert http.resource("never-pushed") is None
    http.close()
    popped = api.get("/api/v1/pop/queue/c10", params={"batch": 100, "consumerGroup": "x"}).json()["messages"]
    per_partition = sorted((m["data"]["key"], m["data"]["windowStart"], m["data"]["value"]["n"]) for m in popped)
    assert len(per_partition) == 6 and all(n == 5 for *_, n in per_partition)
    assert runner.stats["messages"] == 30 and runner.stats["failed_cycles"] == 0


class _Killed(BaseException):
    pass


class _DyingHttpClient(HttpClient):
    """Dies right before sending its `die_at`-th cycle (popped over HTTP, never committed)."""

    def __init__(self, url, key, die_at):
        super().__init__(url, key)
        self.calls, self.die_at = 0, die_at

    def cycle(self, body):
        self.calls += 1
        if self.calls == self.die_at:
            raise _Killed()
        return super().cycle(body)


def test_the_http_runner_killed_between_pop_and_cycle_restarts_exactly_once(api, gateway):
    from postbox.partitioned import service

    _grant(api)
    service.configure(api.tenant.principal, "kclicks", {"leaseTime": 1})
    r = api.post("/api/v1/push", json={"items": [{"queue": "kclicks", "partition": f"u{i % 2}",
                                                  "payload": {"ts": i * 1000}} for i in range(40)]})
    assert r.status_code == 201

    def query():
        return Query("k.per10s", "kclicks").tumbling(10, event_time=lambda e: e["ts"]).aggregate(n=count()).to("k10")

    doomed = Runner(query(), _DyingHttpClient(gateway.url, api.tenant.key, die_at=2), batch=6, wait_ms=0)
    doomed.start()
    try:
        while doomed.run_once(wait_ms=0):
            pass
        raise AssertionError("the runner should have died")
    except _Killed:
        pass
    http = HttpClient(gateway.url, api.tenant.key)
    restarted = Runner(query(), http, batch=6, wait_ms=0)
    restarted.start()
    while restarted.stats["messages"] + doomed.stats["messages"] < 40:
        restarted.run_once(wait_ms=1500)   # the dead runner's lease expires after 1 s
    restarted.flush_idle(force=True)
    http.close()
    popped = api.get("/api/v1/pop/queue/k10", params={"batch": 100, "consumerGroup": "x"}).json()["messages"]
    windows = sorted((m["data"]["key"], m["data"]["windowStart"], m["data"]["value"]["n"]) for m in popped)
    assert len(windows) == 8 and all(n == 5 for *_, n in windows)   # 2 partitions x 4 windows of 5, once each


def test_an_idle_flush_commits_only_while_its_partition_is_quiet_and_its_rows_unchanged(api, gateway, make_tenant):
    _grant(api)
    qid = _register(api).json()["query_id"]
    messages = _leased(api, 2)                         # group g holds a lease on 2 unconsumed messages
    pid = messages[0]["partitionId"]
    row, key = {"acc": 2, "windowStart": 0, "windowEnd": 60_000}, "tumb:60\u001f1970-01-01T00:00:00.000Z\u001fk"
    flush = {"query_id": qid, "partition_id": pid, "consumer_group": "g", "ack": None, "quiet": True,
             "state_ops": [{"type": "delete", "key": key, "expect": row}],
             "push_items": [{"queue": "out", "payload": {"n": 2}}]}
    due = {"query_id": qid, "consumer_group": "g", "key_prefix": "tumb:60\u001f", "ripe_at_or_before": 60_000}

    busy = api.post("/streams/v1/cycle", json=flush)
    assert busy.status_code == 200 and busy.json()["success"] is False and busy.json()["code"] == "not_quiet"
    r = api.post("/streams/v1/cycle", json={"query_id": qid, "partition_id": pid, "consumer_group": "g",
                                            "state_ops": [{"type": "upsert", "key": key, "value": row}],
                                            "ack": {"leaseId": messages[0]["leaseId"], "count": 2}})
    assert r.json()["success"] is True                 # folded and acked: the partition is quiet now

    assert api.post("/streams/v1/state/due", json=due).json() == {"success": True, "partitions": [pid]}
    assert api.post("/streams/v1/state/due", json={**due, "ripe_at_or_before": 59_999}).json()["partitions"] == []
    waiting = _leased(api, 1)                          # a new message leased: not quiet for g, still due for others
    assert api.post("/streams/v1/state/due", json=due).json()["partitions"] == []
    assert api.post("/streams/v1/state/due", json={**due, "consumer_group": None}).json()["partitions"] == [pid]
    assert api.post("/streams/v1/state/due", json={"consumer_group": "g"}).status_code == 400
    assert api.post("/streams/v1/state/due", json={**due, "limit": 0}).status_code == 400
    other = make_tenant()
    with client(gateway.url, other.key) as them:      # another tenant's query lists nothing
        assert them.post("/streams/v1/state/due", json=due).json() == {"success": True, "partitions": []}

    fresh_group = api.post("/streams/v1/cycle", json={**flush, "consumer_group": "fresh"})
    assert fresh_group.json()["code"] == "not_quiet"   # a group that never consumed the partition
    r = api.post("/streams/v1/cycle", json={"query_id": qid, "partition_id": pid, "consumer_group": "g",
                                            "ack": {"leaseId": waiting[0]["leaseId"]}})
    assert r.json()["success"] is True
    stale = api.post("/streams/v1/cycle", json={
        **flush, "state_ops": [{"type": "delete", "key": key, "expect": {**row, "acc": 1}}]})
    assert stale.json()["success"] is False and stale.json()["code"] == "state_changed"
    assert api.get("/api/v1/resources/queues/out").status_code == 404   # rolled back: no sink
    done = api.post("/streams/v1/cycle", json=flush)
    assert done.json()["success"] is True and done.json()["push_results"][0]["status"] == "queued"
    again = api.post("/streams/v1/cycle", json=flush)
    assert again.json()["success"] is False and again.json()["code"] == "state_changed"
    assert [m["data"] for m in api.get("/api/v1/pop/queue/out", params={"batch": 10}).json()["messages"]] == [{"n": 2}]
    with_ack = api.post("/streams/v1/cycle", json={**flush, "ack": {"leaseId": messages[0]["leaseId"]}})
    assert with_ack.json()["success"] is False and with_ack.json()["code"] == "invalid"
    on_upsert = api.post("/streams/v1/cycle", json={
        **flush, "state_ops": [{"type": "upsert", "key": key, "value": row, "expect": row}]})
    assert on_upsert.json()["success"] is False and "expect" in on_upsert.json()["error"]
