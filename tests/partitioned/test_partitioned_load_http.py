"""Partitioned queues of two tenants under many threads on a fresh database, over HTTP through the
local gateway: pushes (several queues and partitions a call), pops (one partition, several, a named
one), acks (single and batch), lease extensions and transactions (an ack with pushes, in either
order) all at once, every thread starting behind a barrier so the queues, partitions, groups and
counter rows are created by concurrent first calls. No answer is a 5xx, every message pushed (by a
push or a committed transaction) is acked exactly once, and the queues' counters say so. Before the
lock order was fixed, concurrent first pushes deadlocked: 8 to 26 answers of about 750 were 500s."""

from __future__ import annotations

import random
import threading
import uuid
from collections import Counter

import httpx
import psycopg
import pytest

from functions import keys
from functions.local.runtime import use_database
from support import database as session_db
from support.http import GatewayServer, client
from support.interleaved import switching_often
from support.tenants import new_tenant

THREADS = 12  # per tenant
ROUNDS = 12  # push, pop and settle, per thread
QUEUES = ("orders", "events")  # the same names in both tenants
PARTITIONS = ("p0", "p1", "p2")


@pytest.fixture
def fresh_database(database_url):
    """A new database on the session's server, migrated, with this process's pool on it; the
    session's database again afterwards."""
    owner = session_db.OWNER_URL or database_url
    name = f"load_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(owner, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
    use_database(psycopg.conninfo.make_conninfo(owner, dbname=name))
    keys.clear_cache()
    try:
        yield
    finally:
        use_database(database_url)
        keys.clear_cache()
        with psycopg.connect(owner, autocommit=True) as conn:
            conn.execute(psycopg.sql.SQL("DROP DATABASE {} WITH (FORCE)").format(psycopg.sql.Identifier(name)))


class Ledger:
    """What the clients saw: tags pushed (acknowledged by the server), tags acked, 5xx answers."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pushed: Counter[str] = Counter()
        self.acked: Counter[str] = Counter()
        self.failures: list[str] = []
        self.answers = 0

    def check(self, r: httpx.Response, what: str, ok: tuple[int, ...]) -> bool:
        with self.lock:
            self.answers += 1
            if r.status_code >= 500 or r.status_code not in ok:
                self.failures.append(f"{what}: {r.status_code} {r.text[:200]}")
                return False
        return True


def _items(tenant: str, n: int) -> list[dict]:
    return [{"queue": random.choice(QUEUES), "partition": random.choice(PARTITIONS),
             "payload": {"tag": f"{tenant}-{uuid.uuid4().hex}"}} for _ in range(n)]


def _push(c: httpx.Client, ledger: Ledger, items: list[dict]) -> None:
    r = c.post("/api/v1/push", json={"items": items})
    if ledger.check(r, "push", (201,)):
        with ledger.lock:
            ledger.pushed.update(i["payload"]["tag"] for i in items)


def _pop(c: httpx.Client, ledger: Ledger, turn: int) -> list[dict]:
    queue = random.choice(QUEUES)
    if turn % 3 == 2:
        r = c.get(f"/api/v1/pop/queue/{queue}/partition/{random.choice(PARTITIONS)}", params={"batch": 4})
    else:
        r = c.get(f"/api/v1/pop/queue/{queue}", params={"batch": 4, "partitions": 1 + turn % 2})
    if not ledger.check(r, "pop", (200, 204)) or r.status_code == 204:
        return []
    return r.json()["messages"]


def _by_partition(messages: list[dict]) -> list[list[dict]]:
    out: dict[str, list[dict]] = {}
    for m in messages:
        out.setdefault(m["partitionId"], []).append(m)
    return list(out.values())


def _ack(m: dict) -> dict:
    return {"transactionId": m["transactionId"], "leaseId": m["leaseId"], "partitionId": m["partitionId"],
            "status": "completed"}


def _settle(c: httpx.Client, ledger: Ledger, tenant: str, messages: list[dict], turn: int) -> None:
    """Ack each partition's batch in one of the ways a client may: an ack naming its last message,
    a batch ack, an extension then an ack, or a transaction acking it with pushes around the ack."""
    for batch in _by_partition(messages):
        tags = [m["data"]["tag"] for m in batch]
        how = (turn + len(tags)) % 4
        if how == 0:
            r = c.post("/api/v1/ack", json=_ack(batch[-1]))
            done = ledger.check(r, "ack", (200,))
        elif how == 1:
            r = c.post("/api/v1/ack/batch", json={"acknowledgments": [_ack(m) for m in batch]})
            done = ledger.check(r, "ack/batch", (200,))
        elif how == 2:
            r = c.post(f"/api/v1/lease/{batch[0]['leaseId']}/extend", json={"seconds": 120})
            done = ledger.check(r, "extend", (200,)) and ledger.check(
                c.post("/api/v1/ack", json=_ack(batch[-1])), "ack after extend", (200,))
        else:
            first, second = _items(tenant, 2), _items(tenant, 1)
            operations = [{"type": "push", "items": first}, {"type": "ack", **_ack(batch[-1])},
                          {"type": "push", "items": second}]
            if turn % 2:
                operations.reverse()
            r = c.post("/api/v1/transaction", json={"operations": operations})
            done = ledger.check(r, "transaction", (200,))
            if done:
                with ledger.lock:
                    ledger.pushed.update(i["payload"]["tag"] for i in first + second)
        if done:
            with ledger.lock:
                ledger.acked.update(tags)


def _drain(c: httpx.Client, ledger: Ledger) -> None:
    for queue in QUEUES:
        while True:
            r = c.get(f"/api/v1/pop/queue/{queue}", params={"batch": 100, "partitions": len(PARTITIONS)})
            assert r.status_code in (200, 204), r.text
            if r.status_code == 204:
                break
            for batch in _by_partition(r.json()["messages"]):
                assert c.post("/api/v1/ack", json=_ack(batch[-1])).status_code == 200
                ledger.acked.update(m["data"]["tag"] for m in batch)


def _counters(c: httpx.Client) -> dict[str, int]:
    """The tenant's queues' pushed and acked counters, summed."""
    total = Counter()
    for queue in QUEUES:
        r = c.get(f"/api/v1/resources/queues/{queue}")
        assert r.status_code == 200, r.text
        total.update({k: r.json()["counters"][k] for k in ("pushed", "acked")})
    return dict(total)


def test_two_tenants_many_threads_no_5xx_and_every_message_acked_once(fresh_database):
    tenants = [new_tenant(), new_tenant()]
    server = GatewayServer().start()
    ledger = Ledger()
    barrier = threading.Barrier(THREADS * len(tenants))

    def worker(tenant_index: int) -> None:
        tenant = tenants[tenant_index]
        with client(server.url, tenant.key) as c:
            barrier.wait()
            for turn in range(ROUNDS):
                _push(c, ledger, _items(tenant.tenant_id, 3))
                _settle(c, ledger, tenant.tenant_id, _pop(c, ledger, turn), turn)

    try:
        with switching_often():
            threads = [threading.Thread(target=worker, args=(k % len(tenants),))
                       for k in range(THREADS * len(tenants))]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
        counted = {}
        for tenant in tenants:
            with client(server.url, tenant.key) as c:
                _drain(c, ledger)
                counted[tenant.tenant_id] = _counters(c)
    finally:
        server.stop()
    print(f"\n{ledger.answers} answers, {len(ledger.failures)} refused, {sum(ledger.pushed.values())} pushed,"
          f" {sum(ledger.acked.values())} acked")
    assert ledger.failures == [], ledger.failures[:5]
    assert ledger.pushed == ledger.acked, (ledger.pushed - ledger.acked, ledger.acked - ledger.pushed)
    assert all(n == 1 for n in ledger.acked.values())
    for tenant in tenants:  # and each queue's counters counted every message once
        mine = sum(1 for tag in ledger.pushed if tag.startswith(tenant.tenant_id))
        assert counted[tenant.tenant_id] == {"pushed": mine, "acked": mine}, tenant.tenant_id
