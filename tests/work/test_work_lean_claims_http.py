"""Lean claim answers (the `attributes` extension of a claim): a claim that names fields answers
only those besides id and claim_token; without it, the spec's full representation, as before."""

from __future__ import annotations

import threading

import pytest

from postbox.errors import Unprocessable
from postbox.work import messages
from support.work_api import W
from support.work_api import error as _error
from support.work_api import ok as _ok


def _q(scope, queue):
    return f"{W}/scopes/{scope['id']}/queues/{queue['id']}"


def _publish(api, scope, queue, n):
    return [_ok(api.post(f"{_q(scope, queue)}/messages",
                         json={"body": {"n": i}, "labels": {"k": "v"}, "correlation_id": f"c{i}"}), 201)
            for i in range(n)]


def _claim(api, scope, queue, **body):
    return api.post(f"{_q(scope, queue)}/messages/claim", json={"batch_size": 10, **body})


def test_default_claim_answers_the_full_representation(api, scope, queue):
    _publish(api, scope, queue, 2)
    claimed = _ok(_claim(api, scope, queue))
    full = _ok(api.get(f"{_q(scope, queue)}/messages/{claimed[0]['id']}"))
    assert [m["body"] for m in claimed] == [{"n": 0}, {"n": 1}]
    assert set(claimed[0]) == set(full) and claimed[0] == full  # every field, the same values
    assert {"hitl_spec", "labels", "correlation_id", "claim_expires_at", "created_at"} <= set(claimed[0])


def test_attributes_select_what_each_message_answers(api, scope, queue):
    _publish(api, scope, queue, 3)
    lean = _ok(_claim(api, scope, queue, attributes=["body", "attempts", "correlation_id"]))
    assert [list(m) for m in lean] == [["id", "claim_token", "body", "attempts", "correlation_id"]] * 3
    assert [(m["body"], m["attempts"], m["correlation_id"]) for m in lean] == [
        ({"n": i}, 1, f"c{i}") for i in range(3)]
    full = _ok(api.get(f"{_q(scope, queue)}/messages/{lean[0]['id']}"))
    assert full["state"] == "claimed" and full["claim_token"] == lean[0]["claim_token"]
    # what a lean claim answers is enough to finish the messages
    done = _ok(api.post(f"{W}/scopes/{scope['id']}/messages/complete-batch",
                        json={"items": [{"id": m["id"], "claim_token": m["claim_token"]} for m in lean]}))
    assert [d["ok"] for d in done] == [True] * 3


def test_empty_attributes_answer_ids_and_tokens_and_names_count_once(api, scope, queue):
    _publish(api, scope, queue, 2)
    bare = _ok(_claim(api, scope, queue, batch_size=1, attributes=[]))
    assert len(bare) == 1 and list(bare[0]) == ["id", "claim_token"]
    twice = _ok(_claim(api, scope, queue, attributes=["state", "id", "state", "claim_token"]))
    assert [list(m) for m in twice] == [["id", "claim_token", "state"]] and twice[0]["state"] == "claimed"
    assert _ok(_claim(api, scope, queue, attributes=["body"])) == []  # nothing left: an empty list, as always


def test_a_field_that_is_not_in_the_document_is_refused_and_claims_nothing(api, scope, queue):
    _publish(api, scope, queue, 2)
    r = _error(_claim(api, scope, queue, attributes=["body", "bogus"]), 422, "VALIDATION_ERROR")
    assert "bogus" in r["message"] and r["details"][0]["field"] == "attributes"
    again = _ok(_claim(api, scope, queue, attributes=["attempts"]))
    assert [m["attempts"] for m in again] == [1, 1]  # the refused claim took nothing


@pytest.mark.parametrize("attributes", ["body", ["Body"], ["body;drop"], [1], [None], [{"f": 1}], ["x" * 65],
                                        ["body"] * 65, {"body": True}])
def test_attributes_of_the_wrong_shape_are_refused(api, scope, queue, attributes):
    _publish(api, scope, queue, 1)
    r = _error(_claim(api, scope, queue, attributes=attributes), 422, "VALIDATION_ERROR")
    assert r["details"][0]["field"].startswith("attributes")
    assert len(_ok(_claim(api, scope, queue))) == 1  # nothing was claimed by the refused call


def test_attributes_null_is_the_full_representation(api, scope, queue):
    _publish(api, scope, queue, 1)
    claimed = _ok(_claim(api, scope, queue, attributes=None))
    assert "body" in claimed[0] and "hitl_spec" in claimed[0]


def test_domain_lean_claim_does_not_leak_into_the_next_claim(tenant, scope, queue):
    for i in range(3):
        messages.publish(tenant.principal, scope["id"], queue["id"], {"body": {"n": i}})
    with pytest.raises(Unprocessable) as refused:
        messages.claim(tenant.principal, scope["id"], queue["id"], 1, None, attributes=["nope"])
    assert refused.value.code == "VALIDATION_ERROR"
    lean = messages.claim(tenant.principal, scope["id"], queue["id"], 1, None, attributes=["body"])
    assert list(lean[0]) == ["id", "claim_token", "body"]
    # the same pool's next claims answer full documents (the setting is the statement's transaction's)
    for _ in range(2):
        full = messages.claim(tenant.principal, scope["id"], queue["id"], 1, None)
        assert "hitl_spec" in full[0] and "created_at" in full[0]


def test_lean_claims_from_many_threads_take_every_message_once(tenant, scope, queue):
    total, threads = 300, 6
    for i in range(total):
        messages.publish(tenant.principal, scope["id"], queue["id"], {"body": {"n": i}})
    taken: list[list[str]] = [[] for _ in range(threads)]
    start = threading.Barrier(threads)

    def work(i: int) -> None:
        start.wait()
        while claimed := messages.claim(tenant.principal, scope["id"], queue["id"], 7, None,
                                        attributes=[] if i % 2 else ["body"]):
            items = [{"id": m["id"], "claim_token": m["claim_token"]} for m in claimed]
            done = messages.finish_batch(tenant.principal, scope["id"], "complete", items)
            assert all(d["ok"] for d in done)
            taken[i].extend(m["id"] for m in claimed)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    ids = [m for part in taken for m in part]
    assert len(ids) == len(set(ids)) == total
