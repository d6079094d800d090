"""A freshly started `postbox dev` (two worker processes) serving every surface to many threads of two
tenants at once: no 5xx, and each tenant reads back exactly what it sent, in its own resources,
though both tenants use the same names. Every request phase starts behind a barrier, so each
route's first calls in each worker come at once (the race that once corrupted a route's middleware
stack: a 500 on every later call of that route in that worker). The server's interpreters make
Powertools' middleware frames slowly and switch threads often (a `sitecustomize` of the test's), so
such a race is all but certain, not rare."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import httpx

from postbox.flows import quotas
from support.http import free_port
from support.tenants import new_tenant

REPO = Path(__file__).resolve().parents[2]
W = "/v1/modules/scaiqueue"
THREADS = 4  # per tenant
EACH = 5  # messages per thread per surface
JSON = {"content-type": "application/json"}
SLOW_FRAMES = """
import sys, time
from aws_lambda_powertools.event_handler import api_gateway

class SlowFrame(api_gateway.MiddlewareFrame):  # 2 ms to make: a stack being built stays half-built
    def __init__(self, current_middleware, next_middleware):
        time.sleep(0.002)
        super().__init__(current_middleware, next_middleware)

api_gateway.MiddlewareFrame = SlowFrame
sys.setswitchinterval(1e-5)
"""
_QUERY = {"name": "shared", "source_queue": "src", "sink_queue": "out", "config_hash": "h1"}


def _start(database_url: str, state: Path, hooks: Path) -> tuple[subprocess.Popen, str]:
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(SLOW_FRAMES)
    port = free_port()
    env = {**os.environ, "DATABASE_URL": database_url, "POSTBOX_REQUEST_LOG": "0",
           "PYTHONPATH": os.pathsep.join([str(hooks), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "functions.local.cli", "dev", "--state-dir", str(state), "--port", str(port),
         "--workers", "2", "--quiet"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    lines = []
    while True:
        line = proc.stdout.readline()
        lines.append(line)
        if "Postbox is running" in line or (not line and proc.poll() is not None):
            break
    assert "Postbox is running" in "".join(lines), "".join(lines)
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    return proc, f"http://127.0.0.1:{port}"


class Tenant:
    """One tenant's key, the ids of its work scope and queue and of its flows query, and what it sent."""

    def __init__(self, name: str) -> None:
        found = new_tenant()
        quotas.grant(found.tenant_id)
        self.name, self.key = name, found.key
        self.sent: Counter = Counter()  # (surface, thread, n) sent, as counted by the answers

    def body(self, thread: int, n: int) -> dict:
        return {"tenant": self.name, "thread": thread, "n": n}


def _check(r: httpx.Response, *ok: int) -> httpx.Response:
    assert r.status_code < 500, f"{r.request.method} {r.request.url.path}: {r.status_code} {r.text[:500]}"
    assert r.status_code in ok, f"{r.request.method} {r.request.url.path}: {r.status_code} {r.text[:500]}"
    return r


def _setup(c: httpx.Client, t: Tenant) -> None:
    _check(c.post("/api/v1/queues", json={"name": "shared_q"}), 201)
    _check(c.post("/v1/streams", json={"name": "shared-ks"}), 200, 201)
    _check(c.put("/v1/stream/shared-ds", headers=JSON), 201)
    t.scope = _check(c.post(f"{W}/scopes", json={"slug": "shared"}), 201).json()["data"]["id"]
    t.queue = _check(c.post(f"{W}/scopes/{t.scope}/queues", json={"slug": "shared"}), 201).json()["data"]["id"]
    r = c.post("/streams/v1/queries", json=_QUERY)
    t.query = _check(r, 200, 201).json()["query_id"]


def _sent(t: Tenant, surface: str, i: int, n: int) -> dict:
    t.sent[(surface, i, n)] += 1
    return t.body(i, n)


def _queues(c: httpx.Client, t: Tenant, i: int, n: int) -> None:
    _check(c.post("/api/v1/queues/shared_q/send", json={"message": _sent(t, "queues", i, n)}), 201)


def _partitioned(c: httpx.Client, t: Tenant, i: int, n: int) -> None:
    item = {"queue": "shared_pq", "partition": f"p{i}", "payload": _sent(t, "partitioned", i, n)}
    _check(c.post("/api/v1/push", json={"items": [item]}), 201)


def _keyed(c: httpx.Client, t: Tenant, i: int, n: int) -> None:
    _check(c.post("/v1/streams/shared-ks/messages", json={"key": f"k{i}", "payload": _sent(t, "keyed", i, n)}), 200)


def _durable(c: httpx.Client, t: Tenant, i: int, n: int) -> None:
    _check(c.post("/v1/stream/shared-ds", content=json.dumps(_sent(t, "durable", i, n)), headers=JSON), 204)


def _work(c: httpx.Client, t: Tenant, i: int, n: int) -> None:
    _check(c.post(f"{W}/scopes/{t.scope}/queues/{t.queue}/messages", json={"body": _sent(t, "work", i, n)}), 201)


def _flows(c: httpx.Client, t: Tenant, i: int, n: int) -> None:
    again = _check(c.post("/streams/v1/queries", json=_QUERY), 200).json()  # the tenant's own query, found
    assert again["query_id"] == t.query and again["fresh"] is False, again


WRITES = (_queues, _partitioned, _keyed, _durable, _work, _flows)


def _key(t: Tenant, body: dict) -> tuple[int, int]:
    assert body["tenant"] == t.name, f"{t.name} read {body}"
    return body["thread"], body["n"]


def _drain(c: httpx.Client, t: Tenant, i: int, got: Counter) -> None:
    """What this thread takes from the tenant's queues (each thread takes what it finds, any sender's)."""
    while True:
        found = _check(c.post("/api/v1/queues/shared_q/read", json={"qty": 10, "vt": 60}), 200).json()
        messages = found if isinstance(found, list) else found.get("messages", [])
        if not messages:
            break
        for m in messages:
            got[("queues", *_key(t, m["message"]))] += 1
        ids = [m["msg_id"] for m in messages]
        _check(c.post("/api/v1/queues/shared_q/archive", json={"msg_ids": ids}), 200)
    while True:
        r = _check(c.get("/api/v1/pop/queue/shared_pq", params={"batch": 10, "wait": "false"}), 200, 204)
        if r.status_code == 204 or not r.json().get("messages"):
            break
        messages = r.json()["messages"]
        for m in messages:
            got[("partitioned", *_key(t, m["data"]))] += 1
        last = messages[-1]
        _check(c.post("/api/v1/ack", json={"transactionId": last["transactionId"], "leaseId": last["leaseId"],
                                           "partitionId": last["partitionId"]}), 200)
    while True:
        r = c.post(f"{W}/scopes/{t.scope}/queues/{t.queue}/messages/claim",
                   json={"batch_size": 10, "visibility_timeout_s": 60})
        claimed = _check(r, 200).json()["data"]
        if not claimed:
            break
        for m in claimed:
            got[("work", *_key(t, m["body"]))] += 1
        items = [{"id": m["id"], "claim_token": m["claim_token"]} for m in claimed]
        _check(c.post(f"{W}/scopes/{t.scope}/messages/complete-batch", json={"items": items}), 200)


def _logs(c: httpx.Client, t: Tenant, got: Counter) -> None:
    """The tenant's two logs, read whole (once: every reader sees all of it)."""
    listed = _check(c.get("/v1/streams/shared-ks/messages", params={"limit": 500}), 200).json()["messages"]
    for m in listed:
        got[("keyed", *_key(t, m["payload"]))] += 1
    for m in _check(c.get("/v1/stream/shared-ds", params={"offset": "-1"}), 200).json():
        got[("durable", *_key(t, m))] += 1


def _together(tenants: list[Tenant], clients: dict, work) -> None:
    """`work(client, tenant, thread)` on every thread of both tenants, started at once."""
    start = threading.Barrier(len(tenants) * THREADS)
    errors: list[BaseException] = []

    def run(t: Tenant, i: int) -> None:
        try:
            start.wait(30)
            work(clients[(t.name, i)], t, i)
        except BaseException as e:  # reported below, on the test's thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(t, i)) for t in tenants for i in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not any(th.is_alive() for th in threads), "a client thread did not finish"
    assert not errors, errors[0]


def test_every_surface_from_many_threads_of_two_tenants(database_url, tmp_path):
    proc, url = _start(database_url, tmp_path / "state", tmp_path / "hooks")
    tenants = [Tenant("a"), Tenant("b")]
    clients = {(t.name, i): httpx.Client(base_url=url, headers={"apikey": t.key}, timeout=60)
               for t in tenants for i in range(THREADS)}
    try:
        _together(tenants, clients, lambda c, t, i: _setup(c, t) if i == 0 else None)
        for write in WRITES:  # one surface at a time: its route's first calls in each worker come at once
            _together(tenants, clients, lambda c, t, i, write=write: [write(c, t, i, n) for n in range(EACH)])
        got = {t.name: Counter() for t in tenants}
        _together(tenants, clients, lambda c, t, i: _drain(c, t, i, got[t.name]))
        _together(tenants, clients, lambda c, t, i: _logs(c, t, got[t.name]) if i == 0 else None)
        for t in tenants:
            assert sum(t.sent.values()) == 5 * THREADS * EACH
            assert got[t.name] == t.sent, t.name  # each exactly once, all of its own, none of the other's
        assert tenants[0].query != tenants[1].query
    finally:
        for c in clients.values():
            c.close()
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
