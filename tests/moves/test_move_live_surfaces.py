"""A tenant moved while a producer and a consumer use a work queue, a partitioned queue and a durable
stream through the real handlers: every message once, in order (each promises it to a single
consumer), the writes met during the freeze answered 503 with Retry-After and sent again."""

from __future__ import annotations

import json
import time
import uuid

from functions.api.durable.app import handler as durable_handler
from functions.api.partitioned.app import handler as partitioned_handler
from functions.api.work.app import handler as work_handler
from postbox import directory, moves, tenancy
from support.moving import Live, Surface

W = "/v1/modules/scaiqueue"
BACKLOG = 300


def _moved_under(live: Live, tenant) -> dict:
    with live:
        time.sleep(0.5)
        report = moves.move(tenant.name, "cell-2")
        time.sleep(0.5)  # traffic on the new cell
    assert not live.errors, live.errors
    assert report["freeze_s"] < 5
    assert directory.cell_of(tenant.id).name == "cell-2"
    return report


def test_a_work_queue_keeps_every_message_in_order_while_its_tenant_moves(two_cells, moving):
    tenancy.set_plan(moving.id, "pro")  # (the free plan's 1,000 work requests a minute)
    api = Surface(work_handler, "work", moving.key)
    scope = api.call("POST", f"{W}/scopes", {"slug": "live"})[1]["data"]["id"]
    queue = api.call("POST", f"{W}/scopes/{scope}/queues", {"slug": "jobs"})[1]["data"]["id"]
    base = f"{W}/scopes/{scope}/queues/{queue}"
    sent: list[int] = []
    got: list[int] = []

    def produce() -> None:
        status, body = api.call("POST", f"{base}/messages", {"body": {"n": len(sent)}})
        assert status == 201, body
        sent.append(body["data"]["body"]["n"])

    def consume() -> bool:
        status, body = api.call("POST", f"{base}/messages/claim", {"batch_size": 10, "visibility_timeout_s": 60})
        assert status == 200, body
        if body["data"]:
            got.extend(m["body"]["n"] for m in body["data"])
            status, done = api.call("POST", f"{W}/scopes/{scope}/messages/complete-batch", {"items": [
                {"id": m["id"], "claim_token": m["claim_token"]} for m in body["data"]]})
            assert status == 200 and all(a["ok"] for a in done["data"]), done
        return bool(body["data"])

    for _ in range(BACKLOG):
        produce()
    _moved_under(Live(produce, consume), moving)
    assert got == sent == list(range(len(sent))), "lost, doubled or out of order"
    stats = api.call("GET", f"{base}/stats")[1]["data"]
    assert (stats["depth_current"], stats["published_total"], stats["completed_total"]) == (0, len(sent), len(sent))
    print(f"work: {len(sent)} messages, {api.refused} writes refused during the freeze")


def test_a_partitioned_queue_keeps_every_message_in_order_while_its_tenant_moves(two_cells, moving):
    api = Surface(partitioned_handler, "partitioned", moving.key)
    sent: list[int] = []
    got: list[int] = []

    def produce() -> None:
        n = len(sent)
        status, body = api.call("POST", "/api/v1/push", {"items": [
            {"queue": "orders", "partition": "Default", "payload": {"n": n}}]})
        assert status == 201 and body[0]["status"] == "queued", body
        sent.append(n)

    def consume() -> bool:
        status, body = api.call("GET", "/api/v1/pop/queue/orders", query="batch=10")
        if status == 204:
            return False
        assert status == 200, body
        found = body["messages"]
        got.extend(m["data"]["n"] for m in found)
        status, acked = api.call("POST", "/api/v1/ack/batch", {"acknowledgments": [
            {"transactionId": m["transactionId"], "leaseId": m["leaseId"], "partitionId": m["partitionId"],
             "status": "completed"} for m in found]})
        assert status == 200 and acked["processed"] == len(found), acked
        return True

    for _ in range(BACKLOG):
        produce()
    _moved_under(Live(produce, consume), moving)
    assert got == sent == list(range(len(sent))), "lost, doubled or out of order"
    print(f"partitioned: {len(sent)} messages, {api.refused} writes refused during the freeze")


def test_a_durable_stream_keeps_every_message_in_order_while_its_tenant_moves(two_cells, moving):
    api = Surface(durable_handler, "durable", moving.key)
    path = f"/v1/stream/live-{uuid.uuid4().hex[:8]}"
    json_body = {"headers": {"content-type": "application/json"}}
    assert api.raw("PUT", path, raw_body="[]", **json_body)["statusCode"] == 201
    sent: list[int] = []
    got: list[int] = []
    offset = ["-1"]

    def produce() -> None:
        n = len(sent)
        answer = api.raw("POST", path, raw_body=json.dumps({"n": n}), **json_body)
        assert answer["statusCode"] == 204, answer
        sent.append(n)

    def consume() -> bool:
        answer = api.raw("GET", path, query=f"offset={offset[0]}")
        assert answer["statusCode"] == 200, answer
        found = json.loads(answer["body"])
        got.extend(m["n"] for m in found)
        offset[0] = {k.lower(): v for k, v in answer["headers"].items()}["stream-next-offset"]
        return bool(found)

    for _ in range(BACKLOG):
        produce()
    _moved_under(Live(produce, consume), moving)
    assert got == sent == list(range(len(sent))), "lost, doubled or out of order"
    print(f"durable: {len(sent)} messages, {api.refused} writes refused during the freeze")
