"""The partitioned-queue, keyed-stream, durable-stream and flows clients, and the async client,
against the local gateway."""

from __future__ import annotations

import asyncio
import threading

import pytest

from postbox.flows import quotas
from postbox_client import AsyncClient, BadRequest, Conflict, Forbidden, NotFound, item


def test_partitioned_push_pop_ack_lag_and_dead_letter_replay(pb):
    pb.partitioned.configure("orders", leaseTime=30, retryLimit=0)
    pushed = pb.partitioned.push([item("orders", {"n": n}, partition="p1", transaction_id=f"o-{n}") for n in range(3)])
    assert [p.status for p in pushed] == ["queued"] * 3 and pushed[0].partition == "p1"
    again = pb.partitioned.push([item("orders", {"n": 0}, partition="p1", transaction_id="o-0")])
    assert again[0].status == "duplicate"
    popped = pb.partitioned.pop("orders", batch=2, consumer_group="billing")
    assert [m.payload for m in popped] == [{"n": 0}, {"n": 1}] and popped[0].lease_id
    assert pb.partitioned.ack(popped[-1])["success"] is True
    groups = {g["name"]: g for g in pb.partitioned.resource("orders")["partitions"][0]["consumerGroups"]}
    assert groups["billing"]["committedOffset"] == 2 and groups["billing"]["lag"] == 1
    [last] = pb.partitioned.pop("orders", batch=5, consumer_group="billing")
    assert pb.partitioned.ack(last, status="failed", error="broken")["dlq"] is True  # retryLimit 0
    dead = pb.partitioned.dead_letters("orders")
    assert dead["total"] == 1 and dead["messages"][0]["transactionId"] == "o-2"
    assert pb.partitioned.replay([str(dead["messages"][0]["id"])])["replayed"] == 1
    assert [m.payload for m in pb.partitioned.pop("orders", batch=5, consumer_group="billing")] == [{"n": 2}]


def test_partitioned_pop_on_an_empty_or_unknown_queue_is_an_empty_list(pb):
    pb.partitioned.configure("quiet")
    assert pb.partitioned.pop("quiet", batch=3) == []
    assert pb.partitioned.pop("never-made") == []  # as in Queen: a worker may start before its producer


def test_keyed_stream_publish_consume_ack_and_idempotency(pb):
    pb.streams.create("signups", retention="30d")
    with pytest.raises(Conflict):
        pb.streams.create("signups")
    sub = pb.streams.subscribe("signups", "mailer")
    assert sub.name == "mailer" and sub.pending == 0
    first, replayed = pb.streams.publish("signups", {"user": 1}, key="u1", idempotency_key="signup-1")
    assert not replayed and first.key == "u1"
    same, replayed = pb.streams.publish("signups", {"user": 1}, key="u1", idempotency_key="signup-1")
    assert replayed and same.offset == first.offset
    pb.streams.publish("signups", {"user": 2}, key="u2")
    got = pb.streams.consume("signups", "mailer", max_messages=10)
    assert sorted(m.key for m in got) == ["u1", "u2"] and all(m.receipt for m in got)
    assert sorted(pb.streams.ack("signups", "mailer", [m.receipt for m in got])["acked"]) == sorted(
        m.offset for m in got)
    assert pb.streams.subscription("signups", "mailer").acked == 2
    listed = {s.name: s for s in pb.streams.list()}
    assert listed["signups"].messages == 2 and listed["signups"].subscriptions == ["mailer"]
    messages, _ = pb.streams.browse("signups", key="u2")
    assert [m.payload for m in messages] == [{"user": 2}]


def test_keyed_stream_publish_batch_answers_each_message_in_place(pb, monkeypatch):
    import postbox_client

    assert postbox_client.Streams is type(pb.streams) and postbox_client.PublishResult is not None
    pb.streams.create("batch", retention="1d")
    results = pb.streams.publish_batch("batch", [
        {"payload": {"n": 1}, "key": "a", "idempotency_key": "one"},
        {"payload": {"n": 2}, "key": "b", "headers": {"h": 1}},
        {"key": "no payload"},
        {"payload": {"n": 1}, "idempotency_key": "one"},
    ])
    assert [r.ok for r in results] == [True, True, False, True]
    assert [r.replayed for r in results] == [False, False, False, True]
    assert [r.offset for r in results] == [0, 1, None, 0] and results[1].status == "available"
    assert results[3].id == results[0].id and results[0].id.startswith("msg_") and results[0].error is None
    assert results[2].id is None and results[2].error["code"] == "invalid_payload"
    assert pb.streams.message("batch", 1).headers == {"h": 1}
    assert pb.streams.get("batch").messages == 2
    # Retried like a read only when every message carries an idempotency key.
    calls = []
    real = pb.streams._t.run
    monkeypatch.setattr(pb.streams._t, "run", lambda call: calls.append(call.idempotent) or real(call))
    pb.streams.publish_batch("batch", [{"payload": 1, "idempotency_key": "x"}])
    pb.streams.publish_batch("batch", [{"payload": 1, "idempotency_key": "y"}, {"payload": 2}])
    assert calls == [True, False]
    with pytest.raises(BadRequest) as error:  # the request's own limit
        pb.streams.publish_batch("batch", [])
    assert error.value.status == 400 and error.value.code == "invalid_messages"


def test_keyed_stream_tail_follows_new_messages(pb):
    pb.streams.create("events")
    old, _ = pb.streams.publish("events", "old")
    stop = threading.Event()
    seen: list = []

    def follow() -> None:
        for m in pb.streams.tail("events", after=old.offset, interval_s=0.1, stop=stop):
            seen.append(m.payload)
            if len(seen) == 3:
                stop.set()

    t = threading.Thread(target=follow)
    t.start()
    for n in range(3):
        pb.streams.publish("events", f"new-{n}")
    t.join(timeout=30)
    assert not t.is_alive() and seen == ["new-0", "new-1", "new-2"]  # "old" is not after itself


def test_durable_create_append_read_and_tail_until_closed(pb):
    info = pb.durable.create("audit")
    assert info.next_offset and not info.closed
    pb.durable.append("audit", [{"e": 1}, {"e": 2}])
    got = pb.durable.read("audit")
    assert got.messages == [{"e": 1}, {"e": 2}] and got.up_to_date
    seen: list = []

    def follow() -> None:
        seen.extend(pb.durable.tail("audit"))

    t = threading.Thread(target=follow)
    t.start()
    pb.durable.append("audit", {"e": 3}, producer=("writer", 0, 0))
    pb.durable.append("audit", {"e": 3}, producer=("writer", 0, 0))  # a duplicate: appended once
    pb.durable.close("audit")
    t.join(timeout=60)
    assert not t.is_alive() and seen == [{"e": 1}, {"e": 2}, {"e": 3}]
    assert pb.durable.head("audit").closed
    pb.durable.delete("audit")
    with pytest.raises(NotFound):
        pb.durable.head("audit")


def test_flows_register_needs_a_grant_then_cycle_and_state(pb):
    with pytest.raises(Forbidden) as denied:
        pb.flows.register("totals", "src", "out", "v1")
    assert denied.value.code == "denied"
    quotas.grant(pb.tenant.tenant_id)
    query = pb.flows.register("totals", "src", "out", "v1")["query_id"]
    pb.partitioned.push([item("src", 5), item("src", 6)])
    leased = pb.partitioned.pop("src", batch=10, consumer_group=f"streams.{query}")
    answer = pb.flows.cycle({
        "query_id": query, "partition_id": leased[0].partition_id, "consumer_group": f"streams.{query}",
        "state_ops": [{"type": "upsert", "key": "total", "value": {"acc": 11}}],
        "push_items": [{"queue": "out", "payload": {"total": 11}}],
        "ack": {"transactionId": leased[-1].transaction_id, "leaseId": leased[-1].lease_id, "status": "completed"},
    })
    assert answer["success"] is True
    [row] = pb.flows.state(query, leased[0].partition_id)
    assert row["key"] == "total" and row["value"] == {"acc": 11}
    assert [m.payload for m in pb.partitioned.pop("out", batch=5)] == [{"total": 11}]


def test_async_client_covers_queues_consume_and_streams(gateway, tenant):
    async def run() -> tuple[list, int]:
        async with AsyncClient(gateway.url, tenant.key) as pb:
            await pb.queues.create("async-jobs")
            await pb.queues.send_batch("async-jobs", [1, 2, 3])
            handled: list = []

            async def handler(message) -> None:
                handled.append(message.message)

            done = await pb.queues.consume("async-jobs", handler, batch=2, until_empty=True)
            assert (await pb.queues.metrics("async-jobs")).archived == 3
            await pb.streams.create("async-stream")
            _, replayed = await pb.streams.publish("async-stream", {"x": 1}, idempotency_key="once")
            assert replayed is False
            messages, _ = await pb.streams.browse("async-stream")
            assert [m.payload for m in messages] == [{"x": 1}]
            results = await pb.streams.publish_batch("async-stream", [{"payload": 2}, {"payload": 3, "key": "k"}])
            assert [r.offset for r in results] == [1, 2]
            await pb.durable.create("async-durable")
            await pb.durable.append("async-durable", {"a": 1})
            await pb.durable.close("async-durable")
            tailed = [m async for m in pb.durable.tail("async-durable")]
            assert tailed == [{"a": 1}]
            return handled, done

    handled, done = asyncio.run(run())
    assert sorted(handled) == [1, 2, 3] and done == 3


def test_async_consume_runs_a_blocking_handler_off_the_loop_and_leaves_failures(gateway, tenant):
    async def run() -> int:
        async with AsyncClient(gateway.url, tenant.key) as pb:
            await pb.queues.create("async-flaky")
            await pb.queues.send_batch("async-flaky", ["good", "bad"])

            def handler(message) -> None:
                if message.message == "bad":
                    raise ValueError("no")

            done = await pb.queues.consume("async-flaky", handler, batch=5, until_empty=True)
            waiting = (await pb.queues.browse("async-flaky")).messages
            assert [m.message for m in waiting] == ["bad"] and waiting[0].in_flight  # back after its vt
            return done

    assert asyncio.run(run()) == 1
