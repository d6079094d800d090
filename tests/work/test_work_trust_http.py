"""Cross-scope routing over HTTP: a rule may target a queue of another scope only when a trust lets
its scope route there; without one the rule is refused at creation, and a trust revoked (or one that
does not cover the message's type or queue) stops the routing at publish; a trust that opens a scope
needs a key that may manage it."""

from __future__ import annotations

import pytest

from support.http import client
from support.work_api import ALL_OPERATIONS, W, fresh_key_cache
from support.work_api import error as _error
from support.work_api import ok as _ok

_fresh_cache = pytest.fixture(autouse=True)(fresh_key_cache)


@pytest.fixture
def source(api):
    scope = _ok(api.post(f"{W}/scopes", json={"slug": "source"}), 201)
    inbox = _ok(api.post(f"{W}/scopes/{scope['id']}/queues", json={"slug": "inbox"}), 201)
    return scope, inbox


@pytest.fixture
def target(api):
    scope = _ok(api.post(f"{W}/scopes", json={"slug": "target"}), 201)
    landing = _ok(api.post(f"{W}/scopes/{scope['id']}/queues", json={"slug": "landing"}), 201)
    return scope, landing


def trust(api, scope, target_scope, **fields):
    return _ok(api.post(f"{W}/scopes/{scope['id']}/acl/trusted-scopes",
                        json={"target_scope_id": target_scope["id"], **fields}), 201)


def route_rule(api, scope, target_scope, queue, kind="route"):
    return api.post(f"{W}/scopes/{scope['id']}/routing-rules", json={
        "name": "across", "action": {"type": kind, "queue_id": queue["id"], "target_scope_id": target_scope["id"]}})


def publish(api, scope, queue, **fields):
    return _ok(api.post(f"{W}/scopes/{scope['id']}/queues/{queue['id']}/messages", json={"body": "x", **fields}), 201)


def test_a_rule_into_an_untrusted_scope_is_refused(api, source, target):
    (scope, _), (other, landing) = source, target
    refused = _error(route_rule(api, scope, other, landing), 403, "AUTHZ_PERMISSION_DENIED")
    assert "trust" in refused["message"]
    trust(api, other, scope, direction="outbound")  # the target trusting the source outbound is not it
    _error(route_rule(api, scope, other, landing), 403, "AUTHZ_PERMISSION_DENIED")
    # the queue must be in the target scope
    bad = _error(api.post(f"{W}/scopes/{scope['id']}/routing-rules", json={
        "name": "x", "action": {"type": "route", "queue_id": source[1]["id"], "target_scope_id": other["id"]}}),
        422, "VALIDATION_ERROR")
    assert bad["details"][0]["field"] == "action.queue_id"
    bad = _error(api.post(f"{W}/scopes/{scope['id']}/routing-rules", json={
        "name": "x", "action": {"type": "route", "queue_id": landing["id"], "target_scope_id": "nope"}}),
        422, "VALIDATION_ERROR")
    assert bad["details"][0]["field"] == "action"


def test_routing_across_a_trust_and_its_refusal_once_revoked(api, source, target):
    (scope, inbox), (other, landing) = source, target
    t = trust(api, scope, other, allowed_types=["task"])
    rule = _ok(route_rule(api, scope, other, landing), 201)
    assert rule["action"]["target_scope_id"] == other["id"]
    moved = publish(api, scope, inbox)
    assert moved["queue_id"] == landing["id"] and moved["scope_id"] == other["id"]
    assert moved["source_type"] == "api_key"  # identity_mode source: the publisher stays the source
    kept = publish(api, scope, inbox, type="report")  # a type the trust does not allow: not routed
    assert kept["queue_id"] == inbox["id"] and "not trusted" in kept["labels"]["routing.refused"]
    _ok(api.delete(f"{W}/scopes/{scope['id']}/acl/trusted-scopes/{t['id']}"))
    stopped = publish(api, scope, inbox)
    assert stopped["queue_id"] == inbox["id"] and "routing.refused" in stopped["labels"]
    claimed = _ok(api.post(f"{W}/scopes/{other['id']}/queues/{landing['id']}/messages/claim",
                           json={"batch_size": 10}))
    assert [m["id"] for m in claimed] == [moved["id"]]


def test_an_inbound_trust_of_the_target_and_identity_mode_scope(api, source, target):
    (scope, inbox), (other, landing) = source, target
    trust(api, other, scope, direction="inbound", allowed_queues=[landing["id"]], identity_mode="scope")
    _ok(route_rule(api, scope, other, landing, kind="copy"), 201)
    original = publish(api, scope, inbox)
    assert original["queue_id"] == inbox["id"]
    copies = _ok(api.get(f"{W}/scopes/{other['id']}/queues/{landing['id']}/messages"))
    assert len(copies) == 1 and copies[0]["parent_id"] == original["id"]
    assert copies[0]["source_type"] == "scope" and copies[0]["source_id"] == scope["id"]


def test_allowed_queues_limit_the_trust(api, source, target):
    (scope, _), (other, landing) = source, target
    elsewhere = _ok(api.post(f"{W}/scopes/{other['id']}/queues", json={"slug": "elsewhere"}), 201)
    trust(api, scope, other, allowed_queues=[landing["id"]])
    _ok(route_rule(api, scope, other, landing), 201)
    _error(route_rule(api, scope, other, elsewhere), 403, "AUTHZ_PERMISSION_DENIED")


def test_a_trust_opening_a_scope_needs_a_key_that_may_manage_it(api, gateway, source, target):
    """A trust `outbound` (or `both`) lets the source's rules publish into the target: a key limited
    to the source scope, or one the target's ACL keeps out, cannot open that way in."""
    (scope, inbox), (other, landing) = source, target
    made = _ok(api.post(f"{W}/tenants/{api.tenant.tenant_id}/api-keys", json={
        "subject_id": "scoped", "subject_type": "agent", "allowed_operations": ALL_OPERATIONS,
        "allowed_scopes": [scope["id"]]}), 201)
    with client(gateway.url, made["key"]) as scoped:
        _error(scoped.post(f"{W}/scopes/{other['id']}/queues/{landing['id']}/messages", json={"body": "x"}),
               403, "AUTHZ_PERMISSION_DENIED")
        for direction in ("outbound", "both"):
            _error(scoped.post(f"{W}/scopes/{scope['id']}/acl/trusted-scopes",
                               json={"target_scope_id": other["id"], "direction": direction}),
                   403, "AUTHZ_PERMISSION_DENIED")
        _error(route_rule(scoped, scope, other, landing), 403, "AUTHZ_PERMISSION_DENIED")
        stays = publish(scoped, scope, inbox)
        assert stays["queue_id"] == inbox["id"]
        inbound = _ok(scoped.post(f"{W}/scopes/{scope['id']}/acl/trusted-scopes",  # its own scope opened: its call
                                  json={"target_scope_id": other["id"], "direction": "inbound"}), 201)
    assert _ok(api.get(f"{W}/scopes/{other['id']}/queues/{landing['id']}/messages")) == []
    _ok(api.delete(f"{W}/scopes/{scope['id']}/acl/trusted-scopes/{inbound['id']}"))

    free = _ok(api.post(f"{W}/tenants/{api.tenant.tenant_id}/api-keys", json={
        "subject_id": "manager", "subject_type": "agent", "allowed_operations": ALL_OPERATIONS}), 201)
    _ok(api.post(f"{W}/scopes/{other['id']}/acl/grants",  # the target is closed to work keys but this one
                 json={"actor_type": "agent", "actor_id": "someone-else", "role": "manager"}), 201)
    with client(gateway.url, free["key"]) as manager:
        _error(manager.post(f"{W}/scopes/{scope['id']}/acl/trusted-scopes", json={"target_scope_id": other["id"]}),
               403, "AUTHZ_PERMISSION_DENIED")
        _ok(api.post(f"{W}/scopes/{other['id']}/acl/grants",
                     json={"actor_type": "agent", "actor_id": "manager", "role": "manager"}), 201)
        _ok(manager.post(f"{W}/scopes/{scope['id']}/acl/trusted-scopes", json={"target_scope_id": other["id"]}), 201)
