"""Every auth path over HTTP, on every surface, now that no authorizer runs before the function: the
function resolves the key itself and answers in its own envelope (never API Gateway's bare
`{"message": ...}`): no key, a garbage key, a key revoked (refused once the per-container cache's
bound has passed), another tenant's key, a work key on another surface, and what anonymous
callers may do."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest

from functions import keys
from postbox import config, tenancy
from support.http import client

W = "/v1/modules/scaiqueue"
# (surface, method, path, body) of a route that needs a key; with one, its answer is anything but 401/403
# (a 404 for what the tenant does not have is the key accepted).
ROUTES = [
    ("queues", "GET", "/api/v1/queues", None),
    ("keyed-streams", "GET", "/v1/streams", None),
    ("partitioned", "GET", "/api/v1/resources/overview", None),
    ("flows", "POST", "/streams/v1/state/get", {"query_id": "q", "partition_id": "p"}),
    ("durable", "GET", "/v1/stream/authpaths", None),
    ("work", "GET", f"{W}/scopes", None),
]


def _is_surface_401(surface: str, r) -> bool:
    """A 401 in the surface's own envelope (API Gateway's would be `{"message": "Unauthorized"}`)."""
    body = r.json() if r.content else {}
    if r.status_code != 401 or body == {"message": "Unauthorized"}:
        return False
    return {
        "queues": lambda: "detail" in body,
        "keyed-streams": lambda: body["error"]["code"] == "unauthorized",
        "partitioned": lambda: "error" in body,
        "flows": lambda: body.get("success") is False,
        "durable": lambda: bool(body),
        "work": lambda: body["error"]["code"] in ("AUTH_TOKEN_MISSING", "AUTH_TOKEN_INVALID"),
    }[surface]()


def _call(c, method, path, body):
    return c.request(method, path, json=body) if body is not None else c.request(method, path)


def _accepted(r) -> bool:
    return r.status_code not in (401, 403) and r.status_code < 500


@pytest.mark.parametrize("surface, method, path, body", ROUTES, ids=[r[0] for r in ROUTES])
def test_no_key_and_a_garbage_key_are_the_surfaces_own_401(gateway, surface, method, path, body):
    with client(gateway.url, None) as c:
        r = _call(c, method, path, body)
        assert _is_surface_401(surface, r), (r.status_code, r.text)
    for garbage in ("pbx_" + uuid.uuid4().hex, "not-a-key", "pbx_" + "\xe9" * 10, "x" * 5000):
        for name, value in (("apikey", garbage), ("authorization", f"Bearer {garbage}")):
            with httpx.Client(base_url=gateway.url, timeout=60, headers={name: value.encode("latin-1")}) as c:
                r = _call(c, method, path, body)
                assert _is_surface_401(surface, r), (garbage[:20], name, r.status_code, r.text)


@pytest.mark.parametrize("surface, method, path, body", ROUTES, ids=[r[0] for r in ROUTES])
def test_a_revoked_key_is_refused_within_the_cache_bound(gateway, tenant, monkeypatch, surface, method, path,
                                                         body):
    monkeypatch.setenv("POSTBOX_KEY_CACHE_SECONDS", "1")
    config.reset()
    keys.clear_cache()
    issued = tenancy.create_key(tenant.tenant_id, "manage")
    with client(gateway.url, issued.key) as c:
        assert _accepted(_call(c, method, path, body))
        tenancy.revoke_key(issued.key_id)
        assert _accepted(_call(c, method, path, body))  # the function's cache still holds it
        time.sleep(1.2)
        r = _call(c, method, path, body)
        assert _is_surface_401(surface, r), (r.status_code, r.text)
    keys.clear_cache()


def test_another_tenants_key_sees_none_of_its_resources(gateway, tenant, make_tenant):
    other = make_tenant()
    with client(gateway.url, tenant.key) as mine, client(gateway.url, other.key) as theirs:
        assert mine.post("/api/v1/queues", json={"name": "private-q"}).status_code == 201
        assert mine.post("/v1/streams", json={"name": "private-s"}).status_code in (200, 201)
        assert mine.put("/v1/stream/private-d", content=b"[]",
                        headers={"content-type": "application/json"}).status_code == 201
        scope = mine.post(f"{W}/scopes", json={"slug": "private"}).json()["data"]["id"]
        assert theirs.get("/api/v1/queues/private-q").status_code == 404
        assert theirs.get("/v1/streams/private-s").status_code == 404
        assert theirs.get("/v1/stream/private-d").status_code == 404
        assert theirs.get(f"{W}/scopes/{scope}").status_code == 404
        assert mine.get(f"{W}/scopes/{scope}").status_code == 200


def test_a_work_key_is_403_on_every_other_surface(gateway, tenant):
    with client(gateway.url, tenant.key) as mine:
        minted = mine.post(f"{W}/tenants/{tenant.tenant_id}/api-keys",
                           json={"subject_id": "agent-7", "allowed_operations": ["scaiqueue:view"]})
        assert minted.status_code == 201, minted.text
        work_key = minted.json()["data"]["key"]
    with client(gateway.url, work_key) as c:
        assert c.get(f"{W}/scopes").status_code == 200
        for surface, method, path, body in ROUTES:
            if surface != "work":
                r = _call(c, method, path, body)
                assert r.status_code == 403, (surface, r.status_code, r.text)


def test_anonymous_callers_read_a_public_durable_stream_and_nothing_else(gateway, tenant):
    account = tenancy.tenant_name(tenant.tenant_id)
    with client(gateway.url, tenant.key) as mine:
        r = mine.put("/v1/stream/open-authpaths", content=b"hello",
                     headers={"content-type": "text/plain", "postbox-public": "true"})
        assert r.status_code == 201, r.text
        mine.put("/v1/stream/shut-authpaths", content=b"secret", headers={"content-type": "text/plain"})
    with client(gateway.url, None) as anon:
        r = anon.get(f"/{account}/s.open-authpaths")
        assert r.status_code == 200 and r.text == "hello"
        assert anon.post(f"/{account}/s.open-authpaths", content=b"x",
                         headers={"content-type": "text/plain"}).status_code == 401
        assert anon.get(f"/{account}/s.shut-authpaths").status_code == 401
        for surface, method, path, body in ROUTES:  # nothing else answers a keyless caller
            assert _is_surface_401(surface, _call(anon, method, path, body)), surface


def test_made_up_keys_do_not_push_known_keys_out_of_the_cache(tenant, monkeypatch):
    """A caller trying many made-up keys fills only the cache of keys that resolved to nobody: a known
    key stays cached (no database lookup until its time is up), and neither cache grows without
    bound."""
    looked_up: list[str] = []
    real = keys.resolve_key

    def counted(key: str):
        looked_up.append(key)
        return real(key) if key == tenant.key else None  # the made-up ones: no need to ask the database

    monkeypatch.setattr(keys, "resolve_key", counted)
    keys.clear_cache()
    try:
        assert keys.resolve({"apikey": tenant.key})["authenticated"]
        for n in range(12_000):
            assert not keys.resolve({"apikey": f"pbx_made-up-{n}"})["authenticated"]
        assert keys.resolve({"apikey": tenant.key})["authenticated"]
        assert looked_up.count(tenant.key) == 1
        assert len(keys._unknown) <= keys._UNKNOWN_MAX and len(keys._known) <= keys._KNOWN_MAX
    finally:
        keys.clear_cache()
