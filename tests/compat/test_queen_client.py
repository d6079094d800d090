"""Queen's own Python client (`queen-mq`, pinned in the dev extra) against the local gateway,
unchanged: what it returns is what a Queen user sees. Each test works in a fresh tenant.

The streaming tests run the client's streaming SDK (`queen.Stream`) end to end: pops from the
source, cycles on /streams/v1, and the sink queue read back with the same client.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

queen = pytest.importorskip("queen", reason="queen-mq is installed by the dev extra")
Queen, Stream = queen.Queen, queen.Stream
from queen.streams.runtime.register import StreamsConfigHashMismatch  # noqa: E402


def run(body: Callable[[Any], Awaitable[Any]], gateway, tenant) -> Any:
    async def go():
        async with Queen(gateway.url, bearer_token=tenant.key, retry_attempts=1) as q:
            return await body(q)

    return asyncio.run(go())


async def drain(q, queue: str, want: int, *, group: str | None = None, timeout_s: float = 15.0) -> list[dict]:
    """Pop (and ack) from `queue` until `want` messages came, or fail after `timeout_s`."""
    got: list[dict] = []
    deadline = asyncio.get_running_loop().time() + timeout_s
    while len(got) < want:
        assert asyncio.get_running_loop().time() < deadline, f"only {len(got)} of {want}: {got}"
        qb = q.queue(queue).batch(100).wait(True).timeout_millis(500)
        batch = await (qb.group(group) if group else qb).pop()
        if batch:
            await q.ack(batch, True, {"group": group} if group else {})
            got += batch
    return got


# ---- queues, push, pop, ack -------------------------------------------------------------------


def test_create_echoes_options_and_push_answers_ids_in_push_order(gateway, tenant):
    async def body(q):
        created = await q.queue("orders").config({"leaseTime": 30, "retryLimit": 2, "priority": 7}).create()
        pushed = await q.queue("orders").push([{"data": {"n": n}} for n in range(6)])
        again = await q.queue("orders").push([{"data": {"n": 0}, "transactionId": pushed[0]["transactionId"]}])
        return created, pushed, again

    created, pushed, again = run(body, gateway, tenant)
    assert created["configured"] is True
    assert created["options"]["leaseTime"] == 30 and created["options"]["retryLimit"] == 2
    assert created["options"]["priority"] == 7 and created["options"]["maxSize"] == 0  # accepted, ignored, echoed
    assert [p["status"] for p in pushed] == ["queued"] * 6
    ids = [p["messageId"] for p in pushed]
    assert ids == sorted(ids) and len(set(ids)) == 6
    assert all(uuid.UUID(i).version == 7 for i in ids)
    assert again[0]["status"] == "duplicate" and again[0]["messageId"] == ids[0]


def test_pop_partitions_and_autopilot_batch(gateway, tenant):
    async def body(q):
        for name in ("a", "b", "c"):
            await q.queue("wide").partition(name).push([{"data": f"{name}{n}"} for n in range(3)])
        one = await q.queue("wide").batch(10).partitions(2).wait(False).pop()
        rest = await q.queue("wide").wait(False).pop()  # no batch: the server sizes it (autopilot)
        return one, rest

    one, rest = run(body, gateway, tenant)
    assert len(one) == 6 and len({m["partitionId"] for m in one}) == 2
    [left] = {"a", "b", "c"} - {m["data"][0] for m in one}  # which two partitions come first is the server's
    assert [m["data"] for m in rest] == [f"{left}{n}" for n in range(3)]


def test_pop_before_the_queue_exists_is_empty_not_an_error(gateway, tenant):
    async def body(q):
        missing = await q.queue("later").wait(False).pop()
        waiting = asyncio.ensure_future(q.queue("later").partition("p").batch(5).wait(True).timeout_millis(5000).pop())
        await asyncio.sleep(0.3)
        await q.queue("later").partition("p").push([{"data": "first"}])
        return missing, await waiting

    missing, waited = run(body, gateway, tenant)
    assert missing == []
    assert [m["data"] for m in waited] == ["first"]


def test_consume_started_before_its_producer_gets_every_message(gateway, tenant):
    seen: list[Any] = []

    async def handler(message):
        seen.append(message["data"])

    async def body(q):
        jobs = q.queue("jobs").batch(1).limit(4).wait(True).timeout_millis(500)
        worker = asyncio.ensure_future(jobs.consume(handler))
        await asyncio.sleep(0.3)
        await q.queue("jobs").push([{"data": n} for n in range(4)])
        await asyncio.wait_for(worker, 15)
        return await q.queue("jobs").wait(False).pop()

    left = run(body, gateway, tenant)
    assert seen == [0, 1, 2, 3] and left == []


def test_consumer_groups_and_subscription_modes(gateway, tenant):
    async def body(q):
        await q.queue("events").push([{"data": "old"}])
        await q.queue("events").group("fresh").subscription_mode("new").wait(False).pop()  # joins, at the end
        await q.queue("events").push([{"data": "new"}])
        fresh = await drain(q, "events", 1, group="fresh")
        everything = await q.queue("events").group("replay").subscription_mode("from_beginning").batch(10).wait(
            False).pop()
        plain = await q.queue("events").group("plain").batch(10).wait(False).pop()
        deleted = await q.delete_consumer_group("plain")
        again = await q.queue("events").group("plain").batch(10).wait(False).pop()
        return fresh, everything, plain, deleted, again

    fresh, everything, plain, deleted, again = run(body, gateway, tenant)
    assert [m["data"] for m in fresh] == ["new"]
    assert [m["data"] for m in everything] == ["old", "new"]  # from_beginning: every message
    assert [m["data"] for m in plain] == ["old", "new"] and plain[0]["consumerGroup"] == "plain"
    assert deleted["deleted"] is True
    assert [m["data"] for m in again] == ["old", "new"]  # a deleted group starts over


def test_ack_single_batch_and_failures_retry(gateway, tenant):
    async def body(q):
        await q.queue("work").config({"retryLimit": 1}).create()
        await q.queue("work").push([{"data": n} for n in range(3)])
        first = await q.queue("work").batch(1).wait(False).pop()
        single = await q.ack(first[0], True)
        two = await q.queue("work").batch(2).wait(False).pop()
        batch = await q.ack(two, True)
        await q.queue("work").push([{"data": "flaky"}])
        flaky = await q.queue("work").wait(False).pop()
        failed = await q.ack(flaky[0], False, {"error": "boom"})
        retried = await q.queue("work").wait(False).pop()
        return single, batch, failed, retried

    single, batch, failed, retried = run(body, gateway, tenant)
    assert single["success"] is True and batch["success"] is True and failed["success"] is True
    assert [m["data"] for m in retried] == ["flaky"] and retried[0]["retryCount"] == 1


def test_ack_with_status_dlq_dead_letters_at_once(gateway, tenant):
    async def body(q):
        await q.queue("poison").config({"retryLimit": 5}).create()
        await q.queue("poison").push([{"data": "bad"}, {"data": "good"}])
        bad = await q.queue("poison").batch(1).wait(False).pop()
        acked = await q.ack(bad[0], "dlq", {"error": "unparseable"})
        good = await q.queue("poison").wait(False).pop()
        dead = await q.queue("poison").dlq().limit(10).get()
        return acked, good, dead

    acked, good, dead = run(body, gateway, tenant)
    assert acked["success"] is True and acked["dlq"] is True
    assert [m["data"] for m in good] == ["good"]
    assert [m["data"] for m in dead["messages"]] == ["bad"] and dead["messages"][0]["errorMessage"] == "unparseable"


def test_dlq_after_retries(gateway, tenant):
    async def body(q):
        await q.queue("fragile").config({"retryLimit": 0, "dlqAfterMaxRetries": True}).create()
        await q.queue("fragile").push([{"data": "x"}])
        got = await q.queue("fragile").wait(False).pop()
        await q.ack(got[0], False, {"error": "nope"})
        return await q.queue("fragile").dlq().get(), await q.queue("fragile").wait(False).pop()

    dead, left = run(body, gateway, tenant)
    assert dead["total"] == 1 and dead["messages"][0]["data"] == "x" and left == []


def test_lease_renewal(gateway, tenant):
    async def body(q):
        await q.queue("slow").config({"leaseTime": 2}).create()
        await q.queue("slow").push([{"data": 1}])
        got = await q.queue("slow").wait(False).pop()
        renewed = await q.renew(got[0])
        lost = await q.renew(str(uuid.uuid4()))
        return got, renewed, lost

    got, renewed, lost = run(body, gateway, tenant)
    assert renewed["success"] is True and renewed["leaseId"] == got[0]["leaseId"] and renewed["newExpiresAt"]
    assert lost["success"] is False


def test_consume_with_lease_renewal_outlives_the_lease(gateway, tenant):
    done: list[Any] = []

    async def handler(message):
        await asyncio.sleep(2.5)  # past the 1 s lease: only the renewals keep it
        done.append(message["data"])

    async def body(q):
        await q.queue("long").config({"leaseTime": 1}).create()
        await q.queue("long").push([{"data": "job"}])
        await q.queue("long").batch(1).limit(1).renew_lease(True, 300).wait(False).consume(handler)
        return await q.queue("long").wait(False).pop()

    assert run(body, gateway, tenant) == [] and done == ["job"]


def test_transaction_acks_and_pushes_atomically(gateway, tenant):
    async def body(q):
        await q.queue("in").push([{"data": "a"}])
        got = await q.queue("in").wait(False).pop()
        committed = await q.transaction().ack(got[0]).queue("out").push([{"data": "A"}]).commit()
        out = await q.queue("out").wait(False).pop()
        left = await q.queue("in").wait(False).pop()
        return committed, out, left

    committed, out, left = run(body, gateway, tenant)
    assert committed["success"] is True
    assert [m["data"] for m in out] == ["A"] and left == []


def test_transaction_with_only_required_leases_as_older_clients_send_it(api):
    """Older clients send the lease once, in `requiredLeases`, and acks without their own."""
    api.post("/api/v1/push", json={"items": [{"queue": "legacy", "payload": 1}]})
    got = api.get("/api/v1/pop/queue/legacy").json()["messages"][0]
    answer = api.post("/api/v1/transaction", json={"requiredLeases": [got["leaseId"]], "operations": [
        {"type": "ack", "transactionId": got["transactionId"], "partitionId": got["partitionId"],
         "status": "completed"},
        {"type": "push", "items": [{"queue": "legacy-out", "payload": 2}]},
    ]})
    assert answer.status_code == 200 and answer.json()["success"] is True
    assert api.get("/api/v1/pop/queue/legacy").status_code == 204
    stale = api.post("/api/v1/transaction", json={"requiredLeases": [got["leaseId"]], "operations": [
        {"type": "push", "items": [{"queue": "legacy-out", "payload": 3}]}]})
    assert stale.status_code == 409  # a required lease that is gone: nothing applies
    assert len(api.get("/api/v1/pop/queue/legacy-out", params={"batch": 10}).json()["messages"]) == 1


def test_admin_routes_the_client_calls(gateway, tenant):
    async def body(q):
        await q.queue("listed").partition("p1").push([{"data": 1}, {"data": 2}])
        health = await q.admin.health()
        queues = await q.admin.list_queues()
        overview = await q.admin.get_overview()
        fetched = await q.queue("listed").fetch(["p1", "nope"])
        deleted = await q.queue("listed").delete()
        after = await q.admin.list_queues()
        return health, queues, overview, fetched, deleted, after

    health, queues, overview, fetched, deleted, after = run(body, gateway, tenant)
    assert health["status"] == "healthy"
    assert [x["name"] for x in queues["queues"]] == ["listed"] and queues["queues"][0]["messages"] == 2
    assert overview["queues"] == 1 and overview["partitions"] == 1
    assert [r["payload"] for r in fetched["p1"]["records"]] == [1, 2] and fetched["nope"]["records"] == []
    assert deleted["deleted"] is True and after["queues"] == []


def test_trace_from_a_handler_succeeds(gateway, tenant):
    traced: list[Any] = []

    async def handler(message):
        traced.append(await message["trace"]({"data": {"step": "seen"}, "traceName": "order-1"}))

    async def body(q):
        await q.queue("traced").push([{"data": 1}])
        await q.queue("traced").batch(1).limit(1).wait(False).consume(handler)

    run(body, gateway, tenant)
    assert traced == [{"success": True, "stored": False}]


def test_errors_come_in_queens_shape(gateway, tenant):
    with httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {tenant.key}"}) as http:
        refused = http.post("/api/v1/push", json={"items": [{"queue": "q", "payload": 1, "colour": "red"}]})
        assert refused.status_code == 400 and refused.json()["error"].startswith("items.0.colour")
        unknown = http.get("/api/v1/status/queues")  # a Queen route Postbox does not serve
        assert unknown.status_code == 404 and unknown.json() == {"error": "no such route: GET /api/v1/status/queues"}
        assert http.put("/api/v1/queues").status_code == 404  # another surface's path, unknown method


def test_an_unknown_route_fails_the_client_with_its_message(gateway, tenant):
    async def body(q):
        with pytest.raises(httpx.HTTPStatusError) as refused:
            await q.admin.get_status()
        return str(refused.value)

    assert run(body, gateway, tenant) == "no such route: GET /api/v1/status"


# ---- streaming queries -------------------------------------------------------------------------


def stream_run(q, gateway, tenant, pipeline, query: str):
    from postbox.flows import quotas

    quotas.grant(tenant.tenant_id)  # streaming queries need the operator's grant
    return pipeline.run(query_id=query, url=gateway.url, bearer_token=tenant.key, max_wait_millis=200,
                        batch_size=50)


EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def _at(second: float) -> dict:
    """An event `second`s into the test's event time."""
    return {"t": (EPOCH + timedelta(seconds=second)).isoformat().replace("+00:00", "Z")}


def test_gate_emits_in_push_order_and_commits_what_it_emits(gateway, tenant):
    async def gate(value, ctx):
        ctx.state["n"] = ctx.state.get("n", 0) + 1
        return ctx.state["n"] <= 3

    async def body(q):
        await q.queue("gsrc").push([{"data": n} for n in range(6)])  # one push: one millisecond
        runner = await stream_run(q, gateway, tenant, Stream.from_(q.queue("gsrc")).gate(gate).to(q.queue("gout")),
                                  "gate-q")
        try:
            out = await drain(q, "gout", 3)
            await asyncio.sleep(0.5)
            extra = await q.queue("gout").wait(False).pop()
        finally:
            await runner.stop()
        return out, extra

    out, extra = run(body, gateway, tenant)
    assert [m["data"] for m in out] == [{"value": 0}, {"value": 1}, {"value": 2}] and extra == []


def _windowed(window: Callable[[Any], Any], query: str, events: list[tuple[float, int]], want: int, gateway, tenant):
    async def body(q):
        await q.queue(f"{query}-src").push([{"data": {**_at(t), "v": v}} for t, v in events])
        pipeline = window(Stream.from_(q.queue(f"{query}-src"))).reduce(lambda acc, m: acc + m["v"], 0)
        runner = await stream_run(q, gateway, tenant, pipeline.to(q.queue(f"{query}-out")), query)
        try:
            return [m["data"] for m in await drain(q, f"{query}-out", want)]
        finally:
            await runner.stop()

    return run(body, gateway, tenant)


def _event_time(message):
    return message["data"]["t"]


def test_tumbling_window_on_event_time(gateway, tenant):
    out = _windowed(lambda s: s.window_tumbling(seconds=10, event_time=_event_time), "tumb",
                    [(1, 1), (2, 2), (11, 10), (12, 20), (25, 100)], 2, gateway, tenant)
    assert out == [{"value": 3}, {"value": 30}]  # [20, 30) is still open: event time has not passed it


def test_sliding_window_on_event_time(gateway, tenant):
    out = _windowed(lambda s: s.window_sliding(size=10, slide=5, event_time=_event_time), "slide",
                    [(1, 1), (6, 2), (12, 4), (40, 0)], 4, gateway, tenant)
    # [-5,5) 1, [0,10) 3, [5,15) 6, [10,20) 4; windows closing in one cycle come in no set order
    assert sorted(o["value"] for o in out) == [1, 3, 4, 6]


def test_session_window_on_event_time(gateway, tenant):
    out = _windowed(lambda s: s.window_session(gap=5, event_time=_event_time), "sess",
                    [(1, 1), (2, 2), (30, 5), (31, 6), (60, 0)], 2, gateway, tenant)
    assert out == [{"value": 3}, {"value": 11}]


def test_a_changed_operator_chain_is_refused_as_a_config_hash_mismatch(gateway, tenant):
    async def body(q):
        first = await stream_run(q, gateway, tenant, Stream.from_(q.queue("hsrc")).map(lambda v: v).to(
            q.queue("hout")), "hashed")
        await first.stop()
        changed = Stream.from_(q.queue("hsrc")).filter(lambda v: True).to(q.queue("hout"))
        with pytest.raises(StreamsConfigHashMismatch) as refused:
            await stream_run(q, gateway, tenant, changed, "hashed")
        return str(refused.value)

    assert run(body, gateway, tenant).startswith("config_hash mismatch: query 'hashed'")


def test_a_token_bucket_gate_lets_the_rest_through_as_it_refills_in_order(gateway, tenant):
    """token_bucket_gate(capacity=3, refill_per_sec=3) over six messages: three pass at once, the
    cycle acks them with `release_lease: false`, and the other three come back (same lease, a short
    pause, not the source's 30 s leaseTime) as the bucket refills, in push order."""
    from queen.streams.helpers.rate_limiter import token_bucket_gate

    async def body(q):
        await q.queue("tbsrc").push([{"data": n} for n in range(6)])
        pipeline = Stream.from_(q.queue("tbsrc")).gate(token_bucket_gate(capacity=3, refill_per_sec=3))
        runner = await stream_run(q, gateway, tenant, pipeline.to(q.queue("tbout")), "tb-q")
        try:
            return await drain(q, "tbout", 6, timeout_s=10.0)  # far below the source's 30 s leaseTime
        finally:
            await runner.stop()

    out = run(body, gateway, tenant)
    assert [m["data"] for m in out] == [{"value": n} for n in range(6)]
