"""Cross-scope routing over HTTP: a rule may target a queue of another scope only when a trust lets
its scope route there; without one the rule is refused at creation, and a trust revoked (or one that
does not cover the message's type or queue) stops the routing at publish."""

from __future__ import annotations

import pytest

from support.work_api import W
from support.work_api import error as _error
from support.work_api import ok as _ok


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
