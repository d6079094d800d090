"""The batch extension's publish over HTTP (`POST …/queues/{queue_id}/messages/batch`): each entry is
published as a single publish would be (its checks, schema, routing, HITL pattern, idempotency key,
chunk stream, the queue's depth) and answered in its place; a refused entry answers the status and
the error body a single publish of it answers, and spoils none of the others, unless the batch asks
to be atomic. The single route is the oracle for every refusal."""

from __future__ import annotations

import uuid

import pytest

from support.http import client
from support.work_api import W
from support.work_api import error as _error
from support.work_api import ok as _ok


def _q(scope, queue):
    return f"{W}/scopes/{scope['id']}/queues/{queue['id']}"


def _batch(api, scope, queue, entries, status=200, **options):
    return _ok(api.post(f"{_q(scope, queue)}/messages/batch", json={"messages": entries, **options}), status)


def _single(api, scope, queue, entry) -> tuple[int, dict]:
    """What the single publish answers for the same entry: (status, its error or its message)."""
    r = api.post(f"{_q(scope, queue)}/messages", json=entry)
    return r.status_code, (r.json()["error"] if r.status_code >= 400 else r.json()["data"])


def _claim_all(api, scope, queue):
    return _ok(api.post(f"{_q(scope, queue)}/messages/claim", json={"batch_size": 100}))


def _depth(api, scope, queue):
    return _ok(api.get(f"{_q(scope, queue)}/stats"))["depth_current"]


def test_a_batch_publishes_every_entry_and_answers_each_in_order(api, scope, queue):
    entries = [{"body": {"n": i}, "labels": {"i": str(i)}} for i in range(3)] + [{"body": "text", "type": "note"}]
    answers = _batch(api, scope, queue, entries)
    assert [(a["ok"], a["status"], a["replayed"], a["queue_id"], a["state"]) for a in answers] == [
        (True, 201, False, queue["id"], "pending")] * 4
    assert set(answers[0]) == {"ok", "status", "id", "queue_id", "state", "replayed"}
    claimed = _claim_all(api, scope, queue)
    assert [m["id"] for m in claimed] == [a["id"] for a in answers]
    assert [m["body"] for m in claimed] == [e["body"] for e in entries]
    assert claimed[3]["type"] == "note" and claimed[1]["labels"] == {"i": "1"}


def test_refused_entries_answer_what_a_single_publish_answers_and_spoil_nothing(api, scope, queue, other):
    entries = [
        {"body": "first", "idempotency_key": "k"},
        {"body": "unknown field", "colour": "red"},                        # 422, named
        {"body": "out of range", "priority": {"tier": "normal", "score": 2000}},
        "not an object",
        {"body": "first", "idempotency_key": "k"},                         # a replay of entry 0
        {"body": "another body", "idempotency_key": "k"},                  # 409 against entry 0
        {"body": "both", "hitl_spec": {}, "hitl_pattern": {"name": "p", "version": 1}},
        {"body": "no such pattern", "hitl_pattern": {"name": "nope", "version": 1}},
        {"type": "no body"},
        {"body": "last"},
    ]
    answers = _batch(api, scope, queue, entries)
    assert [a["ok"] for a in answers] == [True, False, False, False, True, False, False, False, False, True]
    assert answers[4]["status"] == 200 and answers[4]["replayed"] and answers[4]["id"] == answers[0]["id"]
    for i, (entry, answer) in enumerate(zip(entries, answers, strict=True)):
        if not answer["ok"]:
            status, error = _single(api, scope, other if i != 5 else queue, entry)
            assert (answer["status"], answer["error"]) == (status, error), i
    assert answers[1]["error"]["details"] == [{"field": "colour", "message": "unknown field"}]
    assert answers[5]["error"]["code"] == "SCAIQUEUE_IDEMPOTENCY_CONFLICT"
    assert answers[7]["error"]["code"] == "SCAIQUEUE_HITL_PATTERN_NOT_FOUND"
    assert [m["body"] for m in _claim_all(api, scope, queue)] == ["first", "last"]


def test_idempotency_keys_across_batches_and_single_publishes(api, scope, queue):
    [first] = _batch(api, scope, queue, [{"body": {"a": 1}, "idempotency_key": "once"}])
    again = _batch(api, scope, queue, [{"body": {"a": 1}, "idempotency_key": "once"},
                                       {"body": {"a": 2}, "idempotency_key": "once"}])
    assert (again[0]["status"], again[0]["id"], again[0]["replayed"]) == (200, first["id"], True)
    assert again[1]["status"] == 409 and again[1]["error"]["code"] == "SCAIQUEUE_IDEMPOTENCY_CONFLICT"
    assert _ok(api.post(f"{_q(scope, queue)}/messages", json={"body": {"a": 1}, "idempotency_key": "once"}))["id"] \
        == first["id"]
    assert _depth(api, scope, queue) == 1


@pytest.mark.parametrize("depth", [0, 1000])  # a plain queue (one set-based pass), and one each entry runs alone
def test_many_refusals_among_published_entries_keep_every_published_one_once_and_in_order(api, scope, depth):
    queue = _ok(api.post(f"{W}/scopes/{scope['id']}/queues", json={"slug": "refusing", "max_depth": depth}), 201)
    _ok(api.post(f"{_q(scope, queue)}/messages", json={"body": "x", "idempotency_key": "taken"}), 201)
    entries = [{"body": f"m{i}"} if i % 2 == 0 else {"body": f"c{i}", "idempotency_key": "taken"} for i in range(9)]
    answers = _batch(api, scope, queue, entries)
    assert [a["status"] for a in answers] == [201, 409] * 4 + [201]
    assert [m["body"] for m in _claim_all(api, scope, queue)] == ["x", "m0", "m2", "m4", "m6", "m8"]


def test_each_body_is_held_to_the_queues_schema(api, scope, queue, other):
    base = f"{W}/scopes/{scope['id']}"
    _ok(api.post(f"{base}/schemas", json={"name": "order", "version": 1, "schema": {
        "type": "object", "required": ["qty"], "properties": {"qty": {"type": "integer", "minimum": 1}}}}), 201)
    for q in (queue, other):
        _ok(api.put(f"{_q(scope, q)}/schema", json={"name": "order", "version": 1}))
    entries = [{"body": {"qty": 2}}, {"body": {"qty": 0}}, {"body": "a string"}, {"body": {"qty": 3}}]
    answers = _batch(api, scope, queue, entries)
    assert [a["status"] for a in answers] == [201, 422, 422, 201]
    assert answers[1]["error"]["details"][0]["field"] == "body.qty"
    for i in (1, 2):
        assert (answers[i]["status"], answers[i]["error"]) == _single(api, scope, other, entries[i])
    assert _depth(api, scope, queue) == 2


def test_routing_rules_route_each_entry(api, scope, queue, other):
    _ok(api.post(f"{W}/scopes/{scope['id']}/routing-rules", json={
        "name": "vip", "conditions": {"field": "labels.tier", "op": "eq", "value": "vip"},
        "action": {"type": "route", "queue_id": other["id"]}}), 201)
    answers = _batch(api, scope, queue, [{"body": "1"}, {"body": "2", "labels": {"tier": "vip"}}, {"body": "3"}])
    assert [a["queue_id"] for a in answers] == [queue["id"], other["id"], queue["id"]]
    assert [m["body"] for m in _claim_all(api, scope, other)] == ["2"]
    assert [m["body"] for m in _claim_all(api, scope, queue)] == ["1", "3"]


def test_hitl_patterns_are_expanded_per_entry(api, scope, queue):
    spec = {"context": {"title": "Refund for {{customer}}"}, "decision": {"field": "d", "options": ["y", "n"]}}
    _ok(api.post(f"{W}/scopes/{scope['id']}/hitl-patterns", json={
        "name": "refund", "version": 1, "spec": spec, "parameters": [{"name": "customer"}]}), 201)
    answers = _batch(api, scope, queue, [
        {"body": "1", "hitl_pattern": {"name": "refund", "version": 1, "parameters": {"customer": "Ada"}}},
        {"body": "2", "hitl_pattern": {"name": "refund", "version": 1, "parameters": {}}},
        {"body": "3", "hitl_spec": {"decision": {"field": "ok", "options": ["a"]}}}])
    assert [a["status"] for a in answers] == [201, 422, 201]
    assert answers[1]["error"]["details"][0]["field"] == "hitl_pattern.parameters.customer"
    claimed = _claim_all(api, scope, queue)
    assert claimed[0]["hitl_spec"]["context"]["title"] == "Refund for Ada"
    assert claimed[1]["hitl_spec"] == {"decision": {"field": "ok", "options": ["a"]}}


def test_a_full_queue_refuses_the_entries_past_its_depth(api, scope):
    small = _ok(api.post(f"{W}/scopes/{scope['id']}/queues", json={"slug": "small", "max_depth": 2}), 201)
    answers = _batch(api, scope, small, [{"body": str(i)} for i in range(4)])
    assert [a["status"] for a in answers] == [201, 201, 429, 429]
    assert answers[2]["error"]["code"] == "SCAIQUEUE_QUEUE_FULL"
    assert _depth(api, scope, small) == 2


def test_a_paused_queue_refuses_every_entry_as_a_single_publish_would(api, scope, queue):
    _ok(api.post(f"{_q(scope, queue)}/pause"))
    answers = _batch(api, scope, queue, [{"body": "1"}, {"body": "2"}])
    assert [(a["status"], a["error"]["code"]) for a in answers] == [(409, "SCAIQUEUE_QUEUE_PAUSED")] * 2


def test_chunks_of_a_stream_in_one_batch(api, scope, queue):
    answers = _batch(api, scope, queue, [{"body": "world", "stream": {"id": "s1", "seq": 1, "final": True}},
                                         {"body": "hello ", "stream": {"id": "s1", "seq": 0}},
                                         {"body": "late", "stream": {"id": "s1", "seq": 2}}])
    assert [a["status"] for a in answers] == [201, 201, 409]
    assert _ok(api.get(f"{W}/scopes/{scope['id']}/streams/s1/assembled"))["content"] == "hello world"


def test_an_atomic_batch_publishes_all_or_nothing(api, scope, queue):
    q = _q(scope, queue)
    _ok(api.post(f"{q}/messages", json={"body": "x", "idempotency_key": "taken"}), 201)
    err = _error(api.post(f"{q}/messages/batch", json={"atomic": True, "messages": [
        {"body": "1"}, {"body": "2"}, {"body": "y", "idempotency_key": "taken"}, {"body": "4"}]}),
        409, "SCAIQUEUE_IDEMPOTENCY_CONFLICT")
    assert err["message"].startswith("messages.2: ") and err["details"] == {"entry": 2}
    err = _error(api.post(f"{q}/messages/batch", json={"atomic": True, "messages": [
        {"body": "1"}, {"body": "2", "priority": {"score": -1}}]}), 422, "VALIDATION_ERROR")
    assert [d["field"] for d in err["details"]] == ["messages.1.priority.score"]
    assert _depth(api, scope, queue) == 1  # nothing of either batch
    answers = _batch(api, scope, queue, [{"body": "1"}, {"body": "x", "idempotency_key": "taken"}], atomic=True)
    assert [a["status"] for a in answers] == [201, 200]
    assert _depth(api, scope, queue) == 2


@pytest.mark.parametrize("body, field", [
    ({"messages": []}, "messages"),
    ({"messages": [{"body": str(i)} for i in range(101)]}, "messages"),
    ({}, "messages"),
    ({"messages": {"body": "1"}}, "messages"),
    ({"messages": [{"body": "1"}], "atomic": "yes"}, "atomic"),
    ({"messages": [{"body": "1"}], "colour": "red"}, "colour"),
])
def test_batches_of_the_wrong_shape_are_refused_whole(api, scope, queue, body, field):
    err = _error(api.post(f"{_q(scope, queue)}/messages/batch", json=body), 422, "VALIDATION_ERROR")
    assert [d["field"] for d in err["details"]] == [field]
    assert _depth(api, scope, queue) == 0


def test_the_scope_queue_and_permission_are_the_whole_calls(gateway, api, scope, queue):
    one = {"messages": [{"body": "1"}]}
    _error(api.post(f"{W}/scopes/{uuid.uuid4()}/queues/{queue['id']}/messages/batch", json=one), 404,
           "SCAIQUEUE_SCOPE_NOT_FOUND")
    _error(api.post(f"{W}/scopes/{scope['id']}/queues/{uuid.uuid4()}/messages/batch", json=one), 404,
           "SCAIQUEUE_QUEUE_NOT_FOUND")
    with client(gateway.url, api.tenant.key_for("read")) as reader:
        _error(reader.post(f"{_q(scope, queue)}/messages/batch", json=one), 403, "AUTHZ_PERMISSION_DENIED")
    assert _depth(api, scope, queue) == 0


def test_a_batch_leaves_the_next_publish_answering_the_full_document(api, scope, queue):
    _batch(api, scope, queue, [{"body": str(i)} for i in range(3)])
    single = _ok(api.post(f"{_q(scope, queue)}/messages", json={"body": "full"}), 201)
    assert single["body"] == "full" and "created_at" in single
