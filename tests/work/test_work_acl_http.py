"""The work surface's ACL over HTTP: the ACL routes and their codes, grants closing a scope to work
keys, deny entries winning over grants and key rights, conditions, and every scope route refusing
an actor the ACL does not let in."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from postbox import db
from support.http import client
from support.work_api import ALL_OPERATIONS, W, fresh_key_cache
from support.work_api import error as _error
from support.work_api import ok as _ok

ALL = ALL_OPERATIONS


_fresh_cache = pytest.fixture(autouse=True)(fresh_key_cache)



def work_key(api, gateway, subject: str, operations=ALL):
    made = _ok(api.post(f"{W}/tenants/{api.tenant.tenant_id}/api-keys",
                        json={"subject_id": subject, "subject_type": "agent", "allowed_operations": operations}), 201)
    return client(gateway.url, made["key"])


def acl(scope) -> str:
    return f"{W}/scopes/{scope['id']}/acl"


def grant(api, scope, actor_id, role, actor_type="agent", **extra):
    return _ok(api.post(acl(scope) + "/grants", json={"actor_type": actor_type, "actor_id": actor_id, "role": role,
                                                      **extra}), 201)


def entry(api, scope, queue, actor_id, role, effect, actor_type="agent"):
    return _ok(api.post(acl(scope) + "/queue-acl", json={"queue_id": queue["id"], "actor_type": actor_type,
                                                         "actor_id": actor_id, "role": role, "effect": effect}), 201)


def messages(scope, queue) -> str:
    return f"{W}/scopes/{scope['id']}/queues/{queue['id']}/messages"


def test_acl_routes(api, scope, jobs):
    assert _ok(api.get(acl(scope))) == {"grants": [], "queue_acl": [], "trusted_scopes": []}
    g = grant(api, scope, "bob", "viewer", conditions={"not_after": "2999-01-01T00:00:00Z"})
    assert g["actor_type"] == "agent" and g["role"] == "viewer" and g["scope_id"] == scope["id"]
    assert g["conditions"] == {"not_after": "2999-01-01T00:00:00Z"}
    e = entry(api, scope, jobs, "bob", "publisher", "deny")
    assert e["queue_id"] == jobs["id"] and e["effect"] == "deny"
    allow = _ok(api.post(acl(scope) + "/queue-acl", json={"queue_id": jobs["id"], "actor_type": "agent",
                                                          "actor_id": "eve", "role": "consumer"}), 201)
    assert allow["effect"] == "allow" and allow["conditions"] is None
    target = _ok(api.post(f"{W}/scopes", json={"slug": "partner"}), 201)
    t = _ok(api.post(acl(scope) + "/trusted-scopes", json={"target_scope_id": target["id"]}), 201)
    assert t["direction"] == "outbound" and t["identity_mode"] == "source" and t["allowed_queues"] is None
    found = _ok(api.get(acl(scope)))
    assert [x["id"] for x in found["grants"]] == [g["id"]]
    assert [x["id"] for x in found["queue_acl"]] == [e["id"], allow["id"]]
    assert [x["id"] for x in found["trusted_scopes"]] == [t["id"]]
    for kind, made in (("grants", g), ("queue-acl", e), ("trusted-scopes", t)):
        assert _ok(api.delete(f"{acl(scope)}/{kind}/{made['id']}")) == {"id": made["id"], "deleted": True}
        _error(api.delete(f"{acl(scope)}/{kind}/{made['id']}"), 404, "SCAIQUEUE_ACL_ENTRY_NOT_FOUND")
        _error(api.delete(f"{acl(scope)}/{kind}/not-an-id"), 404, "SCAIQUEUE_ACL_ENTRY_NOT_FOUND")
    assert _ok(api.get(acl(scope)))["queue_acl"] == [allow]
    missing = {"id": str(uuid.uuid4())}
    for r in (api.get(acl(missing)), api.post(acl(missing) + "/grants", json={"actor_type": "agent",
                                                                              "actor_id": "x", "role": "viewer"}),
              api.delete(f"{acl(missing)}/grants/{uuid.uuid4()}")):
        _error(r, 404, "SCAIQUEUE_SCOPE_NOT_FOUND")


def test_acl_routes_refuse_what_does_not_parse(api, scope, jobs, make_tenant):
    base = acl(scope)
    other_scope = _ok(api.post(f"{W}/scopes", json={"slug": "target"}), 201)
    g = {"actor_type": "agent", "actor_id": "a", "role": "viewer"}
    for path, body, field in (
        ("/grants", {**g, "role": "owner"}, "role"),
        ("/grants", {**g, "colour": 1}, "colour"),
        ("/grants", {"actor_id": "a", "role": "viewer"}, "actor_type"),
        ("/grants", {**g, "actor_type": "Bad Type"}, "actor_type"),
        ("/grants", {**g, "actor_type": "system"}, "actor_type"),
        ("/queue-acl", {**g, "queue_id": jobs["id"], "actor_type": "redacted"}, "actor_type"),
        ("/grants", {**g, "conditions": {"message_types": ["x"]}}, "conditions.message_types"),
        ("/grants", {**g, "conditions": {"not_before": "yesterday"}}, "conditions.not_before"),
        ("/grants", {**g, "conditions": {"not_before": "2030-01-01T00:00:00"}}, "conditions.not_before"),
        ("/grants", {**g, "conditions": {"not_before": "2030-01-02T00:00:00Z", "not_after": "2030-01-01T00:00:00Z"}},
         "conditions"),
        ("/queue-acl", {**g, "queue_id": jobs["id"], "effect": "maybe"}, "effect"),
        ("/queue-acl", g, "queue_id"),
        ("/queue-acl", {**g, "queue_id": str(uuid.uuid4())}, "queue_id"),
        ("/queue-acl", {**g, "queue_id": "nope"}, "queue_id"),
        ("/trusted-scopes", {"target_scope_id": "nope"}, "target_scope_id"),
        ("/trusted-scopes", {"target_scope_id": scope["id"]}, "target_scope_id"),
        ("/trusted-scopes", {"target_scope_id": str(uuid.uuid4())}, "target_scope_id"),
        ("/trusted-scopes", {"target_scope_id": other_scope["id"], "direction": "sideways"}, "direction"),
        ("/trusted-scopes", {"target_scope_id": other_scope["id"], "identity_mode": "anyone"}, "identity_mode"),
        ("/trusted-scopes", {"target_scope_id": other_scope["id"], "allowed_queues": [jobs["id"]]}, "allowed_queues.0"),
        ("/trusted-scopes", {"target_scope_id": other_scope["id"], "allowed_types": ["no spaces"]}, "allowed_types.0"),
    ):
        found = _error(api.post(base + path, json=body), 422, "VALIDATION_ERROR")
        assert found["details"][0]["field"] == field, (body, found)
    foreign = make_tenant()
    with client(str(api.base_url), foreign.key) as stranger:  # another tenant's scope is missing, not forbidden
        _error(stranger.get(base), 404, "SCAIQUEUE_SCOPE_NOT_FOUND")
    _ok(api.post(base + "/trusted-scopes", json={"target_scope_id": other_scope["id"]}), 201)
    _error(api.post(base + "/trusted-scopes", json={"target_scope_id": other_scope["id"]}), 409,
           "SCAIQUEUE_ACL_CONFLICT")


def test_acl_routes_need_manage(api, gateway, scope):
    with work_key(api, gateway, "viewer-only", ["scaiqueue:view"]) as c:
        _error(c.get(acl(scope)), 403, "AUTHZ_PERMISSION_DENIED")
        _error(c.post(acl(scope) + "/grants", json={"actor_type": "agent", "actor_id": "me", "role": "manager"}),
               403, "AUTHZ_PERMISSION_DENIED")


def test_grants_close_a_scope_to_work_keys(api, gateway, scope, jobs, other):
    with work_key(api, gateway, "alice") as alice, work_key(api, gateway, "bob") as bob:
        _ok(alice.get(f"{W}/scopes/{scope['id']}"))  # no grants yet: allowed_operations are enough
        assert scope["id"] in [x["id"] for x in _ok(alice.get(f"{W}/scopes"))]
        grant(api, scope, "bob", "viewer")
        _error(alice.get(f"{W}/scopes/{scope['id']}"), 403, "AUTHZ_PERMISSION_DENIED")
        assert scope["id"] not in [x["id"] for x in _ok(alice.get(f"{W}/scopes"))]  # nor listed
        assert scope["id"] in [x["id"] for x in _ok(bob.get(f"{W}/scopes"))]
        assert scope["id"] in [x["id"] for x in _ok(api.get(f"{W}/scopes"))]
        _error(alice.post(messages(scope, jobs), json={"body": "one"}), 403, "AUTHZ_PERMISSION_DENIED")
        _ok(bob.get(f"{W}/scopes/{scope['id']}/queues"))
        _error(bob.post(messages(scope, jobs), json={"body": "one"}), 403, "AUTHZ_PERMISSION_DENIED")
        entry(api, scope, jobs, "bob", "publisher", "allow")  # an allow entry adds on that queue only
        _ok(bob.post(messages(scope, jobs), json={"body": "one"}), 201)
        _error(bob.post(messages(scope, other), json={"body": "one"}), 403, "AUTHZ_PERMISSION_DENIED")
        _ok(api.post(messages(scope, other), json={"body": "one"}), 201)  # the tenant key keeps its rights
        grant(api, scope, "alice", "manager")
        _ok(alice.post(messages(scope, other), json={"body": "two"}), 201)
        _ok(alice.post(f"{W}/scopes/{scope['id']}/queues", json={"slug": "made-by-alice"}), 201)


def test_a_grant_is_capped_by_the_keys_operations(api, gateway, scope, jobs):
    grant(api, scope, "carol", "manager")
    with work_key(api, gateway, "carol", ["scaiqueue:view"]) as carol:
        _ok(carol.get(f"{W}/scopes/{scope['id']}"))
        _error(carol.post(messages(scope, jobs), json={"body": "one"}), 403, "AUTHZ_PERMISSION_DENIED")


def test_deny_wins_over_grants_and_key_rights(api, gateway, scope, jobs, other):
    grant(api, scope, "dave", "manager")
    with work_key(api, gateway, "dave") as dave:
        first = _ok(api.post(messages(scope, jobs), json={"body": "a"}), 201)
        second = _ok(api.post(messages(scope, jobs), json={"body": "b"}), 201)
        deny = entry(api, scope, jobs, "dave", "consumer", "deny")
        entry(api, scope, jobs, "dave", "consumer", "allow")  # an allow beside it changes nothing
        refusal = _error(dave.post(messages(scope, jobs) + "/claim", json={}), 403, "AUTHZ_PERMISSION_DENIED")
        assert "denies scaiqueue:consume" in refusal["message"]
        _error(dave.get(f"{W}/scopes/{scope['id']}/queues/{jobs['id']}"), 403, "AUTHZ_PERMISSION_DENIED")
        _error(dave.get(messages(scope, jobs)), 403, "AUTHZ_PERMISSION_DENIED")
        _error(dave.get(f"{messages(scope, jobs)}/{first['id']}"), 403, "AUTHZ_PERMISSION_DENIED")
        _ok(dave.post(messages(scope, jobs), json={"body": "c"}), 201)  # publisher is not denied
        claimed = _ok(api.post(messages(scope, jobs) + "/claim", json={"batch_size": 2}))
        assert {m["id"] for m in claimed} == {first["id"], second["id"]}
        # finishing a message of the denied queue is refused too, one by one and in a batch
        _error(dave.post(f"{W}/scopes/{scope['id']}/messages/{first['id']}/complete", json={}), 403,
               "AUTHZ_PERMISSION_DENIED")
        _error(dave.post(f"{W}/scopes/{scope['id']}/messages/complete-batch", json={"items": [{"id": second["id"]}]}),
               403, "AUTHZ_PERMISSION_DENIED")
        _ok(dave.post(messages(scope, other), json={"body": "d"}), 201)
        _ok(dave.post(messages(scope, other) + "/claim", json={}))  # another queue: the grant holds
        _ok(api.delete(f"{acl(scope)}/queue-acl/{deny['id']}"))
        assert _ok(dave.post(f"{W}/scopes/{scope['id']}/messages/{first['id']}/complete", json={}))["state"] \
            == "completed"


def test_deny_applies_to_tenant_keys_by_key_id(api, scope, jobs):
    entry(api, scope, jobs, api.tenant.principal.key_id, "publisher", "deny", actor_type="api_key")
    _error(api.post(messages(scope, jobs), json={"body": "one"}), 403, "AUTHZ_PERMISSION_DENIED")
    _error(api.get(f"{W}/scopes/{scope['id']}/queues/{jobs['id']}/stats"), 403, "AUTHZ_PERMISSION_DENIED")
    _ok(api.post(messages(scope, jobs) + "/claim", json={}))  # consume is not a publisher's operation


def test_conditions_bound_an_entry_in_time(api, gateway, scope, jobs):
    now = datetime.now(UTC)
    grant(api, scope, "erin", "viewer", conditions={"not_after": (now - timedelta(minutes=1)).isoformat()})
    grant(api, scope, "frank", "viewer", conditions={"not_before": (now + timedelta(hours=1)).isoformat()})
    grant(api, scope, "gina", "viewer", conditions={"not_before": (now - timedelta(hours=1)).isoformat(),
                                                     "not_after": (now + timedelta(hours=1)).isoformat()})
    path = f"{W}/scopes/{scope['id']}"
    with work_key(api, gateway, "erin") as erin, work_key(api, gateway, "frank") as frank, \
            work_key(api, gateway, "gina") as gina:
        _error(erin.get(path), 403, "AUTHZ_PERMISSION_DENIED")
        _error(frank.get(path), 403, "AUTHZ_PERMISSION_DENIED")
        _ok(gina.get(path))


def _scope_routes(scope, queue, message_id, sub_id):
    """Every route under a scope, with a body that parses (what the ACL must refuse before anything)."""
    s, q = f"{W}/scopes/{scope['id']}", f"{W}/scopes/{scope['id']}/queues/{queue['id']}"
    m = f"{s}/messages/{message_id}"
    sub = f"{s}/subscriptions/{sub_id}"
    rule = f"{s}/routing-rules/{uuid.uuid4()}"
    return [
        ("GET", s, None), ("DELETE", s, None),
        ("GET", s + "/audit", None), ("GET", s + "/audit/stats", None), ("GET", s + "/audit/trace/c-1", None),
        *[("POST", f"{s}/{a}", None) for a in ("pause", "resume", "drain", "archive", "unarchive")],
        ("POST", s + "/queues", {"slug": "x"}), ("GET", s + "/queues", None), ("GET", q, None),
        ("DELETE", q, None), ("GET", q + "/stats", None), ("POST", q + "/pause", None), ("POST", q + "/resume", None),
        ("POST", q + "/messages", {"body": "one"}), ("GET", q + "/messages", None),
        ("POST", q + "/messages/claim", {}), ("GET", f"{q}/messages/{message_id}", None),
        ("GET", s + "/messages?correlation_id=c", None),
        *[("POST", f"{m}/{a}", {}) for a in ("complete", "fail", "release", "cancel")],
        ("POST", m + "/extend", {"seconds": 10}),
        *[("POST", f"{s}/messages/{a}-batch", {"items": [{"id": message_id}]})
          for a in ("complete", "fail", "release")],
        ("POST", s + "/routing-rules", {"name": "r", "action": {"type": "archive"}}),
        ("GET", s + "/routing-rules", None),
        ("POST", s + "/routing-rules/test", {"message": {}}), ("GET", rule, None), ("PATCH", rule, {"priority": 1}),
        ("DELETE", rule, None), ("POST", rule + "/enable", None), ("POST", rule + "/disable", None),
        ("POST", s + "/schemas", {"name": "n", "version": "1", "schema": {}}), ("GET", s + "/schemas", None),
        ("GET", s + "/schemas/n/1", None), ("POST", s + "/schemas/n/1/validate", {"payload": 1}),
        ("DELETE", s + "/schemas/n/1", None), ("PUT", q + "/schema", {"name": None}),
        ("POST", s + "/hitl-patterns", {"name": "p", "version": "1", "spec": {"context": {"title": "t"}}}),
        ("GET", s + "/hitl-patterns", None), ("GET", s + "/hitl-patterns/p/1", None),
        ("POST", s + "/hitl-patterns/p/expand", {"version": "1"}),
        ("POST", s + "/subscriptions", {"subscriber_type": "agent", "subscriber_id": "a", "queue_id": queue["id"]}),
        ("GET", s + "/subscriptions", None), ("GET", sub, None), ("PATCH", sub, {"max_in_flight": 5}),
        ("POST", sub + "/pause", None), ("POST", sub + "/resume", None), ("POST", sub + "/claim", {}),
        ("GET", sub + "/deliveries", None),
        *[("POST", f"{sub}/messages/{message_id}/{a}", {}) for a in ("complete", "fail", "release")],
        ("DELETE", sub, None),
        ("POST", f"{W}/subscriptions/{sub_id}/check-processed", {"message_ids": [message_id]}),
        ("GET", s + "/streams", None), ("GET", s + "/streams/k", None), ("POST", s + "/streams/k/cancel", None),
        ("GET", s + "/streams/k/assembled", None),
        ("GET", s + "/acl", None),
        ("POST", s + "/acl/grants", {"actor_type": "agent", "actor_id": "me", "role": "manager"}),
        ("DELETE", f"{s}/acl/grants/{uuid.uuid4()}", None),
        ("POST", s + "/acl/queue-acl", {"queue_id": queue["id"], "actor_type": "agent", "actor_id": "me",
                                        "role": "manager"}),
        ("DELETE", f"{s}/acl/queue-acl/{uuid.uuid4()}", None),
        ("POST", s + "/acl/trusted-scopes", {"target_scope_id": str(uuid.uuid4())}),
        ("DELETE", f"{s}/acl/trusted-scopes/{uuid.uuid4()}", None),
    ]


def test_every_scope_route_refuses_an_actor_the_acl_keeps_out(api, gateway, scope, jobs):
    """In a scope with grants, a work key holding every operation but no grant is refused on every
    route under the scope, before the route looks at anything else."""
    grant(api, scope, "someone-else", "viewer")
    broadcast = _ok(api.post(f"{W}/scopes/{scope['id']}/queues", json={"slug": "fan", "consumer_mode": "broadcast"}),
                    201)
    sub = _ok(api.post(f"{W}/scopes/{scope['id']}/subscriptions",
                       json={"subscriber_type": "agent", "subscriber_id": "x", "queue_id": broadcast["id"]}), 201)
    message = _ok(api.post(messages(scope, jobs), json={"body": "one"}), 201)
    routes = _scope_routes(scope, jobs, message["id"], sub["id"])
    with work_key(api, gateway, "outsider") as outsider:
        for method, path, body in routes:
            r = outsider.request(method, path, json=body) if body is not None else outsider.request(method, path)
            assert r.status_code == 403, (method, path, r.text)
            assert r.json()["error"]["code"] == "AUTHZ_PERMISSION_DENIED", (method, path)
    assert _ok(api.get(f"{W}/scopes/{scope['id']}"))["state"] == "active"  # nothing was done


def test_a_subscription_on_a_denied_queue_cannot_be_claimed(api, gateway, scope):
    fan = _ok(api.post(f"{W}/scopes/{scope['id']}/queues", json={"slug": "fan", "consumer_mode": "broadcast"}), 201)
    sub = _ok(api.post(f"{W}/scopes/{scope['id']}/subscriptions",
                       json={"subscriber_type": "agent", "subscriber_id": "x", "queue_id": fan["id"]}), 201)
    _ok(api.post(messages(scope, fan), json={"body": "one"}), 201)
    with work_key(api, gateway, "henry") as henry:
        entry(api, scope, fan, "henry", "consumer", "deny")
        _error(henry.post(f"{W}/scopes/{scope['id']}/subscriptions/{sub['id']}/claim", json={}), 403,
               "AUTHZ_PERMISSION_DENIED")
        _error(henry.post(f"{W}/scopes/{scope['id']}/subscriptions",
                          json={"subscriber_type": "agent", "subscriber_id": "h", "queue_id": fan["id"]}), 403,
               "AUTHZ_PERMISSION_DENIED")
        assert len(_ok(api.post(f"{W}/scopes/{scope['id']}/subscriptions/{sub['id']}/claim", json={}))) == 1


def test_entries_go_with_their_queue_and_the_scope_opens_again(api, gateway, scope, jobs):
    """Deleting a queue deletes its entries, and the counters the fast path reads follow."""
    doomed = _ok(api.post(f"{W}/scopes/{scope['id']}/queues", json={"slug": "doomed"}), 201)
    entry(api, scope, doomed, "ivy", "viewer", "deny")
    g = grant(api, scope, "ivy", "viewer")
    _ok(api.delete(f"{W}/scopes/{scope['id']}/queues/{doomed['id']}"))
    assert _ok(api.get(acl(scope)))["queue_acl"] == []
    with db.connection() as conn:
        counts = conn.execute("SELECT acl_grants, acl_queue_entries FROM work_scopes WHERE id = %s",
                              (scope["id"],)).fetchone()
    assert counts == (1, 0)
    with work_key(api, gateway, "jack") as jack:
        _error(jack.get(f"{W}/scopes/{scope['id']}"), 403, "AUTHZ_PERMISSION_DENIED")
        _ok(api.delete(f"{acl(scope)}/grants/{g['id']}"))  # no grants left: open again
        _ok(jack.get(f"{W}/scopes/{scope['id']}"))


def test_deny_is_answered_before_a_response_is_checked_against_its_hitl_spec(api, gateway, scope, jobs):
    """A denied consumer learns nothing of a message's HITL spec: 403, not the spec's VALIDATION_ERROR."""
    spec = {"decision": {"field": "decision", "options": ["approve", "reject"]}}
    message = _ok(api.post(messages(scope, jobs), json={"body": "x", "hitl_spec": spec}), 201)
    _ok(api.post(messages(scope, jobs) + "/claim", json={}))
    bad = {"response": {"decision": "maybe"}}
    base = f"{W}/scopes/{scope['id']}/messages"
    _error(api.post(f"{base}/{message['id']}/complete", json=bad), 422, "VALIDATION_ERROR")  # what others get
    with work_key(api, gateway, "kim") as kim:
        entry(api, scope, jobs, "kim", "consumer", "deny")
        _error(kim.post(f"{base}/{message['id']}/complete", json=bad), 403, "AUTHZ_PERMISSION_DENIED")
        _error(kim.post(f"{base}/complete-batch", json={"items": [{"id": message["id"], **bad}]}), 403,
               "AUTHZ_PERMISSION_DENIED")
