"""Which tenant am I, over HTTP: `GET /tenants/{tenant_id}` by id or by name, every `/tenants/...`
route taking the name too, another tenant (by id or name) answered as a missing one, and
`tenant_id` on every work resource of a tenant (scope, queue, message, subscription, key, job,
audit event), so a tenant read off a scope works in a key route."""

from __future__ import annotations

import uuid

import pytest

from postbox.tenancy import tenant_name
from support.http import client
from support.work_api import ALL_OPERATIONS, W
from support.work_api import error as _error
from support.work_api import ok as _ok


@pytest.fixture
def name(api):
    return tenant_name(api.tenant.tenant_id)


def test_the_tenant_by_id_and_by_name(api, gateway, name):
    by_id = _ok(api.get(f"{W}/tenants/{api.tenant.tenant_id}"))
    assert by_id["id"] == api.tenant.tenant_id and by_id["name"] == name
    assert set(by_id) == {"id", "name", "plan", "created_at"}
    assert _ok(api.get(f"{W}/tenants/{name}")) == by_id
    assert _ok(api.get(f"{W}/tenants/{api.tenant.tenant_id.upper()}")) == by_id  # an id as any UUID spelling
    with client(gateway.url, api.tenant.key_for("read")) as viewer:  # view is enough to read it
        assert _ok(viewer.get(f"{W}/tenants/{name}"))["id"] == api.tenant.tenant_id
        _error(viewer.get(f"{W}/tenants/{name}/api-keys"), 403, "AUTHZ_PERMISSION_DENIED")  # keys need manage
    with client(gateway.url, None) as anonymous:
        _error(anonymous.get(f"{W}/tenants/{name}"), 401, "AUTH_TOKEN_MISSING")


def test_another_tenant_is_missing_by_id_and_by_name(api, make_tenant):
    other = make_tenant()
    for named in (other.tenant_id, tenant_name(other.tenant_id), str(uuid.uuid4()), "no-such-tenant", "dev",
                  "%20", "a" * 300):
        for path in ("", "/api-keys", "/audit", "/data-erasure/jobs/" + str(uuid.uuid4())):
            _error(api.get(f"{W}/tenants/{named}{path}"), 404, "NOT_FOUND")
        mint = {"subject_id": "a", "allowed_operations": ["scaiqueue:view"]}
        _error(api.post(f"{W}/tenants/{named}/api-keys", json=mint), 404, "NOT_FOUND")


def test_a_tenant_read_off_a_scope_names_it_in_the_key_routes(api, gateway, name):
    scope = _ok(api.post(f"{W}/scopes", json={"slug": "billing"}), 201)
    assert scope["tenant_id"] == api.tenant.tenant_id
    tenant = scope["tenant_id"]
    key = _ok(api.post(f"{W}/tenants/{tenant}/api-keys", json={
        "subject_type": "agent", "subject_id": "biller", "allowed_operations": ALL_OPERATIONS}), 201)
    assert key["tenant_id"] == tenant
    assert [k["id"] for k in _ok(api.get(f"{W}/tenants/{name}/api-keys"))] == [key["id"]]
    assert _ok(api.get(f"{W}/tenants/{name}/api-keys/{key['id']}"))["subject_id"] == "biller"
    rotated = _ok(api.post(f"{W}/tenants/{name}/api-keys/{key['id']}/rotate"))
    with client(gateway.url, rotated["key"]) as agent:  # the key's own tenant, by name, read by the key
        assert _ok(agent.get(f"{W}/tenants/{name}"))["id"] == tenant
        assert _ok(agent.get(f"{W}/whoami"))["tenant_id"] == tenant
    assert _ok(api.post(f"{W}/tenants/{name}/api-keys/{key['id']}/revoke", json={"reason": "done"}))["state"] == \
        "revoked"
    events = _ok(api.get(f"{W}/tenants/{name}/audit"))
    assert [e["event_type"] for e in events][:3] == ["scaiqueue.api_key.revoked", "scaiqueue.api_key.rotated",
                                                     "scaiqueue.api_key.created"]
    assert {e["tenant_id"] for e in events} == {tenant}


def test_gdpr_jobs_by_the_tenant_name(api, name):
    for kind in ("data-erasure", "data-export"):
        job = _ok(api.post(f"{W}/tenants/{name}/{kind}", json={"actor_type": "user", "actor_id": "u-1"}), 202)
        assert job["tenant_id"] == api.tenant.tenant_id
        assert _ok(api.get(f"{W}/tenants/{name}/{kind}/jobs/{job['job_id']}"))["job_id"] == job["job_id"]
        assert _ok(api.get(f"{W}/tenants/{api.tenant.tenant_id}/{kind}/jobs/{job['job_id']}"))["tenant_id"] == \
            api.tenant.tenant_id


def test_every_work_resource_carries_its_tenant(api):
    tenant = api.tenant.tenant_id
    scope = _ok(api.post(f"{W}/scopes", json={"slug": "owned"}), 201)
    sp = f"{W}/scopes/{scope['id']}"
    assert _ok(api.get(sp))["tenant_id"] == tenant
    assert {s["tenant_id"] for s in _ok(api.get(f"{W}/scopes"))} == {tenant}
    queue = _ok(api.post(f"{sp}/queues", json={"slug": "jobs"}), 201)
    fan = _ok(api.post(f"{sp}/queues", json={"slug": "fan", "consumer_mode": "broadcast"}), 201)
    assert queue["tenant_id"] == fan["tenant_id"] == tenant
    assert {q["tenant_id"] for q in _ok(api.get(f"{sp}/queues"))} == {tenant}
    assert _ok(api.post(f"{sp}/queues/{queue['id']}/pause"))["tenant_id"] == tenant
    _ok(api.post(f"{sp}/queues/{queue['id']}/resume"))
    qp = f"{sp}/queues/{queue['id']}"
    published = _ok(api.post(f"{qp}/messages", json={"body": "x", "correlation_id": "c-1"}), 201)
    assert published["tenant_id"] == tenant
    [claimed] = _ok(api.post(f"{qp}/messages/claim", json={}))
    assert claimed["tenant_id"] == tenant
    assert _ok(api.get(f"{qp}/messages/{claimed['id']}"))["tenant_id"] == tenant
    done = _ok(api.post(f"{sp}/messages/{claimed['id']}/complete", json={"response": None}))
    assert done["tenant_id"] == tenant
    assert {m["tenant_id"] for m in _ok(api.get(f"{qp}/messages", params={"state": "completed"}))} == {tenant}
    assert {m["tenant_id"] for m in _ok(api.get(f"{sp}/messages", params={"correlation_id": "c-1"}))} == {tenant}
    sub = _ok(api.post(f"{sp}/subscriptions", json={"subscriber_type": "agent", "subscriber_id": "a-1",
                                                     "queue_id": fan["id"]}), 201)
    assert sub["tenant_id"] == tenant
    assert _ok(api.get(f"{sp}/subscriptions/{sub['id']}"))["tenant_id"] == tenant
    _ok(api.post(f"{W}/scopes/{scope['id']}/queues/{fan['id']}/messages", json={"body": "y"}), 201)
    [delivery] = _ok(api.post(f"{sp}/subscriptions/{sub['id']}/claim", json={}))
    assert delivery["tenant_id"] == tenant
    events = _ok(api.get(f"{sp}/audit"))
    assert events and {e["tenant_id"] for e in events} == {tenant}
