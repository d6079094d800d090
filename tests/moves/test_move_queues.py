"""A tenant moved to another cell while a producer and a consumer use its queue: every message
arrives once, in order; writes met during the freeze answer 503 with Retry-After and succeed again."""

from __future__ import annotations

import json
import threading
import time

import psycopg

from functions.api.queues.app import handler as queues_handler
from functions.local.lambda_context import LocalContext
from postbox import directory, moves
from support.events import api_event

CTX = LocalContext("queues")


def call(key: str, method: str, path: str, body=None, refused: list | None = None):
    """A request as a client makes it: a 503 is waited out (its Retry-After) and sent again."""
    while True:
        answer = queues_handler(api_event(method, path, key=key, body=body), CTX)
        if answer["statusCode"] != 503:
            return answer["statusCode"], json.loads(answer["body"])
        assert "Retry-After" in answer["headers"], answer
        if refused is not None:
            refused.append(answer["statusCode"])
        time.sleep(0.05)


class Traffic:
    """One producer sending numbered messages and one consumer reading and deleting them."""

    def __init__(self, key: str) -> None:
        self.key, self.sent, self.got, self.refused = key, 0, [], []
        self.stop, self.errors = threading.Event(), []
        self.threads = [threading.Thread(target=self._guard, args=(f,)) for f in (self._produce, self._consume)]

    def _guard(self, work) -> None:
        try:
            work()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.errors.append(e)

    def _produce(self) -> None:
        while not self.stop.is_set():
            status, body = call(self.key, "POST", "/api/v1/queues/orders/send", {"message": {"n": self.sent}},
                                self.refused)
            assert status == 201, body
            self.sent += 1

    def _consume(self) -> None:
        empty = 0
        while not (self.stop.is_set() and empty >= 3):
            status, body = call(self.key, "POST", "/api/v1/queues/orders/read", {"qty": 10, "vt": 60}, self.refused)
            assert status == 200, body
            found = body["messages"]
            empty = 0 if found else empty + 1
            if found:
                self.got += [m["message"]["n"] for m in found]
                status, body = call(self.key, "POST", "/api/v1/queues/orders/delete",
                                    {"msg_ids": [m["msg_id"] for m in found]}, self.refused)
                assert status == 200 and len(body["deleted"]) == len(found), body
            else:
                time.sleep(0.02)

    def __enter__(self) -> Traffic:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)


def _rows(url: str, tenant_id: str) -> int:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT count(*) FROM queues WHERE tenant_id = %s", (tenant_id,)).fetchone()[0] + \
            conn.execute("SELECT count(*) FROM tenants WHERE id = %s", (tenant_id,)).fetchone()[0]


def test_a_queue_keeps_every_message_in_order_while_its_tenant_moves(two_cells, moving):
    one, two = two_cells
    assert call(moving.key, "POST", "/api/v1/queues", {"name": "orders"})[0] == 201
    for n in range(500):  # a backlog to copy
        call(moving.key, "POST", "/api/v1/queues/orders/send", {"message": {"n": -500 + n}})
    with Traffic(moving.key) as traffic:
        time.sleep(0.5)
        report = moves.move(moving.name, "cell-2")
        time.sleep(0.5)  # traffic on the new cell
    assert not traffic.errors, traffic.errors
    assert report["freeze_s"] < 5
    print(f"sent {traffic.sent}, refused {len(traffic.refused)} times during the freeze", report)
    assert traffic.got == list(range(-500, traffic.sent)), "lost, doubled or out of order"
    assert directory.cell_of(moving.id).name == "cell-2"
    assert _rows(one, moving.id) == 0 and _rows(two, moving.id) == 2
    with psycopg.connect(one) as conn:  # the move's triggers and log are gone from the source
        assert conn.execute("SELECT count(*) FROM pg_trigger WHERE tgname LIKE %s",
                            (f"postbox_move_{report['move']}_%",)).fetchone()[0] == 0
        assert conn.execute("SELECT phase FROM control.tenant_moves WHERE id = %s", (report["move"],)).fetchone() == (
            "done",)
