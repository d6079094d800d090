"""HITL patterns over HTTP: register, list, get, expand, and the round trip of a reviewed message."""

from __future__ import annotations

import pytest

from support.http import client
from support.work_api import W
from support.work_api import error as _error
from support.work_api import ok as _ok

REVIEW = {
    "context": {"title": "Refund for {{customer}}", "content": "Order {{order_id}}: {{ amount }} EUR. {{note}}"},
    "decision": {"field": "decision", "options": ["approve", "reject"]},
    "input": [{"field": "comment", "kind": "text", "required": True},
              {"field": "amount", "kind": "number"}],
    "timeout_s": 3600,
}
PARAMETERS = [{"name": "customer"}, {"name": "order_id"}, {"name": "amount", "default": "0"},
              {"name": "note", "required": False}]



@pytest.fixture
def pattern(api, scope):
    return _ok(api.post(f"{W}/scopes/{scope['id']}/hitl-patterns",
                        json={"name": "refund", "version": 1, "spec": REVIEW, "parameters": PARAMETERS}), 201)


def test_pattern_routes(api, scope, pattern):
    base = f"{W}/scopes/{scope['id']}/hitl-patterns"
    assert pattern["version"] == "1" and pattern["spec"] == REVIEW
    _error(api.post(base, json={"name": "refund", "version": "1", "spec": REVIEW, "parameters": PARAMETERS}), 409,
           "SCAIQUEUE_SLUG_CONFLICT")
    assert [p["name"] for p in _ok(api.get(base))] == ["refund"]
    assert _ok(api.get(f"{base}/refund/1"))["parameters"][2] == {"name": "amount", "default": "0"}
    _error(api.get(f"{base}/refund/2"), 404, "SCAIQUEUE_HITL_PATTERN_NOT_FOUND")
    out = _ok(api.post(f"{base}/refund/expand", json={"version": 1, "parameters": {
        "customer": "Ada {{order_id}}", "order_id": 42}}))
    assert out["spec"]["context"] == {"title": "Refund for Ada {{order_id}}",  # substituted once, never re-read
                                      "content": "Order 42: 0 EUR. "}
    assert out["spec"]["decision"] == REVIEW["decision"]
    err = _error(api.post(f"{base}/refund/expand", json={"version": "1", "parameters": {"order_id": "1", "x": "y"}}),
                 422, "VALIDATION_ERROR")
    assert {d["field"] for d in err["details"]} == {"parameters.customer", "parameters.x"}
    _error(api.post(f"{base}/nope/expand", json={"version": "1"}), 404, "SCAIQUEUE_HITL_PATTERN_NOT_FOUND")


def test_patterns_that_do_not_parse_are_refused(api, scope):
    base = f"{W}/scopes/{scope['id']}/hitl-patterns"
    err = _error(api.post(base, json={"name": "p", "version": "1", "spec": {"context": {"title": "{{who}}"}}}), 422,
                 "VALIDATION_ERROR")
    assert err["details"] == [{"field": "spec.context.title", "message": "undeclared parameter 'who'"}]
    err = _error(api.post(base, json={"name": "p", "version": "1", "spec": {"decision": {"options": ["a"]}}}), 422,
                 "VALIDATION_ERROR")
    assert err["details"][0]["field"] == "spec.decision.field"
    err = _error(api.post(base, json={"name": "p", "version": "1", "spec": {"input": [{"field": "a", "kind": "x"}]}}),
                 422, "VALIDATION_ERROR")
    assert err["details"][0]["field"] == "spec.input.0.kind"
    assert _ok(api.get(base)) == []


def test_hitl_round_trip_decision_reaches_the_publisher(gateway, api, scope, pattern):
    q = _ok(api.post(f"{W}/scopes/{scope['id']}/queues", json={"slug": "review"}), 201)
    qp = f"{W}/scopes/{scope['id']}/queues/{q['id']}"
    msg = _ok(api.post(f"{qp}/messages", json={
        "body": {"order": 42}, "correlation_id": "refund-42",
        "hitl_pattern": {"name": "refund", "version": 1, "parameters": {"customer": "Ada", "order_id": "42"}}}), 201)
    assert msg["hitl_spec"]["context"]["title"] == "Refund for Ada"
    err = _error(api.post(f"{qp}/messages", json={"body": "x", "hitl_pattern": {"name": "refund", "version": "1"}}),
                 422, "VALIDATION_ERROR")
    assert {d["field"] for d in err["details"]} == {"hitl_pattern.parameters.customer",
                                                    "hitl_pattern.parameters.order_id"}
    _error(api.post(f"{qp}/messages", json={"body": "x", "hitl_pattern": {"name": "other", "version": "1"}}), 404,
           "SCAIQUEUE_HITL_PATTERN_NOT_FOUND")
    both = {"body": "x", "hitl_spec": {}, "hitl_pattern": {"name": "r", "version": 1}}
    err = _error(api.post(f"{qp}/messages", json=both), 422, "VALIDATION_ERROR")
    assert err["details"][0]["field"] == "body"

    with client(gateway.url, api.tenant.key_for("write")) as reviewer:
        [claimed] = _ok(reviewer.post(f"{qp}/messages/claim", json={}))
        done = f"{W}/scopes/{scope['id']}/messages/{claimed['id']}/complete"
        for response, fields in (
            (None, {"response.decision", "response.comment"}),
            ({"decision": "maybe", "comment": "hm"}, {"response.decision"}),
            ({"decision": "approve"}, {"response.comment"}),
            ({"decision": "approve", "comment": 5, "amount": "ten"}, {"response.comment", "response.amount"}),
        ):
            err = _error(reviewer.post(done, json={"response": response}), 422, "VALIDATION_ERROR")
            assert {d["field"] for d in err["details"]} == fields, response
        assert _ok(reviewer.get(f"{qp}/messages/{claimed['id']}"))["state"] == "claimed"  # nothing changed
        answer = {"decision": "approve", "comment": "ok", "amount": 12.5}
        assert _ok(reviewer.post(done, json={"response": answer}))["state"] == "completed"
    chain = _ok(api.get(f"{W}/scopes/{scope['id']}/messages", params={"correlation_id": "refund-42"}))
    event = chain[-1]
    assert event["type"] == "scaiqueue.message.completed"
    assert event["body"]["payload"]["response"] == answer and event["body"]["payload"]["correlation_id"] == "refund-42"


def test_messages_without_decision_or_input_complete_with_any_response(api, scope):
    q = _ok(api.post(f"{W}/scopes/{scope['id']}/queues", json={"slug": "free"}), 201)
    qp = f"{W}/scopes/{scope['id']}/queues/{q['id']}"
    _ok(api.post(f"{qp}/messages", json={"body": "1", "hitl_spec": {"context": {"title": "t"}}}), 201)
    _ok(api.post(f"{qp}/messages", json={"body": "2"}), 201)
    for c in _ok(api.post(f"{qp}/messages/claim", json={"batch_size": 2})):
        done = _ok(api.post(f"{W}/scopes/{scope['id']}/messages/{c['id']}/complete", json={"response": None}))
        assert done["state"] == "completed"


def test_complete_batch_checks_each_response_against_its_spec(api, scope, pattern):
    q = _ok(api.post(f"{W}/scopes/{scope['id']}/queues", json={"slug": "batch"}), 201)
    qp = f"{W}/scopes/{scope['id']}/queues/{q['id']}"
    ref = {"name": "refund", "version": 1, "parameters": {"customer": "Ada", "order_id": "1"}}
    _ok(api.post(f"{qp}/messages", json={"body": "a", "hitl_pattern": ref}), 201)
    _ok(api.post(f"{qp}/messages", json={"body": "b"}), 201)
    _ok(api.post(f"{qp}/messages", json={"body": "c", "hitl_pattern": ref}), 201)
    a, b, c = _ok(api.post(f"{qp}/messages/claim", json={"batch_size": 3}))
    items = [{"id": a["id"], "response": {"decision": "nope"}}, {"id": b["id"]},
             {"id": c["id"], "response": {"decision": "reject", "comment": "no"}}]
    done = _ok(api.post(f"{W}/scopes/{scope['id']}/messages/complete-batch", json={"items": items}))
    assert done[0]["ok"] is False and done[0]["error"]["code"] == "VALIDATION_ERROR"
    assert {d["field"] for d in done[0]["error"]["details"]} == {"response.decision", "response.comment"}
    assert done[1] == {"id": b["id"], "ok": True, "state": "completed"}
    assert done[2] == {"id": c["id"], "ok": True, "state": "completed"}
    assert _ok(api.get(f"{qp}/messages/{a['id']}"))["state"] == "claimed"
