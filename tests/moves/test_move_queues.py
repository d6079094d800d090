"""A tenant moved to another cell while a producer and a consumer use its queue: every message
arrives once, in order; writes met during the freeze answer 503 with Retry-After and succeed again."""

from __future__ import annotations

import time

import psycopg

from functions.api.queues.app import handler as queues_handler
from postbox import directory, moves
from support.moving import Live, Surface


def _traffic(api: Surface, sent: list[int], got: list[int]) -> Live:
    """One producer sending numbered messages and one consumer reading and deleting them."""

    def produce() -> None:
        status, body = api.call("POST", "/api/v1/queues/orders/send", {"message": {"n": len(sent)}})
        assert status == 201, body
        sent.append(len(sent))

    def consume() -> bool:
        status, body = api.call("POST", "/api/v1/queues/orders/read", {"qty": 10, "vt": 60})
        assert status == 200, body
        found = body["messages"]
        if found:
            got.extend(m["message"]["n"] for m in found)
            status, body = api.call("POST", "/api/v1/queues/orders/delete", {"msg_ids": [m["msg_id"] for m in found]})
            assert status == 200 and len(body["deleted"]) == len(found), body
        return bool(found)

    return Live(produce, consume)


def _rows(url: str, tenant_id: str) -> int:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT count(*) FROM queues WHERE tenant_id = %s", (tenant_id,)).fetchone()[0] + \
            conn.execute("SELECT count(*) FROM tenants WHERE id = %s", (tenant_id,)).fetchone()[0]


def test_a_queue_keeps_every_message_in_order_while_its_tenant_moves(two_cells, moving):
    one, two = two_cells
    api = Surface(queues_handler, "queues", moving.key)
    assert api.call("POST", "/api/v1/queues", {"name": "orders"})[0] == 201
    for n in range(500):  # a backlog to copy
        api.call("POST", "/api/v1/queues/orders/send", {"message": {"n": -500 + n}})
    sent: list[int] = []
    got: list[int] = []
    with _traffic(api, sent, got) as traffic:
        time.sleep(0.5)
        report = moves.move(moving.name, "cell-2")
        time.sleep(0.5)  # traffic on the new cell
    assert not traffic.errors, traffic.errors
    assert report["freeze_s"] < 5
    print(f"sent {len(sent)}, refused {api.refused} times during the freeze", report)
    assert got == list(range(-500, len(sent))), "lost, doubled or out of order"
    assert directory.cell_of(moving.id).name == "cell-2"
    assert _rows(one, moving.id) == 0 and _rows(two, moving.id) == 2
    with psycopg.connect(one) as conn:  # the move's triggers and log are gone from the source
        assert conn.execute("SELECT count(*) FROM pg_trigger WHERE tgname LIKE %s",
                            (f"postbox_move_{report['move']}_%",)).fetchone()[0] == 0
        assert conn.execute("SELECT phase FROM control.tenant_moves WHERE id = %s", (report["move"],)).fetchone() == (
            "done",)
