"""Retries, without a server: httpx's MockTransport answers as a refusing or failing server would.
Sleeps are recorded instead of slept."""

from __future__ import annotations

import asyncio
import random

import httpx
import pytest

from postbox_client import AsyncClient, Client, ConnectionFailed, RateLimited, RetryPolicy, ServerError
from postbox_client import transport as transport_module
from postbox_client.errors import code_and_message


@pytest.fixture
def slept(monkeypatch) -> list[float]:
    waits: list[float] = []

    async def no_wait(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(transport_module, "_sleep", waits.append)
    monkeypatch.setattr(transport_module, "_asleep", no_wait)
    return waits


def _client(answers, **kw) -> tuple[Client, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        answer = answers[min(len(seen), len(answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer

    http = httpx.Client(base_url="http://postbox.test", transport=httpx.MockTransport(handle))
    return Client("http://postbox.test", "pbk_test", http=http, **kw), seen


OK_SEND = httpx.Response(201, json={"msg_id": 7})


def test_429_and_503_are_retried_even_for_a_send_since_nothing_landed(slept):
    pb, seen = _client([httpx.Response(429, headers={"retry-after": "2"}, json={"detail": "slow down"}),
                        httpx.Response(503, json={"message": "Service Unavailable"}), OK_SEND])
    assert pb.queues.send("q", "hi") == 7
    assert len(seen) == 3 and slept[0] >= 2  # Retry-After is honoured


def test_a_send_that_may_have_landed_is_not_retried(slept):
    pb, seen = _client([httpx.ReadTimeout("no answer"), OK_SEND])
    with pytest.raises(ConnectionFailed) as failed:
        pb.queues.send("q", "hi")
    assert len(seen) == 1 and failed.value.status == 0 and "ReadTimeout" in failed.value.message
    pb, seen = _client([httpx.Response(504, json={"message": "Gateway Timeout"}), OK_SEND])
    with pytest.raises(ServerError):
        pb.queues.send("q", "hi")
    assert len(seen) == 1


def test_a_failed_connect_is_retried_for_any_call(slept):
    pb, seen = _client([httpx.ConnectError("refused"), OK_SEND])
    assert pb.queues.send("q", "hi") == 7 and len(seen) == 2


def test_idempotent_calls_and_calls_with_an_idempotency_key_are_retried_after_a_lost_answer(slept):
    listing = httpx.Response(200, json={"queues": [], "limits": {}, "usage": {}})
    pb, seen = _client([httpx.ReadTimeout("lost"), httpx.Response(502, json={}), listing])
    assert pb.queues.list() == [] and len(seen) == 3
    published = httpx.Response(200, json={"message": {"id": "m", "offset": 3}, "replayed": True})
    pb, seen = _client([httpx.ReadTimeout("lost"), published])
    message, replayed = pb.streams.publish("s", {"a": 1}, idempotency_key="k-1")
    assert message.offset == 3 and replayed and len(seen) == 2
    pb, seen = _client([httpx.ReadTimeout("lost"), published])
    with pytest.raises(ConnectionFailed):
        pb.streams.publish("s", {"a": 1})  # no idempotency key: may have landed, not sent again
    assert len(seen) == 1


def test_retries_stop_after_the_policy_attempts_with_growing_jittered_waits(slept):
    busy = httpx.Response(503, json={"message": "busy"})
    pb, seen = _client([busy], retry=RetryPolicy(attempts=4, base_s=1.0, max_s=100))
    with pytest.raises(ServerError) as failed:
        pb.queues.list()
    assert len(seen) == 4 and len(slept) == 3 and failed.value.status == 503
    assert all(0 <= w <= cap for w, cap in zip(slept, (1, 2, 4), strict=True))


def test_backoff_is_full_jitter_under_a_cap():
    policy = RetryPolicy(base_s=0.5, max_s=3)
    rng = random.Random(1)
    waits = [policy.backoff(n, rng=rng) for n in range(1, 8) for _ in range(50)]
    assert max(waits) <= 3 and min(waits) >= 0 and len(set(waits)) > 100


def test_async_client_retries_the_same_way(slept):
    answers = [httpx.Response(429, json={"error": {"code": "backlog_full", "message": "full"}})] * 10
    calls: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return answers[0]

    async def run() -> None:
        http = httpx.AsyncClient(base_url="http://postbox.test", transport=httpx.MockTransport(handle))
        async with AsyncClient("http://postbox.test", "k", http=http, retry=RetryPolicy(attempts=3)) as pb:
            with pytest.raises(RateLimited) as refused:
                await pb.streams.publish("s", {})
            assert refused.value.code == "backlog_full" and refused.value.message == "full"

    asyncio.run(run())
    assert len(calls) == 3


@pytest.mark.parametrize(("status", "body", "code", "message"), [
    (404, {"detail": "No such queue."}, "", "No such queue."),
    (403, {"detail": {"code": "max_queues", "message": "plan limit"}}, "max_queues", "plan limit"),
    (422, {"detail": [{"loc": ["body", "qty"], "msg": "too big"}]}, "validation", "body.qty: too big"),
    (400, {"error": "items.0.queue: Field required", "field": "items.0.queue"}, "", "items.0.queue: Field required"),
    (403, {"success": False, "denied": True, "error": "no grant"}, "denied", "no grant"),
    (409, {"error": {"code": "STREAM_SEQ_CONFLICT", "message": "seq"}}, "STREAM_SEQ_CONFLICT", "seq"),
    (403, {"message": "Forbidden"}, "", "Forbidden"),
    (410, None, "", "gone"),
])
def test_every_surface_error_shape_is_read(status, body, code, message):
    assert code_and_message(status, body) == (code, message)
