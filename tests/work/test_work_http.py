"""The work surface over HTTP through the local gateway: every route, status and error code."""

from __future__ import annotations

import uuid

from postbox import db
from support.http import client
from support.tenants import new_tenant
from support.work_api import W
from support.work_api import error as _error
from support.work_api import ok as _ok


def _q(scope, queue):
    return f"{W}/scopes/{scope['id']}/queues/{queue['id']}"


def test_scope_routes(api):
    s = _ok(api.post(f"{W}/scopes", json={"slug": "billing", "description": "d", "defaults": {"max_retries": 7}}), 201)
    assert s["display_name"] == "billing" and s["defaults"] == {"max_retries": 7} and s["state"] == "active"
    _error(api.post(f"{W}/scopes", json={"slug": "billing"}), 409, "SCAIQUEUE_SLUG_CONFLICT")
    _ok(api.post(f"{W}/scopes", json={"slug": "aaa"}), 201)
    first = api.get(f"{W}/scopes", params={"limit": 1}).json()
    assert [x["slug"] for x in first["data"]] == ["aaa"] and first["meta"]["next_cursor"]
    second = api.get(f"{W}/scopes", params={"limit": 1, "cursor": first["meta"]["next_cursor"]}).json()
    assert [x["slug"] for x in second["data"]] == ["billing"] and second["meta"]["next_cursor"] is None
    assert _ok(api.get(f"{W}/scopes/{s['id']}"))["slug"] == "billing"
    _error(api.delete(f"{W}/scopes/{s['id']}"), 409, "SCAIQUEUE_INVALID_TRANSITION")
    for action, state in (("pause", "paused"), ("resume", "active"), ("drain", "draining"), ("archive", "archived")):
        assert _ok(api.post(f"{W}/scopes/{s['id']}/{action}"))["state"] == state
    _error(api.post(f"{W}/scopes/{s['id']}/resume"), 409, "SCAIQUEUE_INVALID_TRANSITION")
    assert _ok(api.post(f"{W}/scopes/{s['id']}/unarchive"))["state"] == "active"
    api.post(f"{W}/scopes/{s['id']}/archive")
    assert _ok(api.delete(f"{W}/scopes/{s['id']}")) == {"id": s["id"], "deleted": True}
    _error(api.get(f"{W}/scopes/{s['id']}"), 404, "SCAIQUEUE_SCOPE_NOT_FOUND")
    _error(api.get(f"{W}/scopes/not-a-uuid"), 404, "SCAIQUEUE_SCOPE_NOT_FOUND")


def test_queue_routes(api, scope):
    base = f"{W}/scopes/{scope['id']}/queues"
    q = _ok(api.post(base, json={"slug": "p", "ordering": "priority", "max_depth": 1}), 201)
    assert q["ordering"] == "priority" and q["consumer_mode"] == "competing" and q["overflow_policy"] == "reject"
    _error(api.post(base, json={"slug": "p"}), 409, "SCAIQUEUE_SLUG_CONFLICT")
    listed = _ok(api.get(base))
    assert {x["slug"] for x in listed} == {"p", "_dead_letter", "_events", "_audit", "_integrity", "_corrections"}
    assert _ok(api.get(f"{base}/{q['id']}"))["slug"] == "p"
    _error(api.get(f"{base}/{uuid.uuid4()}"), 404, "SCAIQUEUE_QUEUE_NOT_FOUND")
    _ok(api.post(f"{base}/{q['id']}/messages", json={"body": "one"}), 201)
    _error(api.post(f"{base}/{q['id']}/messages", json={"body": "two"}), 429, "SCAIQUEUE_QUEUE_FULL")
    assert _ok(api.get(f"{base}/{q['id']}/stats"))["depth_current"] == 1
    _error(api.delete(f"{base}/{q['id']}"), 409, "SCAIQUEUE_INVALID_TRANSITION")
    assert _ok(api.post(f"{base}/{q['id']}/pause"))["state"] == "paused"
    _error(api.post(f"{base}/{q['id']}/messages", json={"body": "x"}), 409, "SCAIQUEUE_QUEUE_PAUSED")
    assert _ok(api.post(f"{base}/{q['id']}/messages/claim", json={"batch_size": 5})) == []
    assert _ok(api.post(f"{base}/{q['id']}/resume"))["state"] == "active"
    _error(api.delete(f"{base}/{scope['system_queues']['_events']}"), 409, "SCAIQUEUE_INVALID_TRANSITION")


def test_publish_claim_complete_and_reads(api, scope, queue):
    q = _q(scope, queue)
    m = _ok(api.post(f"{q}/messages", json={"body": {"a": 1}, "type": "order.created", "correlation_id": "c1",
                                           "priority": {"tier": "high", "score": 10}, "hitl_spec": {"k": 1}}), 201)
    assert m["type"] == "order.created" and m["priority"] == {"tier": "high", "score": 10}
    again = api.post(f"{q}/messages", json={"body": "b", "idempotency_key": "k1"})
    replay = api.post(f"{q}/messages", json={"body": "b", "idempotency_key": "k1"})
    assert again.status_code == 201 and replay.status_code == 200
    assert replay.json()["data"]["id"] == again.json()["data"]["id"]
    _error(api.post(f"{q}/messages", json={"body": "c", "idempotency_key": "k1"}), 409,
           "SCAIQUEUE_IDEMPOTENCY_CONFLICT")
    claimed = _ok(api.post(f"{q}/messages/claim", json={"batch_size": 1, "visibility_timeout_s": 60}))
    assert [c["id"] for c in claimed] == [m["id"]] and claimed[0]["hitl_spec"] == {"k": 1}
    token = claimed[0]["claim_token"]
    msg = f"{W}/scopes/{scope['id']}/messages/{m['id']}"
    assert _ok(api.post(f"{msg}/extend", json={"seconds": 30, "claim_token": token}))["state"] == "claimed"
    _error(api.post(f"{msg}/complete", json={"claim_token": str(uuid.uuid4())}), 409, "SCAIQUEUE_NOT_CLAIMED")
    done = _ok(api.post(f"{msg}/complete", json={"response": {"ok": 1}, "claim_token": token}))
    assert done["state"] == "completed" and done["response"] == {"ok": 1}
    for action in ("complete", "fail", "release"):
        _error(api.post(f"{msg}/{action}"), 409, "SCAIQUEUE_NOT_CLAIMED")
    _error(api.post(f"{msg}/extend", json={"seconds": 5}), 409, "SCAIQUEUE_NOT_CLAIMED")
    _error(api.post(f"{msg}/cancel"), 409, "SCAIQUEUE_INVALID_TRANSITION")
    _error(api.post(f"{W}/scopes/{scope['id']}/messages/{uuid.uuid4()}/complete"), 404,
           "SCAIQUEUE_MESSAGE_NOT_FOUND")
    full = _ok(api.get(f"{q}/messages/{m['id']}"))
    assert full["body"] == {"a": 1} and full["response"] == {"ok": 1} and full["hitl_spec"] == {"k": 1}
    _error(api.get(f"{q}/messages/{uuid.uuid4()}"), 404, "SCAIQUEUE_MESSAGE_NOT_FOUND")
    assert [x["id"] for x in _ok(api.get(f"{q}/messages", params={"state": "completed"}))] == [m["id"]]
    chain = _ok(api.get(f"{W}/scopes/{scope['id']}/messages", params={"correlation_id": "c1"}))
    assert [x["type"] for x in chain] == ["order.created", "scaiqueue.message.completed"]
    pending = _ok(api.get(f"{q}/messages", params={"state": "pending"}))
    other = f"{W}/scopes/{scope['id']}/messages/{pending[0]['id']}"
    assert _ok(api.post(f"{other}/cancel"))["state"] == "cancelled"


def test_fail_and_release_over_http(api, scope, queue):
    q = _q(scope, queue)
    m = _ok(api.post(f"{q}/messages", json={"body": "one", "max_retries": 1}), 201)
    msg = f"{W}/scopes/{scope['id']}/messages/{m['id']}"
    api.post(f"{q}/messages/claim", json={})
    assert _ok(api.post(f"{msg}/release"))["state"] == "pending"
    api.post(f"{q}/messages/claim", json={})
    dead = _ok(api.post(f"{msg}/fail", json={"reason": "bad input"}))
    assert dead["state"] == "dead_lettered" and dead["failure_reason"] == "bad input"


def test_batch_extension_completes_fails_and_releases_in_one_call(api, scope, queue):
    q = _q(scope, queue)
    for i in range(6):
        api.post(f"{q}/messages", json={"body": str(i), "max_retries": 5})
    claimed = _ok(api.post(f"{q}/messages/claim", json={"batch_size": 6}))
    items = [{"id": c["id"], "claim_token": c["claim_token"]} for c in claimed]
    base = f"{W}/scopes/{scope['id']}/messages"
    done = _ok(api.post(f"{base}/complete-batch", json={"items": items[:3] + [{"id": str(uuid.uuid4())}]}))
    assert [d["ok"] for d in done] == [True, True, True, False]
    assert done[3]["error"]["code"] == "SCAIQUEUE_MESSAGE_NOT_FOUND"
    failed = _ok(api.post(f"{base}/fail-batch", json={"items": [{**items[3], "reason": "x"}, items[0]]}))
    assert failed[0] == {"id": items[3]["id"], "ok": True, "state": "pending"}
    assert failed[1]["error"]["code"] == "SCAIQUEUE_NOT_CLAIMED"
    released = _ok(api.post(f"{base}/release-batch", json={"items": items[4:]}))
    assert [r["state"] for r in released] == ["pending", "pending"]
    stats = _ok(api.get(f"{q}/stats"))
    assert (stats["depth_pending"], stats["depth_claimed"], stats["completed_total"]) == (3, 0, 3)
    err = _error(api.post(f"{base}/complete-batch", json={"items": []}), 422, "VALIDATION_ERROR")
    assert err["details"][0]["field"] == "items"


def test_validation_errors_name_fields(api, scope, queue):
    q = _q(scope, queue)
    err = _error(api.post(f"{q}/messages", json={"body": "x", "surprise": 1, "priority": {"score": 1001}}), 422,
                 "VALIDATION_ERROR")
    fields = {d["field"]: d["message"] for d in err["details"]}
    assert fields["surprise"] == "unknown field" and "priority.score" in fields
    err = _error(api.post(f"{q}/messages", json={"priority": {"tier": "urgent"}}), 422, "VALIDATION_ERROR")
    assert {d["field"] for d in err["details"]} == {"body", "priority.tier"}
    err = _error(api.post(f"{q}/messages", json={"body": 5}), 422, "VALIDATION_ERROR")
    assert [d["field"] for d in err["details"]] == ["body"]  # one entry, not one per member of str | object
    assert err["message"] == f"body: {err['details'][0]['message']}"  # no `body.str`: the field as details name it
    err = _error(api.post(f"{q}/messages/claim", json={"batch_size": 0}), 422, "VALIDATION_ERROR")
    assert err["details"][0]["field"] == "batch_size"
    _error(api.post(f"{W}/scopes", json={"slug": "Bad Slug"}), 422, "VALIDATION_ERROR")
    _error(api.get(f"{q}/messages", params={"state": "nope"}), 422, "VALIDATION_ERROR")
    _error(api.get(f"{q}/messages", params={"cursor": "!!"}), 422, "VALIDATION_ERROR")
    _error(api.get(f"{W}/scopes/{scope['id']}/messages"), 422, "VALIDATION_ERROR")
    _error(api.post(f"{q}/messages", content=b"{not json", headers={"content-type": "application/json"}), 422,
           "VALIDATION_ERROR")
    big = {"body": "x" * (1024 * 1024 + 10)}
    _error(api.post(f"{q}/messages", json=big), 413, "PAYLOAD_TOO_LARGE")
    assert _ok(api.get(f"{q}/stats"))["depth_current"] == 0  # nothing half-written


def test_auth_errors_and_other_tenants(gateway, api, scope, queue):
    with client(gateway.url, None) as anon:
        _error(anon.get(f"{W}/scopes"), 401, "AUTH_TOKEN_MISSING")
    with client(gateway.url, "pbx_not-a-real-key") as bad:
        _error(bad.get(f"{W}/scopes"), 401, "AUTH_TOKEN_INVALID")
    with client(gateway.url, api.tenant.key_for("read")) as reader:
        assert _ok(reader.get(f"{W}/scopes/{scope['id']}"))["id"] == scope["id"]
        _error(reader.post(f"{_q(scope, queue)}/messages", json={"body": "one"}), 403, "AUTHZ_PERMISSION_DENIED")
        _ok(reader.get(f"{W}/system-agents"))
    with client(gateway.url, api.tenant.key_for("write")) as writer:
        _ok(writer.post(f"{_q(scope, queue)}/messages", json={"body": "one"}), 201)
        _error(writer.post(f"{W}/scopes", json={"slug": "x"}), 403, "AUTHZ_PERMISSION_DENIED")
    other = new_tenant()
    with client(gateway.url, other.key) as stranger:
        _error(stranger.get(f"{W}/scopes/{scope['id']}"), 404, "SCAIQUEUE_SCOPE_NOT_FOUND")
        _error(stranger.post(f"{_q(scope, queue)}/messages", json={"body": "one"}), 404, "SCAIQUEUE_SCOPE_NOT_FOUND")
        assert _ok(stranger.get(f"{W}/scopes")) == []


def test_system_agents_lists_every_agent(api):
    agents = _ok(api.get(f"{W}/system-agents"))
    names = {a["name"] for a in agents}
    assert {"queue-retention", "work-visibility-timeout"} <= names
    for a in agents:
        assert set(a) == {"name", "status", "total_runs", "total_processed", "total_errors", "last_run_at",
                          "last_run_duration_ms", "last_error"}


def test_rate_limited_tenant_gets_429_with_headers(gateway, database_url):
    with db.connection() as conn:
        conn.execute("INSERT INTO plans (name, max_queues, messages_month, max_message_bytes, storage_bytes,"
                     " retention_days, work_requests_minute) VALUES ('tiny-rate', 10, 1000, 1024, 1000000, 1, 3)"
                     " ON CONFLICT (name) DO NOTHING")
    tenant = new_tenant(plan="tiny-rate")
    with client(gateway.url, tenant.key) as c:
        answers = [c.get(f"{W}/scopes") for _ in range(4)]
    assert [r.status_code for r in answers] == [200, 200, 200, 429]
    assert answers[0].headers["x-ratelimit-limit"] == "3" and answers[0].headers["x-ratelimit-remaining"] == "2"
    err = _error(answers[3], 429, "SCAIQUEUE_RATE_LIMITED")
    assert int(answers[3].headers["retry-after"]) >= 1 and err["retry_after"] >= 1


def test_dev_plan_does_not_throttle_a_normal_session(api):
    answers = [api.get(f"{W}/scopes").status_code for _ in range(300)]
    assert answers == [200] * 300
    assert int(api.get(f"{W}/scopes").headers["x-ratelimit-limit"]) >= 10_000


def test_a_database_unavailable_to_the_rate_limiter_is_503_in_the_work_envelope(gateway, tenant, monkeypatch):
    """The plan's limit is read before the routes (and their error mapping) run: a database that is
    unavailable then is the surface's 503 with Retry-After, where it was a 500."""
    from postbox import errors
    from postbox.work import ratelimit

    def unavailable(tenant_id: str) -> int:
        raise errors.Unavailable("The database is unavailable (no connection within 3 s); retry shortly.",
                                 retry_after=2)

    monkeypatch.setattr(ratelimit._limiter, "_read_limit", unavailable)
    with client(gateway.url, tenant.key) as c:
        answer = c.get(f"{W}/scopes")
    _error(answer, 503, "SERVICE_UNAVAILABLE")
    assert answer.headers["retry-after"] == "2"
