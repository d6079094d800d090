"""HITL specs written as sections over HTTP: registered, read back and expanded as written, a
message's response checked against its decision and input sections (one and batch completes, and
a spec given inline), and every malformed section refused naming its field."""

from __future__ import annotations

import pytest

from support.work_api import W
from support.work_api import error as _error
from support.work_api import ok as _ok

SECTIONS = {
    "sections": [
        {"type": "context", "title": "Refund for {{customer}}", "content": "Order {{order_id}}: {{amount}} EUR"},
        {"type": "decision", "field": "decision", "options": ["approve", "reject"]},
        {"type": "input", "field": "comment", "kind": "text", "required": True},
        {"type": "input", "field": "amount", "kind": "number", "label": "Amount refunded"},
    ],
    "timeout_s": 3600,
}
PARAMETERS = [{"name": "customer"}, {"name": "order_id"}, {"name": "amount", "default": "0"}]


@pytest.fixture
def base(scope):
    return f"{W}/scopes/{scope['id']}/hitl-patterns"


@pytest.fixture
def pattern(api, base):
    return _ok(api.post(base, json={"name": "refund-sections", "version": "1", "spec": SECTIONS,
                                    "parameters": PARAMETERS}), 201)


def test_a_sections_spec_reads_back_and_expands_as_written(api, base, pattern):
    assert pattern["spec"] == SECTIONS
    assert _ok(api.get(f"{base}/refund-sections/1"))["spec"] == SECTIONS
    out = _ok(api.post(f"{base}/refund-sections/expand",
                       json={"version": "1", "parameters": {"customer": "Ada", "order_id": 42}}))
    assert out["spec"]["sections"][0] == {"type": "context", "title": "Refund for Ada", "content": "Order 42: 0 EUR"}
    assert out["spec"]["sections"][1:] == SECTIONS["sections"][1:] and out["spec"]["timeout_s"] == 3600


def test_a_sections_spec_checks_the_response_of_a_publish_naming_it(api, scope, pattern):
    q = _ok(api.post(f"{W}/scopes/{scope['id']}/queues", json={"slug": "review"}), 201)
    qp = f"{W}/scopes/{scope['id']}/queues/{q['id']}"
    ref = {"name": "refund-sections", "version": "1", "parameters": {"customer": "Ada", "order_id": "7"}}
    msg = _ok(api.post(f"{qp}/messages", json={"body": "x", "hitl_pattern": ref}), 201)
    assert msg["hitl_spec"]["sections"][0]["title"] == "Refund for Ada"
    [claimed] = _ok(api.post(f"{qp}/messages/claim", json={}))
    done = f"{W}/scopes/{scope['id']}/messages/{claimed['id']}/complete"
    for response, fields in (
        (None, {"response.decision", "response.comment"}),
        ({"decision": "maybe", "comment": "hm"}, {"response.decision"}),
        ({"decision": "approve", "comment": "ok", "amount": "ten"}, {"response.amount"}),
    ):
        err = _error(api.post(done, json={"response": response}), 422, "VALIDATION_ERROR")
        assert {d["field"] for d in err["details"]} == fields, response
    assert _ok(api.get(f"{qp}/messages/{claimed['id']}"))["state"] == "claimed"
    answer = {"decision": "approve", "comment": "ok", "amount": 12.5}
    assert _ok(api.post(done, json={"response": answer}))["state"] == "completed"
    assert _ok(api.get(f"{qp}/messages/{claimed['id']}"))["response"] == answer


def test_complete_batch_and_an_inline_sections_spec(api, scope):
    q = _ok(api.post(f"{W}/scopes/{scope['id']}/queues", json={"slug": "inline"}), 201)
    qp = f"{W}/scopes/{scope['id']}/queues/{q['id']}"
    spec = {"sections": [{"type": "decision", "field": "ok", "options": ["yes", "no"]},
                         {"type": "decision", "field": "route", "options": ["a", "b"]}]}
    for body in ("a", "b"):
        _ok(api.post(f"{qp}/messages", json={"body": body, "hitl_spec": spec}), 201)
    _ok(api.post(f"{qp}/messages", json={"body": "c", "hitl_spec": {"sections": [{"type": "context", "title": "t"}]}}),
        201)
    a, b, c = _ok(api.post(f"{qp}/messages/claim", json={"batch_size": 3}))
    items = [{"id": a["id"], "response": {"ok": "yes"}}, {"id": b["id"], "response": {"ok": "no", "route": "b"}},
             {"id": c["id"], "response": {"anything": 1}}]
    done = _ok(api.post(f"{W}/scopes/{scope['id']}/messages/complete-batch", json={"items": items}))
    assert done[0]["ok"] is False and [d["field"] for d in done[0]["error"]["details"]] == ["response.route"]
    assert [d["ok"] for d in done[1:]] == [True, True]  # a context-only spec asks for nothing


@pytest.mark.parametrize(("spec", "field"), [
    ({"sections": [{"type": "summary", "title": "x"}]}, "spec.sections.0.type"),
    ({"sections": [{"title": "x"}]}, "spec.sections.0.type"),
    ({"sections": [{"type": "context", "title": "x"}, {"type": "decision", "options": ["a"]}]}, "spec.sections.1"),
    ({"sections": [{"type": "context", "field": "x"}]}, "spec.sections.0"),
    ({"sections": [{"type": "input", "field": "a", "kind": "date"}]}, "spec.sections.0.kind"),
    ({"sections": [{"type": "input", "field": "a", "options": ["x"]}]}, "spec.sections.0"),
    ({"sections": [{"type": "context", "title": "x", "colour": "red"}]}, "spec.sections.0.colour"),
    ({"sections": []}, "spec.sections"),
    ({"sections": {"type": "context"}}, "spec.sections"),
    ({"sections": ["context"]}, "spec.sections.0"),
    ({"sections": [{"type": "context"}], "decision": {"field": "d"}}, "spec"),
    ({"sections": [{"type": "context", "title": "{{who}}"}]}, "spec.sections.0.title"),
    ({"sections": [{"type": "decision", "field": "d", "options": ["a"]}, {"type": "input", "field": "d"}]},
     "spec.sections.1.field"),
    ({"decision": {"field": "d"}, "input": [{"field": "d"}]}, "spec.input.0.field"),
])
def test_malformed_sections_are_refused_naming_the_field(api, base, spec, field):
    err = _error(api.post(base, json={"name": "bad", "version": "1", "spec": spec}), 422, "VALIDATION_ERROR")
    assert err["details"][0]["field"] == field, err
    assert _ok(api.get(base)) == []
