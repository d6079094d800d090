"""Work API keys over HTTP: mint, list, get, rotate (grace window), revoke, and the limits the
key resolver enforces (operations, scopes, source address, expiry); a work key on another surface."""

from __future__ import annotations

import json
import uuid

import pytest

from functions.api.work.app import handler
from functions.keys import clear_cache
from functions.local.lambda_context import LocalContext
from postbox import db
from support.events import api_event
from support.http import client
from support.work_api import ALL_OPERATIONS, W, fresh_key_cache
from support.work_api import error as _error
from support.work_api import ok as _ok

ALL = ALL_OPERATIONS


_fresh_cache = pytest.fixture(autouse=True)(fresh_key_cache)


def keys_path(api) -> str:
    return f"{W}/tenants/{api.tenant.tenant_id}/api-keys"


def mint(api, **fields) -> dict:
    return _ok(api.post(keys_path(api), json={"subject_id": "agent-7", "allowed_operations": ALL, **fields}), 201)




def test_mint_list_get_and_the_raw_key_once(api, gateway, scope):
    made = mint(api, subject_type="agent", key_type="agent", label="summariser", expires_in_days=30,
                allowed_scopes=[scope["id"]], ip_allowlist=["127.0.0.1/32"], grace_period_seconds=60)
    assert made["key"].startswith("pbx_") and made["prefix"] == made["key"][:10]
    assert made["tenant_id"] == api.tenant.tenant_id and made["state"] == "active"
    assert made["subject_type"] == "agent" and made["subject_id"] == "agent-7" and made["key_type"] == "agent"
    assert made["allowed_operations"] == sorted(ALL) and made["allowed_scopes"] == [scope["id"]]
    assert made["ip_allowlist"] == ["127.0.0.1/32"] and made["grace_period_seconds"] == 60
    assert made["expires_at"] is not None and made["label"] == "summariser"
    listed = _ok(api.get(keys_path(api)))
    assert [k["id"] for k in listed] == [made["id"]]  # work keys only: the tenant key is not listed
    assert all("key" not in k for k in listed)
    got = _ok(api.get(f"{keys_path(api)}/{made['id']}"))
    assert "key" not in got and got["id"] == made["id"]
    with db.connection() as conn:  # stored hashed, never in the clear
        stored = conn.execute("SELECT key_hash FROM api_keys WHERE id = %s", (made["id"],)).fetchone()[0]
    assert made["key"].encode() not in bytes(stored)
    with client(gateway.url, made["key"]) as agent:
        me = _ok(agent.get(f"{W}/whoami"))
    assert me == {"tenant_id": api.tenant.tenant_id, "project_id": None, "key_id": made["id"], "key_kind": "work",
                  "role": "work", "operations": sorted(ALL), "actor_type": "agent", "actor_id": "agent-7"}
    assert _ok(api.get(f"{W}/whoami"))["key_kind"] == "tenant"


def test_key_routes_refuse_what_does_not_parse(api, scope):
    base = keys_path(api)
    for body, field in (
        ({"allowed_operations": ALL}, "subject_id"),
        ({"subject_id": "a"}, "allowed_operations"),
        ({"subject_id": "a", "allowed_operations": ["scaiqueue:everything"]}, "allowed_operations.0"),
        ({"subject_id": "a", "allowed_operations": ALL, "ip_allowlist": ["10.0.0.0/33"]}, "ip_allowlist"),
        ({"subject_id": "a", "allowed_operations": ALL, "allowed_scopes": ["nope"]}, "allowed_scopes"),
        ({"subject_id": "a", "allowed_operations": ALL, "expires_in_days": 0}, "expires_in_days"),
        ({"subject_id": "a", "allowed_operations": ALL, "grace_period_seconds": -1}, "grace_period_seconds"),
        ({"subject_id": "a", "allowed_operations": ALL, "key_type": "robot"}, "key_type"),
        ({"subject_id": "a", "allowed_operations": ALL, "colour": "red"}, "colour"),
        # a key cannot speak as Postbox itself nor borrow a tenant key's identity
        ({"subject_id": "work-expiry", "allowed_operations": ALL, "subject_type": "system"}, "subject_type"),
        ({"subject_id": "a", "allowed_operations": ALL, "subject_type": "redacted"}, "subject_type"),
        ({"subject_id": "a", "allowed_operations": ALL, "subject_type": "api_key"}, "subject_type"),
    ):
        found = _error(api.post(base, json=body), 422, "VALIDATION_ERROR")
        assert found["details"][0]["field"] == field, (body, found)
    unknown = _error(api.post(base, json={"subject_id": "a", "allowed_operations": ALL,
                                          "allowed_scopes": [str(uuid.uuid4())]}), 422, "VALIDATION_ERROR")
    assert unknown["details"][0]["field"] == "allowed_scopes.0"
    key = mint(api)
    assert _error(api.post(f"{base}/{key['id']}/revoke", json={"reason": 5}), 422,
                  "VALIDATION_ERROR")["details"][0]["field"] == "reason"
    for r in (api.get(f"{base}/{uuid.uuid4()}"), api.get(f"{base}/not-an-id"),
              api.post(f"{base}/{uuid.uuid4()}/rotate"), api.post(f"{base}/{uuid.uuid4()}/revoke", json={})):
        _error(r, 404, "SCAIQUEUE_API_KEY_NOT_FOUND")
    # a tenant key's id is not a work key's
    _error(api.get(f"{base}/{api.tenant.principal.key_id}"), 404, "SCAIQUEUE_API_KEY_NOT_FOUND")


def test_another_tenants_path_is_404(api, make_tenant):
    other = make_tenant()
    for r in (api.get(f"{W}/tenants/{other.tenant_id}/api-keys"),
              api.post(f"{W}/tenants/{other.tenant_id}/api-keys", json={"subject_id": "a", "allowed_operations": ALL}),
              api.get(f"{W}/tenants/not-a-tenant/api-keys")):
        _error(r, 404, "NOT_FOUND")


def test_key_routes_need_manage(api, gateway):
    viewer = mint(api, allowed_operations=["scaiqueue:view"])
    with client(gateway.url, viewer["key"]) as c:
        _error(c.get(keys_path(api)), 403, "AUTHZ_PERMISSION_DENIED")
        _error(c.post(keys_path(api), json={"subject_id": "x", "allowed_operations": ALL}), 403,
               "AUTHZ_PERMISSION_DENIED")
    with client(gateway.url, None) as anonymous:
        _error(anonymous.get(keys_path(api)), 401, "AUTH_TOKEN_MISSING")
    manager = mint(api, allowed_operations=["scaiqueue:manage", "scaiqueue:view"])
    with client(gateway.url, manager["key"]) as c:  # a work key mints only keys within its own operations
        made = _ok(c.post(keys_path(api), json={"subject_id": "agent-7", "allowed_operations": ["scaiqueue:view"]}),
                   201)
        assert made["allowed_operations"] == ["scaiqueue:view"]
        refused = _error(c.post(keys_path(api), json={"subject_id": "agent-7", "allowed_operations": ALL}), 403,
                         "AUTHZ_PERMISSION_DENIED")
        assert "scaiqueue:consume" in refused["message"]


def test_allowed_operations_are_all_a_work_key_holds(api, gateway, scope, queue):
    publisher = mint(api, allowed_operations=["scaiqueue:publish"])
    base = f"{W}/scopes/{scope['id']}/queues/{queue['id']}/messages"
    with client(gateway.url, publisher["key"]) as c:
        _ok(c.post(base, json={"body": "x"}), 201)
        _error(c.post(base + "/claim", json={}), 403, "AUTHZ_PERMISSION_DENIED")
        _error(c.get(f"{W}/scopes/{scope['id']}"), 403, "AUTHZ_PERMISSION_DENIED")
        _error(c.post(f"{W}/scopes", json={"slug": "nope"}), 403, "AUTHZ_PERMISSION_DENIED")


def test_a_work_key_is_refused_on_other_surfaces(api, gateway):
    key = mint(api)
    with client(gateway.url, key["key"]) as c:
        assert c.get("/api/v1/queues").status_code == 403
        assert c.post("/api/v1/queues/q1/send", json={"message": {"a": 1}}).status_code == 403
        assert c.get("/api/v1/resources/queues").status_code == 403  # a partitioned-queue route


def test_allowed_scopes_limit_the_paths(api, gateway, scope, queue):
    other = _ok(api.post(f"{W}/scopes", json={"slug": "elsewhere"}), 201)
    key = mint(api, allowed_scopes=[scope["id"]])
    with client(gateway.url, key["key"]) as c:
        _ok(c.get(f"{W}/scopes/{scope['id']}/queues/{queue['id']}"))
        for r in (c.get(f"{W}/scopes/{other['id']}"), c.get(f"{W}/scopes"), c.get(f"{W}/system-agents"),
                  c.get(keys_path(api))):
            assert "scope" in _error(r, 403, "AUTHZ_PERMISSION_DENIED")["message"]
        _ok(c.get(f"{W}/whoami"))


def test_ip_allowlist_checks_the_source_address(api, gateway, scope):
    inside = mint(api, ip_allowlist=["127.0.0.0/8"])
    outside = mint(api, ip_allowlist=["10.0.0.0/8", "2001:db8::/32"])
    with client(gateway.url, inside["key"]) as c:  # the local gateway passes the client's address
        _ok(c.get(f"{W}/scopes/{scope['id']}"))
    with client(gateway.url, outside["key"]) as c:
        assert "127.0.0.1" in _error(c.get(f"{W}/scopes/{scope['id']}"), 403, "AUTHZ_PERMISSION_DENIED")["message"]
    path = f"{W}/scopes/{scope['id']}"
    allowed = handler(api_event("GET", path, key=outside["key"], source_ip="10.1.2.3"), LocalContext("work"))
    assert allowed["statusCode"] == 200, allowed
    refused = handler(api_event("GET", path, key=outside["key"], source_ip="192.168.0.1"), LocalContext("work"))
    assert refused["statusCode"] == 403 and json.loads(refused["body"])["error"]["code"] == "AUTHZ_PERMISSION_DENIED"


def test_an_expired_key_is_invalid(api, gateway, scope):
    key = mint(api, expires_in_days=1)
    with client(gateway.url, key["key"]) as c:
        _ok(c.get(f"{W}/scopes/{scope['id']}"))
        with db.transaction() as conn:
            conn.execute("UPDATE api_keys SET expires_at = clock_timestamp() - interval '1 second' WHERE id = %s",
                         (key["id"],))
        clear_cache()
        _error(c.get(f"{W}/scopes/{scope['id']}"), 401, "AUTH_TOKEN_INVALID")
    assert _ok(api.get(f"{keys_path(api)}/{key['id']}"))["state"] == "expired"
    _error(api.post(f"{keys_path(api)}/{key['id']}/rotate"), 409, "SCAIQUEUE_INVALID_TRANSITION")


def test_rotation_keeps_the_old_key_for_the_grace_window_then_stops_it(api, gateway, scope):
    key = mint(api, grace_period_seconds=3600)
    rotated = _ok(api.post(f"{keys_path(api)}/{key['id']}/rotate"))
    assert rotated["id"] == key["id"] and rotated["key"] != key["key"] and rotated["rotated_at"] is not None
    assert rotated["previous_valid_until"] is not None
    path = f"{W}/scopes/{scope['id']}"
    with client(gateway.url, key["key"]) as old, client(gateway.url, rotated["key"]) as new:
        _ok(old.get(path))
        _ok(new.get(path))
        assert _ok(old.get(f"{W}/whoami"))["key_id"] == key["id"]  # the same key, the same actor
        with db.transaction() as conn:  # the grace window ends (moved by SQL, never slept through)
            conn.execute("UPDATE api_keys SET previous_valid_until = clock_timestamp() - interval '1 second'"
                         " WHERE id = %s", (key["id"],))
        clear_cache()
        _error(old.get(path), 401, "AUTH_TOKEN_INVALID")
        _ok(new.get(path))
    assert _ok(api.get(f"{keys_path(api)}/{key['id']}"))["previous_valid_until"] is None


def test_rotation_without_grace_stops_the_old_key_at_once(api, gateway, scope):
    key = mint(api, grace_period_seconds=0)
    rotated = _ok(api.post(f"{keys_path(api)}/{key['id']}/rotate"))
    with client(gateway.url, key["key"]) as old, client(gateway.url, rotated["key"]) as new:
        _error(old.get(f"{W}/scopes/{scope['id']}"), 401, "AUTH_TOKEN_INVALID")
        _ok(new.get(f"{W}/scopes/{scope['id']}"))


def test_revoke_ends_the_key_and_its_grace(api, gateway, scope):
    key = mint(api, grace_period_seconds=3600)
    rotated = _ok(api.post(f"{keys_path(api)}/{key['id']}/rotate"))
    revoked = _ok(api.post(f"{keys_path(api)}/{key['id']}/revoke", json={"reason": "leaked in a log"}))
    assert revoked["state"] == "revoked" and revoked["revoked_reason"] == "leaked in a log"
    assert revoked["revoked_at"] is not None
    for raw in (key["key"], rotated["key"]):
        with client(gateway.url, raw) as c:
            _error(c.get(f"{W}/scopes/{scope['id']}"), 401, "AUTH_TOKEN_INVALID")
    _error(api.post(f"{keys_path(api)}/{key['id']}/revoke"), 409, "SCAIQUEUE_INVALID_TRANSITION")
    _error(api.post(f"{keys_path(api)}/{key['id']}/rotate"), 409, "SCAIQUEUE_INVALID_TRANSITION")
    assert _ok(api.get(f"{keys_path(api)}/{key['id']}"))["state"] == "revoked"


def test_a_second_rotation_stops_the_first_secret_at_once(api, gateway, scope):
    key = mint(api, grace_period_seconds=3600)
    second = _ok(api.post(f"{keys_path(api)}/{key['id']}/rotate"))
    third = _ok(api.post(f"{keys_path(api)}/{key['id']}/rotate"))
    path = f"{W}/scopes/{scope['id']}"
    with client(gateway.url, key["key"]) as first_c, client(gateway.url, second["key"]) as second_c, \
            client(gateway.url, third["key"]) as third_c:
        _error(first_c.get(path), 401, "AUTH_TOKEN_INVALID")
        _ok(second_c.get(path))  # the secret it replaced, in its grace period
        _ok(third_c.get(path))
