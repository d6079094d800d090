"""No key creates or obtains more power than it holds, over HTTP: a work key bound by every field
it can be mints, rotates, revokes, reads and lists only keys whose operations, subject, IP
allowlist and expiry are each within its own (a table: every field against every rule); a tenant
key is bound by its role's operations and its expiry; a key limited to some scopes (which the
resolver keeps off the key routes) is held to them by the domain too. The three exploits of the
issue come first."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import pytest

from postbox import db, tenancy
from postbox.errors import Forbidden
from postbox.work import keys
from support.http import client
from support.work_api import ALL_OPERATIONS, W, fresh_key_cache
from support.work_api import error as _error
from support.work_api import ok as _ok

_fresh_cache = pytest.fixture(autouse=True)(fresh_key_cache)

VIEW, PUBLISH, CONSUME, MANAGE = ALL_OPERATIONS
DENIED = "AUTHZ_PERMISSION_DENIED"


def keys_path(api) -> str:
    return f"{W}/tenants/{api.tenant.tenant_id}/api-keys"


def mint(api, **fields) -> dict:
    body = {"subject_id": "agent-7", "allowed_operations": ALL_OPERATIONS, **fields}
    return _ok(api.post(keys_path(api), json=body), 201)


def refused_field(r) -> str:
    """The field a 403 names as beyond the caller's power."""
    found = _error(r, 403, DENIED)
    assert "beyond its own power" in found["message"], found
    return found["details"]["field"]


def stored(key_id: str) -> tuple:
    with db.connection() as conn:
        return conn.execute("SELECT key_hash, rotated_at, revoked_at FROM api_keys WHERE id = %s",
                            (key_id,)).fetchone()


# ---- the three exploits ------------------------------------------------------------------

def test_a_manage_only_key_cannot_rotate_a_stronger_key_nor_read_its_secret(api, gateway, scope):
    manager = mint(api, subject_id="ops", allowed_operations=[MANAGE])
    victim = mint(api, subject_id="ops", allowed_operations=ALL_OPERATIONS)
    before = stored(victim["id"])
    with client(gateway.url, manager["key"]) as c:
        r = c.post(f"{keys_path(api)}/{victim['id']}/rotate")
    assert refused_field(r) == "allowed_operations" and "pbx_" not in r.text
    assert stored(victim["id"]) == before  # not rotated: the victim's secret is the same and works
    with client(gateway.url, victim["key"]) as v:
        _ok(v.get(f"{W}/scopes/{scope['id']}"))


def test_a_work_key_cannot_mint_another_subject_into_an_acl_closed_scope(api, gateway, scope):
    _ok(api.post(f"{W}/scopes/{scope['id']}/acl/grants",
                 json={"actor_type": "user", "actor_id": "admin", "role": "manager"}), 201)
    manager = mint(api, subject_type="service", subject_id="ops", allowed_operations=ALL_OPERATIONS)
    with client(gateway.url, manager["key"]) as c:
        _error(c.get(f"{W}/scopes/{scope['id']}"), 403, DENIED)  # the scope is closed to it
        r = c.post(keys_path(api), json={"subject_type": "user", "subject_id": "admin", "label": "escalated",
                                         "allowed_operations": ALL_OPERATIONS})
    assert refused_field(r) == "subject" and "pbx_" not in r.text
    assert "user:admin" in r.json()["error"]["message"]
    assert [k["label"] for k in _ok(api.get(keys_path(api)))] == [""]  # only the manager: nothing minted


def test_a_bound_key_cannot_mint_a_key_without_its_ip_allowlist_or_expiry(api, gateway):
    bound = mint(api, subject_id="ops", allowed_operations=[MANAGE], ip_allowlist=["127.0.0.0/8"],
                 expires_in_days=7)
    with client(gateway.url, bound["key"]) as c:
        body = {"subject_id": "ops", "allowed_operations": [MANAGE]}
        assert refused_field(c.post(keys_path(api), json={**body, "expires_in_days": 7})) == "ip_allowlist"
        assert refused_field(c.post(keys_path(api), json={**body, "ip_allowlist": ["127.0.0.1"]})) == "expires_at"
        # within both, it may
        _ok(c.post(keys_path(api), json={**body, "ip_allowlist": ["127.0.0.1"], "expires_in_days": 6}), 201)


# ---- the table: every field against every rule, for every key operation -------------------------

EQUAL, NARROWER, WIDER, ABSENT = "equal", "narrower", "wider", "absent"
CALLER = {"subject_type": "service", "subject_id": "boss", "allowed_operations": [MANAGE, PUBLISH],
          "ip_allowlist": ["127.0.0.0/8"]}
CASES = [  # (field, case, what the other key has instead of the caller's own)
    ("allowed_operations", EQUAL, {"allowed_operations": [PUBLISH, MANAGE]}),
    ("allowed_operations", NARROWER, {"allowed_operations": [PUBLISH]}),
    ("allowed_operations", WIDER, {"allowed_operations": [MANAGE, PUBLISH, CONSUME]}),
    ("allowed_operations", WIDER, {"allowed_operations": [VIEW]}),
    ("subject", EQUAL, {}),
    ("subject", WIDER, {"subject_type": "user", "subject_id": "admin"}),
    ("subject", WIDER, {"subject_type": "agent"}),
    ("ip_allowlist", EQUAL, {"ip_allowlist": ["127.0.0.0/8"]}),
    ("ip_allowlist", NARROWER, {"ip_allowlist": ["127.0.0.1/32", "127.9.0.0/16"]}),
    ("ip_allowlist", WIDER, {"ip_allowlist": ["0.0.0.0/0"]}),
    ("ip_allowlist", WIDER, {"ip_allowlist": ["127.0.0.0/8", "10.0.0.0/8"]}),
    ("ip_allowlist", ABSENT, {"ip_allowlist": None}),
    ("expires_at", EQUAL, {}),
    ("expires_at", NARROWER, {"expires_at": None, "expires_in_days": 1}),
    ("expires_at", WIDER, {"expires_at": None, "expires_in_days": 31}),
    ("expires_at", ABSENT, {"expires_at": None}),
]
VERBS = ("mint", "rotate", "revoke", "read")


@pytest.fixture
def boss(api):
    """The caller: a work key bound by operations, subject, addresses (the test client's) and 30 days."""
    return mint(api, **CALLER, expires_in_days=30)


def other_key(boss: dict, change: dict) -> dict:
    """The body of a key equal to the caller's, but for `change` (a None drops the field)."""
    body = {**CALLER, "expires_at": boss["expires_at"], **change}
    return {k: v for k, v in body.items() if v is not None}


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize(("field", "case", "change"), CASES,
                         ids=[f"{f}-{case}-{i}" for i, (f, case, _) in enumerate(CASES)])
def test_every_field_against_every_rule(api, gateway, boss, verb, field, case, change):
    body = {**other_key(boss, change), "label": "other"}
    allowed = case in (EQUAL, NARROWER)
    target = None if verb == "mint" else mint(api, **body)  # made by the tenant's full-power key
    before = target and stored(target["id"])
    with client(gateway.url, boss["key"]) as c:
        if verb == "mint":
            r = c.post(keys_path(api), json=body)
        elif verb == "rotate":
            r = c.post(f"{keys_path(api)}/{target['id']}/rotate")
        elif verb == "revoke":
            r = c.post(f"{keys_path(api)}/{target['id']}/revoke", json={"reason": "test"})
        else:
            r = c.get(f"{keys_path(api)}/{target['id']}")
        listed = {k["label"] for k in _ok(c.get(keys_path(api)))}
    if allowed:
        answer = _ok(r, 201 if verb == "mint" else 200)
        assert ("key" in answer) == (verb in ("mint", "rotate"))
        if verb == "revoke":
            assert answer["state"] == "revoked"
        assert "other" in listed
    else:
        assert refused_field(r) == field and "pbx_" not in r.text
        assert listed == {""}  # the caller sees itself only (it is within its own power)
        if target is None:  # nothing minted
            assert [k["label"] for k in _ok(api.get(keys_path(api)))] == [""]
        else:  # nothing changed
            assert stored(target["id"]) == before


def test_a_key_without_bounds_of_its_own_passes_every_rule(api, gateway):
    """A work key holding all four operations and no bound mints keys of any scope, address and expiry,
    but for its own subject only."""
    free = mint(api, subject_id="free")
    with client(gateway.url, free["key"]) as c:
        _ok(c.post(keys_path(api), json={"subject_id": "free", "allowed_operations": ALL_OPERATIONS}), 201)
        _ok(c.post(keys_path(api), json={"subject_id": "free", "allowed_operations": [VIEW],
                                         "ip_allowlist": ["10.0.0.0/8"], "expires_in_days": 3650}), 201)
        assert refused_field(c.post(keys_path(api), json={"subject_id": "someone-else",
                                                          "allowed_operations": [VIEW]})) == "subject"


def test_a_key_may_rotate_and_revoke_itself(api, gateway, boss):
    with client(gateway.url, boss["key"]) as c:
        rotated = _ok(c.post(f"{keys_path(api)}/{boss['id']}/rotate"))
    with client(gateway.url, rotated["key"]) as c:
        assert _ok(c.post(f"{keys_path(api)}/{boss['id']}/revoke"))["state"] == "revoked"


def test_another_tenants_key_looks_missing(api, gateway, boss, make_tenant):
    other = make_tenant()
    theirs = keys.mint(other.principal, other.tenant_id, {"subject_id": "boss", "subject_type": "service",
                                                          "allowed_operations": [PUBLISH]})
    with client(gateway.url, boss["key"]) as c:
        for r in (c.post(f"{keys_path(api)}/{theirs['id']}/rotate"), c.post(f"{keys_path(api)}/{theirs['id']}/revoke"),
                  c.get(f"{keys_path(api)}/{theirs['id']}")):
            _error(r, 404, "SCAIQUEUE_API_KEY_NOT_FOUND")
        _error(c.post(f"{W}/tenants/{other.tenant_id}/api-keys/{theirs['id']}/rotate"), 404, "NOT_FOUND")


# ---- tenant keys: their role's operations and their expiry bind them; the full-power one is free ----

def test_a_tenant_key_that_expires_mints_no_key_outliving_it(api, gateway):
    expires = datetime.now().astimezone() + timedelta(days=10)
    issued = tenancy.create_key(api.tenant.tenant_id, "manage", expires_at=expires)
    with db.connection() as conn:
        (expires,) = conn.execute("SELECT expires_at FROM api_keys WHERE id = %s", (issued.key_id,)).fetchone()
    forever = mint(api, subject_id="forever")
    with client(gateway.url, issued.key) as c:
        body = {"subject_id": "svc", "allowed_operations": ALL_OPERATIONS}
        assert refused_field(c.post(keys_path(api), json=body)) == "expires_at"
        assert refused_field(c.post(keys_path(api), json={**body, "expires_in_days": 11})) == "expires_at"
        made = _ok(c.post(keys_path(api), json={**body, "expires_at": expires.isoformat()}), 201)
        assert datetime.fromisoformat(made["expires_at"]) == expires
        assert refused_field(c.post(f"{keys_path(api)}/{forever['id']}/rotate")) == "expires_at"
        assert {k["id"] for k in _ok(c.get(keys_path(api)))} == {made["id"]}


def test_a_tenant_key_mints_only_operations_its_role_and_scopes_hold(api, gateway):
    limited = tenancy.create_key(api.tenant.tenant_id, "read", scopes=(MANAGE,))
    with client(gateway.url, limited.key) as c:
        _ok(c.post(keys_path(api), json={"subject_id": "svc", "allowed_operations": [VIEW, MANAGE]}), 201)
        r = c.post(keys_path(api), json={"subject_id": "svc", "allowed_operations": [PUBLISH]})
        assert refused_field(r) == "allowed_operations" and PUBLISH in r.json()["error"]["message"]


def test_the_full_power_tenant_key_manages_every_key(api, boss):
    for other in (mint(api, subject_id="admin", subject_type="user"), boss):
        assert "key" in _ok(api.post(f"{keys_path(api)}/{other['id']}/rotate"))
        assert _ok(api.post(f"{keys_path(api)}/{other['id']}/revoke"))["state"] == "revoked"


def test_expires_at_is_checked(api):
    body = {"subject_id": "a", "allowed_operations": [VIEW]}
    for extra in ({"expires_at": "2001-01-01T00:00:00Z"}, {"expires_at": "2099-01-01T00:00:00Z", "expires_in_days": 1},
                  {"expires_at": "2099-01-01T00:00:00"}):
        found = _error(api.post(keys_path(api), json={**body, **extra}), 422, "VALIDATION_ERROR")
        assert found["details"][0]["field"] == "expires_at", (extra, found)


# ---- allowed scopes, through the domain (a key limited to scopes never reaches the key routes) ----

@pytest.mark.parametrize(("case", "pick"), [(EQUAL, "ab"), (NARROWER, "b"), (WIDER, "ac"), (WIDER, "c"),
                                            (ABSENT, None)])
@pytest.mark.parametrize("verb", VERBS)
def test_allowed_scopes_against_every_rule(tenant, verb, case, pick):
    ids = {s: keys_scope(tenant, s) for s in "abc"}
    made = keys.mint(tenant.principal, tenant.tenant_id, {"subject_id": "boss", "allowed_operations": [MANAGE],
                                                          "allowed_scopes": [ids["a"], ids["b"]]})
    caller = tenancy.resolve_key(made["key"])
    assert caller.allowed_scopes is not None
    body = {"subject_id": "boss", "allowed_operations": [MANAGE], "label": "other",
            **({} if pick is None else {"allowed_scopes": [ids[s] for s in pick]})}
    target = None if verb == "mint" else keys.mint(tenant.principal, tenant.tenant_id, body)
    act = {"mint": lambda: keys.mint(caller, tenant.tenant_id, body),
           "rotate": lambda: keys.rotate(caller, tenant.tenant_id, target["id"]),
           "revoke": lambda: keys.revoke(caller, tenant.tenant_id, target["id"], None),
           "read": lambda: keys.get_key(caller, tenant.tenant_id, target["id"])}[verb]
    listed = {k["label"] for k in keys.list_keys(caller, tenant.tenant_id)}
    if case in (EQUAL, NARROWER):
        act()
        assert "other" in listed or verb == "mint"
    else:
        with pytest.raises(Forbidden) as refused:
            act()
        assert refused.value.details == {"field": "allowed_scopes"}
        assert listed == {""}


def keys_scope(tenant, slug: str) -> str:
    from postbox.work import scopes

    return str(scopes.create_scope(tenant.principal, {"slug": f"s-{slug}-{uuid.uuid4().hex[:6]}"})["id"])
