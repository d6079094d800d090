"""500 long polls held open at once on the local gateway (ten tenants, each well within its cap of
waits) while other callers' sends and reads are answered, each within 5 s; then a send to each
polled queue wakes its polls, and every message sent is taken exactly once.

The polls are raw sockets read by one selector (the server gives each its own thread, as it does any
connection), so the test itself adds no thread per poll."""

from __future__ import annotations

import json
import resource
import selectors
import socket
import time

import pytest

from postbox import config, db
from postbox.queues import service
from support.http import client

TENANTS, QUEUES, POLLS_PER_QUEUE = 10, 5, 10  # 500 polls, 50 per tenant
WAIT_S = 20


@pytest.fixture
def long_waits(monkeypatch):
    monkeypatch.setenv("POSTBOX_LONG_POLL_MS", str(WAIT_S * 1000))
    config.reset()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4096:  # both ends of every poll's connection are in this process
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(4096, hard), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _read_request(port: int, key: str, queue: str) -> socket.socket:
    body = json.dumps({"qty": 1, "wait_seconds": WAIT_S}).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(f"POST /api/v1/queues/{queue}/read HTTP/1.1\r\nHost: t\r\napikey: {key}\r\n"
                 f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                 .encode() + body)
    sock.setblocking(False)
    return sock


def _answers(polls: list[socket.socket], timeout_s: float) -> list[tuple[int, dict]]:
    """Each poll's (status, JSON body), read to the end of its connection."""
    selector = selectors.DefaultSelector()
    received = {}
    for sock in polls:
        selector.register(sock, selectors.EVENT_READ)
        received[sock] = bytearray()
    open_ = set(polls)
    deadline = time.monotonic() + timeout_s
    while open_ and time.monotonic() < deadline:
        for ready, _ in selector.select(timeout=1):
            chunk = ready.fileobj.recv(65536)
            if chunk:
                received[ready.fileobj].extend(chunk)
            else:
                selector.unregister(ready.fileobj)
                open_.discard(ready.fileobj)
    selector.close()
    assert not open_, f"{len(open_)} polls unanswered"
    out = []
    for sock in polls:
        head, _, body = bytes(received[sock]).partition(b"\r\n\r\n")
        out.append((int(head.split()[1]), json.loads(body)))
        sock.close()
    return out


def _none_answered(polls: list[socket.socket]) -> bool:
    selector = selectors.DefaultSelector()
    for sock in polls:
        selector.register(sock, selectors.EVENT_READ)
    ready = selector.select(timeout=0)
    selector.close()
    return not ready


def test_500_long_polls_wait_while_other_callers_are_answered(gateway, make_tenant, long_waits):
    tenants = [make_tenant() for _ in range(TENANTS)]
    queues = [(t, f"q{i}") for t in tenants for i in range(QUEUES)]
    for t, name in queues:
        service.create_queue(t.principal, name, {})
    polls = [_read_request(gateway.port, t.key, name) for t, name in queues for _ in range(POLLS_PER_QUEUE)]
    waiting_since = time.monotonic()

    other = make_tenant()
    with client(gateway.url, other.key) as c:
        assert c.post("/api/v1/queues", json={"name": "busy"}).status_code == 201
        slowest = 0.0
        for i in range(20):  # sends and reads of another caller, while the polls wait
            for path, body in (("send", {"message": i}), ("read", {"qty": 1})):
                started = time.monotonic()
                r = c.post(f"/api/v1/queues/busy/{path}", json=body)
                slowest = max(slowest, time.monotonic() - started)
                assert r.status_code in (200, 201), r.text
            assert [m["message"] for m in r.json()["messages"]] == [i]
            time.sleep(0.2)
    assert slowest < 5.0, f"an other caller's request took {slowest:.1f} s"
    with db.connection() as conn:  # every poll is waiting, holding its tenant's slot
        held = conn.execute("SELECT count(*) FROM wait_slots WHERE caller = ANY(%s) AND until > clock_timestamp()",
                            ([f"tenant:{t.tenant_id}" for t in tenants],)).fetchone()[0]
    assert held == len(polls) == 500
    assert _none_answered(polls) and time.monotonic() - waiting_since < WAIT_S

    sent = []
    for t, name in queues:  # one message for each of the queue's polls
        sent += service.send_messages(t.principal, name, [f"{name}-{i}" for i in range(POLLS_PER_QUEUE)])
    answers = _answers(polls, timeout_s=WAIT_S + 10)
    assert [status for status, _ in answers] == [200] * 500
    taken = [m["msg_id"] for _, body in answers for m in body["messages"]]
    assert sorted(taken) == sorted(sent) and len(taken) == 500  # each exactly once
