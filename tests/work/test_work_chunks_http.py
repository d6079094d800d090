"""Chunk streams of the work surface over HTTP: out-of-order and duplicate chunks, summaries,
assembly modes, cancel, listing by state, and concurrent chunk publishers."""

from __future__ import annotations

import threading

import pytest

from postbox.work import chunks, messages
from support.work_api import W
from support.work_api import error as _error
from support.work_api import ok as _ok


@pytest.fixture
def q(api, scope):
    queue = _ok(api.post(f"{W}/scopes/{scope['id']}/queues", json={"slug": "out"}), 201)
    return f"{W}/scopes/{scope['id']}/queues/{queue['id']}"


def _chunk(api, q, body, seq, final=False, key="answer-1", status=201):
    return _ok(api.post(f"{q}/messages", json={"body": body, "stream": {"id": key, "seq": seq, "final": final}}),
               status)


def test_out_of_order_and_duplicate_chunks_assemble_in_order(api, scope, q):
    base = f"{W}/scopes/{scope['id']}/streams"
    first = _chunk(api, q, "Hello", 0)
    assert first["labels"] == {"stream.id": "answer-1", "stream.seq": "0"}
    _chunk(api, q, "world", 2, final=True)
    s = _ok(api.get(f"{base}/answer-1"))
    assert s["state"] == "open" and s["final_seq"] == 2 and s["chunks_received"] == 2
    assert s["chunks"]["missing"] == [1] and s["chunks"]["first_seq"] == 0 and s["chunks"]["last_seq"] == 2
    partial = _ok(api.get(f"{base}/answer-1/assembled"))
    assert partial["complete"] is False and partial["content"] == "Hello" and partial["missing"] == [1]
    assert _chunk(api, q, "Hello", 0, status=200)["id"] == first["id"]  # a duplicate replays
    _error(api.post(f"{q}/messages", json={"body": "Bye", "stream": {"id": "answer-1", "seq": 0}}), 409,
           "SCAIQUEUE_IDEMPOTENCY_CONFLICT")
    _error(api.post(f"{q}/messages", json={"body": "!", "stream": {"id": "answer-1", "seq": 3}}), 409,
           "SCAIQUEUE_INVALID_TRANSITION")  # past the final chunk
    _chunk(api, q, ", ", 1)
    s = _ok(api.get(f"{base}/answer-1"))
    assert s["state"] == "complete" and s["chunks"]["missing"] == [] and s["ended_at"]
    whole = _ok(api.get(f"{base}/answer-1/assembled"))
    assert whole["complete"] is True and whole["content"] == "Hello, world" and whole["chunks"] == 3
    assert _ok(api.get(f"{base}/answer-1/assembled", params={"mode": "lines"}))["content"] == "Hello\n, \nworld"
    assert _ok(api.get(f"{base}/answer-1/assembled", params={"mode": "json"}))["content"] == ["Hello", ", ", "world"]
    _error(api.get(f"{base}/answer-1/assembled", params={"mode": "zip"}), 422, "VALIDATION_ERROR")
    _error(api.post(f"{base}/answer-1/cancel"), 409, "SCAIQUEUE_INVALID_TRANSITION")


def test_objects_cancel_listing_and_errors(api, scope, q):
    base = f"{W}/scopes/{scope['id']}/streams"
    _chunk(api, q, {"delta": 1}, 0, key="obj")
    _chunk(api, q, {"delta": 2}, 1, final=True, key="obj")
    assert _ok(api.get(f"{base}/obj/assembled"))["content"] == '{"delta":1}{"delta":2}'
    _chunk(api, q, "a", 0, key="open-one")
    _chunk(api, q, "b", 1, key="doomed")
    _error(api.post(f"{q}/messages", json={"body": "x", "stream": {"id": "doomed", "seq": 0, "final": True}}), 409,
           "SCAIQUEUE_INVALID_TRANSITION")  # a final chunk before one already seen
    assert _ok(api.post(f"{base}/doomed/cancel"))["state"] == "cancelled"
    _error(api.post(f"{q}/messages", json={"body": "c", "stream": {"id": "doomed", "seq": 2}}), 409,
           "SCAIQUEUE_INVALID_TRANSITION")
    assert [s["id"] for s in _ok(api.get(base))] == ["doomed", "open-one", "obj"]
    assert [s["id"] for s in _ok(api.get(base, params={"state": "open"}))] == ["open-one"]
    assert [s["id"] for s in _ok(api.get(base, params={"state": "complete"}))] == ["obj"]
    page = api.get(base, params={"limit": 2}).json()
    assert len(page["data"]) == 2 and page["meta"]["next_cursor"]
    rest = _ok(api.get(base, params={"limit": 2, "cursor": page["meta"]["next_cursor"]}))
    assert [s["id"] for s in rest] == ["obj"]
    _error(api.get(f"{base}/nope"), 404, "SCAIQUEUE_STREAM_NOT_FOUND")
    _error(api.get(f"{base}/nope/assembled"), 404, "SCAIQUEUE_STREAM_NOT_FOUND")
    _error(api.post(f"{base}/nope/cancel"), 404, "SCAIQUEUE_STREAM_NOT_FOUND")
    _error(api.get(base, params={"state": "weird"}), 422, "VALIDATION_ERROR")
    err = _error(api.post(f"{q}/messages", json={"body": "x", "stream": {"id": "s", "seq": -1}}), 422,
                 "VALIDATION_ERROR")
    assert err["details"][0]["field"] == "stream.seq"


def test_concurrent_chunk_publishers_record_every_chunk_once(tenant):
    from postbox.work import queues, scopes

    s = scopes.create_scope(tenant.principal, {"slug": "par"})
    queue = queues.create_queue(tenant.principal, s["id"], {"slug": "out"})
    n = 200
    errors: list[BaseException] = []

    def publisher(k: int) -> None:
        try:
            for seq in range(k, n, 4):  # each chunk published twice, by two threads
                for _ in range(2):
                    messages.publish(tenant.principal, s["id"], queue["id"],
                                     {"body": f"{seq},", "stream": {"id": "big", "seq": seq, "final": seq == n - 1}})
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=publisher, args=(k % 4,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    whole = chunks.assembled(tenant.principal, s["id"], "big")
    assert whole["complete"] and whole["content"] == "".join(f"{i}," for i in range(n))
    assert queues.stats(tenant.principal, s["id"], queue["id"])["published_total"] == n
