"""The work surface's audit log over HTTP: a message's whole life with its actors, filters, paging,
the correlation trace, stats, management changes, and refused changes that leave nothing behind."""

from __future__ import annotations

from datetime import datetime

import pytest

from postbox import tenancy
from support.clock import wait_for_db_clock
from support.http import client
from support.work_api import W
from support.work_api import error as _error
from support.work_api import ok as _ok

LIFE = ["scaiqueue.message.published", "scaiqueue.message.claimed", "scaiqueue.message.failed",
        "scaiqueue.message.claimed", "scaiqueue.message.completed"]




@pytest.fixture
def worker(gateway, api):
    """A second key of the tenant (role write): the consumer, a different actor from the publisher."""
    key = api.tenant.key_for("write")
    with client(gateway.url, key) as c:
        c.key_id = tenancy.resolve_key(key).key_id
        yield c


def _audit(api, scope, **params):
    r = api.get(f"{W}/scopes/{scope['id']}/audit", params=params)
    assert r.status_code == 200, r.text
    return r.json()


def _life(api, worker, scope, queue, correlation_id="order-1"):
    """publish (api) -> claim (worker) -> fail (worker) -> claim (worker) -> complete (worker)."""
    base = f"{W}/scopes/{scope['id']}"
    msg = _ok(api.post(f"{base}/queues/{queue['id']}/messages",
                       json={"body": {"n": 1}, "correlation_id": correlation_id}), 201)
    first = _ok(worker.post(f"{base}/queues/{queue['id']}/messages/claim", json={"batch_size": 1}))
    assert [m["id"] for m in first] == [msg["id"]]
    failed = _ok(worker.post(f"{base}/messages/{msg['id']}/fail", json={"reason": "flaky"}))
    wait_for_db_clock(datetime.fromisoformat(failed["visible_at"]))  # the retry backoff
    again = _ok(worker.post(f"{base}/queues/{queue['id']}/messages/claim", json={"batch_size": 1}))
    assert [m["id"] for m in again] == [msg["id"]]
    _ok(worker.post(f"{base}/messages/{msg['id']}/complete", json={"response": {"ok": True}}))
    return msg


def test_a_messages_whole_life_in_order_with_its_actors(api, worker, scope, queue):
    msg = _life(api, worker, scope, queue)
    trail = _ok(api.get(f"{W}/scopes/{scope['id']}/audit/trace/order-1"))
    assert [e["event_type"] for e in trail] == LIFE
    assert all(e["resource_type"] == "message" and e["resource_id"] == msg["id"] for e in trail)
    assert all(e["queue_id"] == queue["id"] and e["correlation_id"] == "order-1" for e in trail)
    assert all(e["outcome"] == "success" for e in trail)
    publisher = api.tenant.principal.key_id
    assert [(e["actor_type"], e["actor_id"]) for e in trail] == \
        [("api_key", publisher)] + [("api_key", worker.key_id)] * 4
    assert [e["attempts"] for e in trail] == [0, 1, 1, 2, 2]
    assert trail[2]["details"] == {"reason": "flaky", "retry": True}
    stamps = [datetime.fromisoformat(e["timestamp"]) for e in trail]
    assert stamps == sorted(stamps)
    # The message records its publisher as its source, as the audit log does.
    assert (msg["source_type"], msg["source_id"]) == ("api_key", publisher)


def test_filters_and_paging_newest_first(api, worker, scope, queue):
    _life(api, worker, scope, queue, "order-1")
    other = _ok(api.post(f"{W}/scopes/{scope['id']}/queues/{queue['id']}/messages",
                         json={"body": {"n": 2}, "correlation_id": "order-2"}), 201)
    everything = _audit(api, scope, limit=200)["data"]
    ids = [int(e["id"]) for e in everything]
    assert ids == sorted(ids, reverse=True)  # newest first
    assert everything[0]["resource_id"] == other["id"]
    # management changes are there too, older than the messages
    assert {"scaiqueue.scope.created", "scaiqueue.queue.created"} <= {e["event_type"] for e in everything}

    claimed = _audit(api, scope, event_type="scaiqueue.message.claimed")["data"]
    assert len(claimed) == 2 and {e["actor_id"] for e in claimed} == {worker.key_id}
    mine = _audit(api, scope, actor_id=worker.key_id)["data"]
    assert [e["event_type"] for e in reversed(mine)] == LIFE[1:]
    assert [e["event_type"] for e in _audit(api, scope, resource_type="queue")["data"]] == ["scaiqueue.queue.created"]
    assert [e["resource_id"] for e in _audit(api, scope, correlation_id="order-2")["data"]] == [other["id"]]
    assert _audit(api, scope, correlation_id="nobody")["data"] == []
    combined = _audit(api, scope, event_type="scaiqueue.message.published", correlation_id="order-1")["data"]
    assert len(combined) == 1

    seen, cursor = [], None
    while True:
        page = _audit(api, scope, limit=2, **({"cursor": cursor} if cursor else {}))
        assert len(page["data"]) <= 2
        seen += page["data"]
        cursor = page["meta"]["next_cursor"]
        if cursor is None:
            break
    assert seen == everything
    _error(api.get(f"{W}/scopes/{scope['id']}/audit", params={"cursor": "garbage!"}), 422, "VALIDATION_ERROR")
    _error(api.get(f"{W}/scopes/{scope['id']}/audit", params={"limit": 0}), 422, "VALIDATION_ERROR")


def test_stats_by_event_type(api, worker, scope, queue):
    _life(api, worker, scope, queue)
    stats = _ok(api.get(f"{W}/scopes/{scope['id']}/audit/stats"))
    assert stats == {"scaiqueue.scope.created": 1, "scaiqueue.queue.created": 1,
                     "scaiqueue.message.published": 1, "scaiqueue.message.claimed": 2,
                     "scaiqueue.message.failed": 1, "scaiqueue.message.completed": 1}


def test_management_changes_are_recorded_with_their_actor(api, scope, queue):
    base = f"{W}/scopes/{scope['id']}"
    rule = _ok(api.post(f"{base}/routing-rules", json={"name": "r", "action": {"type": "archive"}}), 201)
    _ok(api.post(f"{base}/routing-rules/{rule['id']}/disable"))
    _ok(api.delete(f"{base}/routing-rules/{rule['id']}"))
    _ok(api.post(f"{base}/queues/{queue['id']}/pause"))
    _ok(api.post(f"{base}/pause"))
    events = list(reversed(_audit(api, scope)["data"]))
    assert [(e["event_type"], e["resource_type"]) for e in events] == [
        ("scaiqueue.scope.created", "scope"), ("scaiqueue.queue.created", "queue"),
        ("scaiqueue.routing_rule.created", "routing_rule"), ("scaiqueue.routing_rule.disabled", "routing_rule"),
        ("scaiqueue.routing_rule.deleted", "routing_rule"), ("scaiqueue.queue.paused", "queue"),
        ("scaiqueue.scope.paused", "scope")]
    assert {(e["actor_type"], e["actor_id"]) for e in events} == {("api_key", api.tenant.principal.key_id)}
    assert events[0]["resource_id"] == scope["id"] and events[1]["resource_id"] == queue["id"]
    assert events[2]["resource_id"] == rule["id"] and events[-1]["details"] == {"from": "active", "to": "paused"}


def test_a_refused_change_writes_nothing(api, worker, scope, queue):
    base = f"{W}/scopes/{scope['id']}"
    msg = _ok(api.post(f"{base}/queues/{queue['id']}/messages", json={"body": {}}), 201)
    before = _audit(api, scope, limit=200)["data"]
    _error(worker.post(f"{base}/messages/{msg['id']}/complete", json={}), 409, "SCAIQUEUE_NOT_CLAIMED")
    _error(api.post(f"{base}/queues", json={"slug": "jobs"}), 409, "SCAIQUEUE_SLUG_CONFLICT")
    _error(api.post(f"{base}/resume"), 409, "SCAIQUEUE_INVALID_TRANSITION")
    _error(api.delete(f"{base}/queues/{queue['id']}"), 409, "SCAIQUEUE_INVALID_TRANSITION")
    viewer = api.tenant.key_for("read")
    with client(api.base_url, viewer) as v:
        _error(v.post(f"{base}/queues/{queue['id']}/messages", json={"body": {}}), 403, "AUTHZ_PERMISSION_DENIED")
    assert _audit(api, scope, limit=200)["data"] == before


def test_audit_routes_need_view_and_a_scope_of_the_tenant(api, gateway, scope, make_tenant):
    stranger = make_tenant()
    with client(gateway.url, stranger.key) as s:
        for path in ("audit", "audit/stats", "audit/trace/x"):
            _error(s.get(f"{W}/scopes/{scope['id']}/{path}"), 404, "SCAIQUEUE_SCOPE_NOT_FOUND")
    _error(api.get(f"{W}/scopes/not-a-scope/audit"), 404, "SCAIQUEUE_SCOPE_NOT_FOUND")
    viewer = api.tenant.key_for("read")
    with client(gateway.url, viewer) as v:
        assert _ok(v.get(f"{W}/scopes/{scope['id']}/audit/stats"))["scaiqueue.scope.created"] == 1


def test_acl_changes_are_recorded_in_the_scope(api, scope, queue):
    base = f"{W}/scopes/{scope['id']}/acl"
    grant = _ok(api.post(f"{base}/grants", json={"actor_type": "agent", "actor_id": "bot", "role": "viewer"}), 201)
    entry = _ok(api.post(f"{base}/queue-acl", json={"queue_id": queue["id"], "actor_type": "agent",
                                                     "actor_id": "bot", "role": "consumer", "effect": "deny"}), 201)
    _ok(api.delete(f"{base}/grants/{grant['id']}"))
    found = {e["event_type"]: e for e in _ok(api.get(f"{W}/scopes/{scope['id']}/audit", params={"limit": 200}))}
    assert found["scaiqueue.acl.grant.added"]["resource_id"] == grant["id"]
    assert found["scaiqueue.acl.grant.added"]["details"]["role"] == "viewer"
    assert found["scaiqueue.acl.queue_acl.added"]["resource_id"] == entry["id"]
    assert found["scaiqueue.acl.grant.removed"]["actor_id"] == api.tenant.principal.key_id
    _error(api.delete(f"{base}/grants/{grant['id']}"), 404, "SCAIQUEUE_ACL_ENTRY_NOT_FOUND")
    removed = _ok(api.get(f"{W}/scopes/{scope['id']}/audit", params={"event_type": "scaiqueue.acl.grant.removed"}))
    assert len(removed) == 1  # the refused second delete wrote nothing


def test_key_and_gdpr_requests_are_tenant_level_events(api):
    tenant = api.tenant.tenant_id
    base = f"{W}/tenants/{tenant}"
    key = _ok(api.post(f"{base}/api-keys", json={"subject_type": "agent", "subject_id": "indexer",
                                                 "allowed_operations": ["scaiqueue:view"]}), 201)
    _ok(api.post(f"{base}/api-keys/{key['id']}/rotate"))
    _ok(api.post(f"{base}/api-keys/{key['id']}/revoke", json={"reason": "retired"}))
    job = _ok(api.post(f"{base}/data-export", json={"actor_type": "agent", "actor_id": "indexer"}), 202)
    events = _ok(api.get(f"{base}/audit"))
    assert [e["event_type"] for e in events] == [
        "scaiqueue.gdpr.export_requested", "scaiqueue.api_key.revoked", "scaiqueue.api_key.rotated",
        "scaiqueue.api_key.created"]
    assert events[0]["resource_id"] == job["job_id"] and events[1]["details"]["reason"] == "retired"
    assert all(e["actor_id"] == api.tenant.principal.key_id and e["scope_id"] is None for e in events)
    assert key["key"] not in str(events)
    page = api.get(f"{base}/audit", params={"limit": 2, "resource_type": "api_key"})
    assert [e["event_type"] for e in page.json()["data"]] == ["scaiqueue.api_key.revoked", "scaiqueue.api_key.rotated"]
    rest = _ok(api.get(f"{base}/audit", params={"cursor": page.json()["meta"]["next_cursor"],
                                                "resource_type": "api_key"}))
    assert [e["event_type"] for e in rest] == ["scaiqueue.api_key.created"]
    _error(api.get(f"{W}/tenants/00000000-0000-0000-0000-000000000000/audit"), 404, "NOT_FOUND")
