"""A key minted by another key is bound by every `deny` entry naming a key it descends from, over
HTTP: a work key denied by its key id mints an equal key (same subject, same operations: within its
power), and that key and the one it mints in turn are denied exactly as it is; a deny added later
binds keys already in use; a tenant key denied by its id binds the work keys it mints. Grants and
allow entries by key id stay with that key: a descendant gains nothing from them."""

from __future__ import annotations

import pytest

from support.http import client
from support.work_api import ALL_OPERATIONS, W, fresh_key_cache
from support.work_api import error as _error
from support.work_api import ok as _ok

_fresh_cache = pytest.fixture(autouse=True)(fresh_key_cache)

DENIED = "AUTHZ_PERMISSION_DENIED"
WORKER = {"subject_type": "agent", "subject_id": "worker", "allowed_operations": ALL_OPERATIONS}


def mint(by, tenant_id: str, **fields) -> dict:
    """A key minted by the client `by` (its own key): the same subject and operations unless told."""
    return _ok(by.post(f"{W}/tenants/{tenant_id}/api-keys", json={**WORKER, **fields}), 201)


def acl(scope) -> str:
    return f"{W}/scopes/{scope['id']}/acl"


def deny_key(api, scope, queue, key_id: str, role: str = "publisher") -> dict:
    return _ok(api.post(acl(scope) + "/queue-acl", json={"queue_id": queue["id"], "actor_type": "api_key",
                                                         "actor_id": key_id, "role": role, "effect": "deny"}), 201)


def messages(scope, queue) -> str:
    return f"{W}/scopes/{scope['id']}/queues/{queue['id']}/messages"


def assert_denied(c, scope, queue, by: str | None = None) -> None:
    """`c` may neither publish to nor view the queue (a publisher's operations); the refusal names
    the key it descends from whose deny it meets (`by`), if not its own."""
    refusal = _error(c.post(messages(scope, queue), json={"body": "x"}), 403, DENIED)
    assert "denies scaiqueue:publish to agent worker" in refusal["message"], refusal
    assert (f"minted from api_key {by}" in refusal["message"]) == (by is not None), refusal
    _error(c.get(f"{W}/scopes/{scope['id']}/queues/{queue['id']}"), 403, DENIED)


def test_a_deny_on_a_key_binds_the_keys_it_mints_and_theirs(api, gateway, scope, jobs, other):
    tenant_id = api.tenant.tenant_id
    a = mint(api, tenant_id)
    deny = deny_key(api, scope, jobs, a["id"])
    with client(gateway.url, a["key"]) as ka:
        assert_denied(ka, scope, jobs)
        b = mint(ka, tenant_id)  # an equal key: within A's power, so the mint itself is allowed
        with client(gateway.url, b["key"]) as kb:
            assert_denied(kb, scope, jobs, by=a["id"])
            c = mint(kb, tenant_id)
            with client(gateway.url, c["key"]) as kc:
                assert_denied(kc, scope, jobs, by=a["id"])
                for k in (ka, kb, kc):  # the deny is on one queue: the others stay open
                    _ok(k.post(messages(scope, other), json={"body": "y"}), 201)
                _ok(api.delete(f"{acl(scope)}/queue-acl/{deny['id']}"))
                for k in (ka, kb, kc):  # and it was the deny on A that kept all three out
                    _ok(k.post(messages(scope, jobs), json={"body": "z"}), 201)


def test_a_deny_added_later_binds_descendants_already_in_use(api, gateway, scope, jobs):
    tenant_id = api.tenant.tenant_id
    a = mint(api, tenant_id)
    with client(gateway.url, a["key"]) as ka:
        b = mint(ka, tenant_id)
    with client(gateway.url, b["key"]) as kb:
        _ok(kb.post(messages(scope, jobs), json={"body": "before"}), 201)  # B resolved (and cached) first
        deny_key(api, scope, jobs, a["id"])
        assert_denied(kb, scope, jobs, by=a["id"])
        rotated = _ok(kb.post(f"{W}/tenants/{tenant_id}/api-keys/{b['id']}/rotate"))
    with client(gateway.url, rotated["key"]) as kb2:  # a rotated key keeps its id, and so its lineage
        assert_denied(kb2, scope, jobs, by=a["id"])


def test_a_tenant_key_denied_by_its_id_binds_the_work_keys_it_mints(api, gateway, scope, jobs):
    tenant_id = api.tenant.tenant_id
    deny_key(api, scope, jobs, api.tenant.principal.key_id)
    _error(api.post(messages(scope, jobs), json={"body": "x"}), 403, DENIED)
    w = mint(api, tenant_id)
    with client(gateway.url, w["key"]) as kw:
        assert_denied(kw, scope, jobs, by=api.tenant.principal.key_id)


def test_a_grant_or_allow_by_key_id_does_not_pass_to_the_keys_it_mints(api, gateway, scope, jobs):
    tenant_id = api.tenant.tenant_id
    a = mint(api, tenant_id)
    _ok(api.post(acl(scope) + "/grants", json={"actor_type": "api_key", "actor_id": a["id"], "role": "manager"}),
        201)  # the scope is now closed to work keys without a grant
    _ok(api.post(acl(scope) + "/queue-acl", json={"queue_id": jobs["id"], "actor_type": "api_key",
                                                  "actor_id": a["id"], "role": "publisher"}), 201)
    with client(gateway.url, a["key"]) as ka:
        _ok(ka.get(f"{W}/scopes/{scope['id']}"))
        _ok(ka.post(messages(scope, jobs), json={"body": "a"}), 201)
        b = mint(ka, tenant_id)
    with client(gateway.url, b["key"]) as kb:
        _error(kb.get(f"{W}/scopes/{scope['id']}"), 403, DENIED)
        assert scope["id"] not in [s["id"] for s in _ok(kb.get(f"{W}/scopes"))]
        _error(kb.post(messages(scope, jobs), json={"body": "b"}), 403, DENIED)


def rotate(by, tenant_id: str, key_id: str):
    return by.post(f"{W}/tenants/{tenant_id}/api-keys/{key_id}/rotate")


def test_a_rotation_hands_over_no_standing_the_acl_keeps_from_the_caller(api, gateway, scope, jobs):
    """Rotating a key hands its new secret to the caller: a key denied by its id may not rotate an
    equal key the deny does not bind (it would publish as that key), nor may a work key rotate one
    given a grant or allow by its id alone; its own key and the keys it minted it may."""
    tenant_id = api.tenant.tenant_id
    a, b = mint(api, tenant_id), mint(api, tenant_id)  # equal keys: each within the other's power
    deny_key(api, scope, jobs, a["id"])
    with client(gateway.url, a["key"]) as ka:
        refused = _error(rotate(ka, tenant_id, b["id"]), 403, DENIED)
        assert refused["details"]["field"] == "acl" and a["id"] in refused["message"], refused
        c = mint(ka, tenant_id)
        with client(gateway.url, _ok(rotate(ka, tenant_id, c["id"]))["key"]) as kc:  # bound by the deny anyway
            assert_denied(kc, scope, jobs, by=a["id"])
        own = _ok(rotate(ka, tenant_id, a["id"]))
    with client(gateway.url, own["key"]) as ka2:
        assert_denied(ka2, scope, jobs)
    with client(gateway.url, b["key"]) as kb:  # B was not rotated: its secret is still its own
        _ok(kb.post(messages(scope, jobs), json={"body": "b"}), 201)

    granted, plain = mint(api, tenant_id, subject_id="w2"), mint(api, tenant_id, subject_id="w2")
    _ok(api.post(acl(scope) + "/grants", json={"actor_type": "api_key", "actor_id": granted["id"],
                                               "role": "manager"}), 201)  # the scope is closed to the rest
    with client(gateway.url, plain["key"]) as kp:
        _error(kp.get(f"{W}/scopes/{scope['id']}"), 403, DENIED)
        refused = _error(rotate(kp, tenant_id, granted["id"]), 403, DENIED)
        assert refused["details"]["field"] == "acl", refused
    with client(gateway.url, _ok(rotate(api, tenant_id, granted["id"]))["key"]) as kg:  # a tenant key may
        _ok(kg.get(f"{W}/scopes/{scope['id']}"))
