"""A claim's answer is joined as text from the claimed rows' columns, never built as a JSON value per
message; it must say exactly what the message's document says. The documents built from the view
(`work_claim_answer`, the full representation as every other route answers it) are the oracle: the
same fields, in the same order, with the same values, for messages of every shape, for those Postbox
made itself, and for those whose fields an update changed."""

from __future__ import annotations

import json

import pytest

from postbox import db, jsoncodec
from postbox.work import messages, queues, scopes

ODD = 'quote " backslash \\ newline \n tab \t bell \x07 del \x7f é ✓ \u2028 😀 </script>'

SHAPES = [
    {"body": "plain"},
    {"body": ODD},
    {"body": {"z": 1, "a": [1, 2.5, -3, True, None, {"deep": {"er": [ODD]}}], "": "", "é": "ü"}},
    {"body": {"small": 1e-7, "big": 12345678901234567890123, "float": 1.5, "whole": 2.0, "neg": -0.25,
              "huge": 1e16}},
    {"body": [], "labels": {"tier": "gold", ODD: ODD, "n": "1"}},
    {"body": {}, "type": "order.created", "content_type": 'text/plain; charset="utf-8"',
     "priority": {"tier": "critical", "score": 1000}},
    {"body": "ids", "correlation_id": ODD, "causation_id": "c-1", "parent_id": "p-1", "idempotency_key": ODD},
    {"body": "times", "ttl_seconds": 3600, "deadline": "2031-02-03T04:05:06.789+02:00", "max_retries": 7,
     "visibility_timeout_s": 45},
    {"body": "spec", "hitl_spec": {"context": {"title": ODD, "content": "{{x}}"},
                                   "decision": {"field": "ok", "options": ["yes", "no"]}, "timeout_s": 60}},
    {"body": None},
]


def _scope(tenant, slug="answers"):
    return scopes.create_scope(tenant.principal, {"slug": slug})


def _claim_text(tenant, scope, queue, n, vt=60):
    return messages.claim_text(tenant.principal, scope["id"], queue["id"], n, vt)


def _documents(ids: list[str]) -> list[dict]:
    """The full documents of these messages as the view builds them (what GET answers), as text."""
    with db.connection() as conn:
        text = conn.execute("SELECT work_claim_answer(%s::uuid[])::text", (ids,)).fetchone()[0]
    return json.loads(text)


def _same(answer_text: str) -> list[dict]:
    """The claim's answer, checked field by field against the view's documents of the same messages."""
    answer = json.loads(answer_text)
    documents = _documents([m["id"] for m in answer])
    assert [list(m) for m in answer] == [list(d) for d in documents]  # the same fields, in the same order
    assert answer == documents
    return answer


def test_a_full_claim_answers_exactly_the_documents_for_every_shape(tenant):
    s = _scope(tenant)
    q = queues.create_queue(tenant.principal, s["id"], {"slug": "jobs"})
    published = [messages.publish(tenant.principal, s["id"], q["id"], dict(shape))[0] for shape in SHAPES]
    text = _claim_text(tenant, s, q, len(SHAPES))
    answer = _same(text)
    assert [m["id"] for m in answer] == [m["id"] for m in published]
    assert [m["body"] for m in answer] == [m["body"] for m in published]
    assert text.startswith('[{"id":"') and '"priority":{"tier":"critical","score":1000}' in text


def test_messages_claimed_with_their_own_visibility_timeouts_answer_each_expiry(tenant):
    s = _scope(tenant)
    q = queues.create_queue(tenant.principal, s["id"], {"slug": "jobs"})
    for vt in (5, 50, 500):
        messages.publish(tenant.principal, s["id"], q["id"], {"body": vt, "visibility_timeout_s": vt})
    answer = _same(_claim_text(tenant, s, q, 3, vt=None))
    assert len({m["claim_expires_at"] for m in answer}) == 3


def test_a_reclaimed_message_answers_its_attempts_and_failure_reason(tenant):
    s = _scope(tenant)
    q = queues.create_queue(tenant.principal, s["id"], {"slug": "jobs"})
    messages.publish(tenant.principal, s["id"], q["id"], {"body": "again"})
    [first] = messages.claim(tenant.principal, s["id"], q["id"], 1, 60)
    messages.finish(tenant.principal, s["id"], first["id"], "release", {})
    [again] = _same(_claim_text(tenant, s, q, 1))
    assert again["attempts"] == 1 and again["claim_token"] != first["claim_token"]
    with db.connection() as conn:  # a claim that ran out: the next claim takes it and says why
        conn.execute("UPDATE work_messages SET visible_at = clock_timestamp() - interval '1 second'"
                     " WHERE id = %s", (again["id"],))
    [late] = _same(_claim_text(tenant, s, q, 1))
    assert late["attempts"] == 2 and late["failure_reason"] == "visibility timeout"


def test_a_dead_letter_copy_and_a_message_an_update_changed_answer_what_they_hold(tenant):
    """A dead-letter copy (made by Postbox, not published) and a message whose published fields an
    update changed after its publish: the claim says what the row holds now."""
    s = _scope(tenant)
    q = queues.create_queue(tenant.principal, s["id"], {"slug": "jobs"})
    dead = messages.publish(tenant.principal, s["id"], q["id"], {**SHAPES[2], "max_retries": 1,
                                                                 "labels": {"a": ODD}})[0]
    changed = messages.publish(tenant.principal, s["id"], q["id"], {"body": {"was": 1}, "labels": {"x": "1"}})[0]
    [taken] = messages.claim(tenant.principal, s["id"], q["id"], 1, 60)
    assert taken["id"] == dead["id"]
    messages.finish(tenant.principal, s["id"], dead["id"], "fail", {"reason": ODD})
    with db.connection() as conn:
        conn.execute("UPDATE work_messages SET body = '{\"now\": [2]}', labels = '{\"y\": \"2\"}',"
                     " source_id = 'someone else' WHERE id = %s", (changed["id"],))
    [now] = _same(_claim_text(tenant, s, q, 1))
    assert now["body"] == {"now": [2]} and now["labels"] == {"y": "2"} and now["source_id"] == "someone else"
    letters = {x["slug"]: x for x in queues.list_queues(tenant.principal, s["id"], 50, None)[0]}["_dead_letter"]
    [copy] = _same(_claim_text(tenant, s, letters, 1))
    assert copy["body"] == SHAPES[2]["body"] and copy["causation_id"] == dead["id"] and copy["failure_reason"] == ODD


@pytest.mark.parametrize("attributes, fields", [([], ["id", "claim_token"]),
                                                (["body", "attempts"], ["id", "claim_token", "body", "attempts"])])
def test_lean_answers_keep_their_fields(tenant, attributes, fields):
    s = _scope(tenant)
    q = queues.create_queue(tenant.principal, s["id"], {"slug": "jobs"})
    messages.publish(tenant.principal, s["id"], q["id"], {"body": {"b": ODD}})
    text = messages.claim_text(tenant.principal, s["id"], q["id"], 1, 60, attributes=attributes)
    [m] = jsoncodec.loads(text)
    assert list(m) == fields
    assert m == {f: v for f, v in _documents([m["id"]])[0].items() if f in fields}

