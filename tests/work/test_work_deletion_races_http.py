"""Rows of a scope, or naming a queue, made while that scope or queue is deleted, over HTTP through the
local gateway: each request answers as if they had come one after another. The deletion answers 200;
a creation that came first answers 201 (and its row goes with the scope or queue), one that came after
answers as a creation in a missing scope (404) or naming a missing queue (422). Each creation looked
the scope or queue up, the deletion committed, and its insert then met the foreign key: a 503."""

from __future__ import annotations

import uuid
from collections import Counter
from functools import partial

import pytest

from support.http import client
from support.interleaved import each_at_once
from support.work_api import W
from support.work_api import ok as _ok

ROUNDS, CREATORS = 6, 4
SPEC = {"context": {"title": "Refund for {{customer}}"}, "decision": {"field": "d", "options": ["y", "n"]}}


def _name() -> str:
    return f"r{uuid.uuid4().hex[:8]}"


# What is made in the doomed scope: (path under the scope, body) given the scope's queue id.
IN_SCOPE = {
    "grant": lambda q: ("/acl/grants", {"actor_type": "agent", "actor_id": _name(), "role": "viewer"}),
    "queue-acl": lambda q: ("/acl/queue-acl", {"queue_id": q, "actor_type": "agent", "actor_id": _name(),
                                               "role": "viewer"}),
    "routing-rule": lambda q: ("/routing-rules", {"name": _name(), "action": {"type": "archive"}}),
    "schema": lambda q: ("/schemas", {"name": _name(), "version": "1", "schema": {"type": "object"}}),
    "hitl-pattern": lambda q: ("/hitl-patterns", {"name": _name(), "version": 1, "spec": SPEC,
                                                  "parameters": [{"name": "customer"}]}),
    "subscription": lambda q: ("/subscriptions", {"subscriber_type": "agent", "subscriber_id": _name(),
                                                  "queue_id": q}),
}

# What names the doomed queue, made in its (live) scope: (path under the scope, body) given its id.
NAMING_QUEUE = {
    "queue-acl": IN_SCOPE["queue-acl"],
    "subscription": IN_SCOPE["subscription"],
    "routing-rule": lambda q: ("/routing-rules", {"name": _name(), "action": {"type": "route", "queue_id": q}}),
}


def _status(gateway, key: str, method: str, path: str, body: dict | None = None) -> tuple[str, int]:
    with client(gateway.url, key) as c:
        r = c.request(method, path, json=body)
        return method, r.status_code


def _scope_with_queue(api) -> tuple[str, str]:
    scope = _ok(api.post(f"{W}/scopes", json={"slug": _name()}), 201)["id"]
    return scope, _ok(api.post(f"{W}/scopes/{scope}/queues", json={"slug": "jobs"}), 201)["id"]


def _deletion_among_creations(gateway, api, doomed: str, scope: str, creations: list) -> list:
    """One DELETE of `doomed` and the creations (path under the scope, body) released together."""
    return each_at_once([partial(_status, gateway, api.tenant.key, "DELETE", doomed)]
                        + [partial(_status, gateway, api.tenant.key, "POST", f"{W}/scopes/{scope}{path}", body)
                           for path, body in creations])


@pytest.mark.parametrize("kind", sorted(IN_SCOPE))
def test_rows_made_in_a_scope_as_it_is_deleted(gateway, api, kind):
    answers: Counter = Counter()
    for _ in range(ROUNDS):
        scope, queue = _scope_with_queue(api)
        _ok(api.post(f"{W}/scopes/{scope}/archive"))
        answers.update(_deletion_among_creations(gateway, api, f"{W}/scopes/{scope}", scope,
                                                 [IN_SCOPE[kind](queue) for _ in range(CREATORS)]))
    assert answers[("DELETE", 200)] == ROUNDS, answers
    assert set(answers) <= {("DELETE", 200), ("POST", 201), ("POST", 404)}, answers
    assert sum(answers.values()) == ROUNDS * (1 + CREATORS)


def test_trusts_of_a_scope_as_it_is_deleted(gateway, api):
    """A trust names its target scope in its body: one made as the target goes is 201, or 422 after."""
    truster = _ok(api.post(f"{W}/scopes", json={"slug": _name()}), 201)["id"]
    answers: Counter = Counter()
    for _ in range(ROUNDS):
        targets = [_scope_with_queue(api)[0] for _ in range(CREATORS)]
        for target in targets:
            _ok(api.post(f"{W}/scopes/{target}/archive"))
        calls = []
        for target in targets:
            calls += [partial(_status, gateway, api.tenant.key, "DELETE", f"{W}/scopes/{target}"),
                      partial(_status, gateway, api.tenant.key, "POST", f"{W}/scopes/{truster}/acl/trusted-scopes",
                              {"target_scope_id": target, "direction": "inbound"})]
        answers.update(each_at_once(calls))
    assert answers[("DELETE", 200)] == ROUNDS * CREATORS, answers
    assert set(answers) <= {("DELETE", 200), ("POST", 201), ("POST", 422)}, answers
    assert sum(answers.values()) == ROUNDS * CREATORS * 2


@pytest.mark.parametrize("kind", sorted(NAMING_QUEUE))
def test_rows_naming_a_queue_made_as_it_is_deleted(gateway, api, kind):
    scope = _ok(api.post(f"{W}/scopes", json={"slug": _name()}), 201)["id"]
    answers: Counter = Counter()
    for _ in range(ROUNDS):
        queue = _ok(api.post(f"{W}/scopes/{scope}/queues", json={"slug": _name()}), 201)["id"]
        answers.update(_deletion_among_creations(gateway, api, f"{W}/scopes/{scope}/queues/{queue}", scope,
                                                 [NAMING_QUEUE[kind](queue) for _ in range(CREATORS)]))
    assert answers[("DELETE", 200)] == ROUNDS, answers
    assert set(answers) <= {("DELETE", 200), ("POST", 201), ("POST", 422)}, answers
    assert sum(answers.values()) == ROUNDS * (1 + CREATORS)
