"""`postbox dev --cells 2` end to end: two tenants, one on each cell, using every surface at once over
HTTP (queues, partitioned queues, work, durable streams, keyed streams, SQS), each seeing only its own
data and its data only in its own cell's database; `postbox admin` reaching those cells through the
state dir; and a restarted server keeping its cells."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import boto3
import httpx
import psycopg
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from postbox import migrate
from support import database
from support.dev import REPO, Dev
from support.work_api import W

N = 30  # messages per surface and tenant
# Both tenants name their resources alike; the queues API and SQS share a tenant's queues, so each
# surface has its own name.
SURFACES = ("queues", "partitioned", "work", "durable", "keyed", "sqs")
DEV_ENV = {"POSTBOX_POOL_MAX": "6"}  # per cell and process: two cells, three processes


def admin(state: Path, *argv: str, database_url: str | None = None) -> tuple[int, object, str]:
    """`postbox admin --state-dir STATE ...` in a process of its own: (exit code, its JSON, stderr)."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "POSTBOX_CELLS", "POSTBOX_STATE_DIR")}
    if database_url:
        env["DATABASE_URL"] = database_url
    done = subprocess.run([sys.executable, "-m", "functions.local.cli", "admin", "--state-dir", str(state), *argv],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    return done.returncode, json.loads(done.stdout) if done.returncode == 0 else None, done.stderr


def ok(state: Path, *argv: str, database_url: str | None = None) -> object:
    code, out, err = admin(state, *argv, database_url=database_url)
    assert code == 0, err
    return out


def _database(owner: str, name: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(owner)
    info["dbname"] = name
    return psycopg.conninfo.make_conninfo(**info)


class Tenant:
    def __init__(self, state: Path, url: str, cell: str) -> None:
        self.name = f"cells-{cell}-{uuid.uuid4().hex[:6]}"
        self.id = ok(state, "tenant-create", self.name, "--plan", "pro", "--cell", cell, database_url=url)["tenant_id"]
        self.key = ok(state, "key-create", self.name, "--role", "manage", database_url=url)["key"]
        self.sqs = ok(state, "sqs-credentials", self.name, "--role", "manage", database_url=url)

    def client(self, url: str) -> httpx.Client:
        return httpx.Client(base_url=url, headers={"apikey": self.key}, timeout=30)

    def sqs_client(self, url: str):
        return boto3.session.Session().client(
            "sqs", endpoint_url=f"{url}/sqs", region_name="us-east-1", aws_access_key_id=self.sqs["access_key_id"],
            aws_secret_access_key=self.sqs["secret_access_key"], config=Config(retries={"max_attempts": 1}))


@pytest.fixture(scope="module")
def cells2(tmp_path_factory, database_url):
    """`postbox dev --cells 2` on a fresh database of the session's server (cell-2: its sibling),
    with a tenant placed on each cell by `postbox admin`."""
    owner = database.OWNER_URL or database_url
    name = f"pbcells_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(owner, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = _database(owner, name)
    state = tmp_path_factory.mktemp("dev-cells")
    dev = Dev(state, url, workers=2, long_poll_ms=1000, env=DEV_ENV, args=("--cells", "2"))
    try:
        near, far = Tenant(state, url, "cell-1"), Tenant(state, url, "cell-2")
        yield dev, state, url, _database(owner, f"{name}_cell_2"), near, far
    finally:
        dev.stop()


# ---- each surface's round trip: N messages in, the same N out -----------------------------------------


def _tag(tenant: Tenant, surface: str, n: int) -> dict:
    return {"who": tenant.name, "surface": surface, "n": n}


def _queues(c: httpx.Client, tenant: Tenant) -> list[dict]:
    assert c.post("/api/v1/queues", json={"name": "orders-q"}).status_code == 201
    for n in range(N):
        r = c.post("/api/v1/queues/orders-q/send", json={"message": _tag(tenant, "queues", n)})
        assert r.status_code == 201, r.text
    got: list[dict] = []
    while True:
        r = c.post("/api/v1/queues/orders-q/read", json={"qty": 7, "vt": 600})
        assert r.status_code == 200, r.text
        if not r.json()["messages"]:
            return got
        got += [m["message"] for m in r.json()["messages"]]


def _partitioned(c: httpx.Client, tenant: Tenant) -> list[dict]:
    for first in range(0, N, 10):
        items = [{"queue": "orders", "partition": f"p{n % 3}", "payload": _tag(tenant, "partitioned", n)}
                 for n in range(first, min(first + 10, N))]
        r = c.post("/api/v1/push", json={"items": items})
        assert r.status_code == 201 and all(x["status"] == "queued" for x in r.json()), r.text
    got: list[dict] = []
    deadline = time.monotonic() + 30
    while len(got) < N and time.monotonic() < deadline:
        r = c.get("/api/v1/pop/queue/orders", params={"batch": 4, "autoAck": "true"})
        assert r.status_code in (200, 204), r.text
        if r.status_code == 200:
            got += [m["data"] for m in r.json()["messages"]]
    return got


def _work(c: httpx.Client, tenant: Tenant) -> list[dict]:
    scope = c.post(f"{W}/scopes", json={"slug": "orders"}).json()["data"]
    queue = c.post(f"{W}/scopes/{scope['id']}/queues", json={"slug": "jobs"}).json()["data"]
    base = f"{W}/scopes/{scope['id']}/queues/{queue['id']}"
    for n in range(N):
        r = c.post(f"{base}/messages", json={"body": _tag(tenant, "work", n)})
        assert r.status_code == 201, r.text
    got: list[dict] = []
    while True:
        r = c.post(f"{base}/messages/claim", json={"batch_size": 6, "visibility_timeout_s": 600})
        assert r.status_code == 200, r.text
        claimed = r.json()["data"]
        if not claimed:
            return got
        for m in claimed:
            done = c.post(f"{W}/scopes/{scope['id']}/messages/{m['id']}/complete",
                          json={"claim_token": m["claim_token"]})
            assert done.status_code == 200, done.text
            got.append(m["body"])


def _durable(c: httpx.Client, tenant: Tenant) -> list[dict]:
    r = c.put("/v1/stream/orders", headers={"content-type": "application/json"})
    assert r.status_code == 201, r.text
    for n in range(N):
        r = c.post("/v1/stream/orders", json=_tag(tenant, "durable", n))
        assert r.status_code == 204, r.text
    got: list[dict] = []
    offset = "-1"
    while True:
        r = c.get("/v1/stream/orders", params={"offset": offset})
        assert r.status_code == 200, r.text
        if not r.json():
            return got
        got += r.json()
        offset = r.headers["stream-next-offset"]


def _keyed(c: httpx.Client, tenant: Tenant) -> list[dict]:
    assert c.post("/v1/streams", json={"name": "orders"}).json()["created"] is True
    for n in range(N):
        r = c.post("/v1/streams/orders/messages", json={"key": f"k{n % 4}", "payload": _tag(tenant, "keyed", n)})
        assert r.status_code in (200, 201), r.text
    r = c.get("/v1/streams/orders/messages", params={"limit": 100})
    assert r.status_code == 200, r.text
    return [m["payload"] for m in r.json()["messages"]]


def _sqs(url: str, tenant: Tenant) -> list[dict]:
    sqs = tenant.sqs_client(url)
    queue_url = sqs.create_queue(QueueName="orders-sqs")["QueueUrl"]
    for first in range(0, N, 10):
        entries = [{"Id": str(n), "MessageBody": json.dumps(_tag(tenant, "sqs", n))}
                   for n in range(first, min(first + 10, N))]
        assert not sqs.send_message_batch(QueueUrl=queue_url, Entries=entries).get("Failed")
    got: list[dict] = []
    while True:
        found = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, VisibilityTimeout=600)
        if not found.get("Messages"):
            return got
        for m in found["Messages"]:
            got.append(json.loads(m["Body"]))
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=m["ReceiptHandle"])


def _round_trip(dev: Dev, tenant: Tenant, surface: str, start: threading.Barrier) -> list[dict]:
    start.wait(timeout=60)
    if surface == "sqs":
        return _sqs(dev.url, tenant)
    with tenant.client(dev.url) as c:
        return {"queues": _queues, "partitioned": _partitioned, "work": _work, "durable": _durable,
                "keyed": _keyed}[surface](c, tenant)


def _tenant_rows(url: str, tenant_id: str) -> dict[str, int]:
    """The tenant's rows in each table of the database that has a tenant_id column (those it has)."""
    with psycopg.connect(url) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT c.table_name FROM information_schema.columns c JOIN information_schema.tables t"
            " ON t.table_schema = c.table_schema AND t.table_name = c.table_name"
            " WHERE c.table_schema = 'public' AND c.column_name = 'tenant_id' AND t.table_type = 'BASE TABLE'")]
        found = {}
        for table in tables:
            count = conn.execute(psycopg.sql.SQL("SELECT count(*) FROM {} WHERE tenant_id::text = %s").format(
                psycopg.sql.Identifier(table)), (tenant_id,)).fetchone()[0]
            if count:
                found[table] = count
    return found


def test_tenants_on_two_cells_use_every_surface_at_once_each_seeing_only_its_own(cells2):
    dev, _, url_one, url_two, near, far = cells2
    assert any("cell-1 (database" in line and "cell-2 (database" in line for line in dev.stdout), dev.stdout
    start = threading.Barrier(2 * len(SURFACES))
    with ThreadPoolExecutor(2 * len(SURFACES)) as pool:
        running = {(t.name, s): pool.submit(_round_trip, dev, t, s, start) for t in (near, far) for s in SURFACES}
        got = {key: future.result(timeout=300) for key, future in running.items()}
    for tenant in (near, far):
        for surface in SURFACES:
            received = got[(tenant.name, surface)]
            assert sorted(m["n"] for m in received) == list(range(N)), (tenant.name, surface, received)
            assert all(m == _tag(tenant, surface, m["n"]) for m in received), (tenant.name, surface)

    # each tenant's rows are in its own cell's database only
    near_there, far_there = _tenant_rows(url_one, near.id), _tenant_rows(url_two, far.id)
    print(f"\nrows of the tenant on cell-2, by table: {far_there}")
    for rows in (near_there, far_there):
        for table in ("api_keys", "sqs_credentials", "queues", "streams"):
            assert rows.get(table), (table, rows)
    assert _tenant_rows(url_two, near.id) == {} and _tenant_rows(url_one, far.id) == {}
    for url, here in ((url_one, near), (url_two, far)):
        with psycopg.connect(url) as conn:
            held = {str(r[0]) for r in conn.execute("SELECT id FROM tenants WHERE id IN (%s, %s)", (near.id, far.id))}
        assert held == {here.id}


def test_a_key_of_one_cell_reaches_nothing_on_the_other(cells2):
    dev, _, _, _, near, far = cells2
    with far.client(dev.url) as c:
        assert c.post("/api/v1/queues", json={"name": "far-only"}).status_code == 201
        assert c.post("/v1/streams", json={"name": "far-only"}).json()["created"] is True
        assert c.put("/v1/stream/far-only", headers={"content-type": "application/json"}).status_code == 201
        assert c.post("/v1/stream/far-only", json={"secret": 1}).status_code == 204
        pushed = c.post("/api/v1/push", json={"items": [{"queue": "far-only", "payload": {"secret": 1}}]})
        assert pushed.status_code == 201
        scope = c.post(f"{W}/scopes", json={"slug": "far-only"}).json()["data"]
        # the hosted form finds the account's cell by its name
        hosted = c.get(f"/{far.name}/s.far-only")
        assert hosted.status_code == 200 and hosted.text.splitlines() == ['{"secret":1}'], hosted.text
    far.sqs_client(dev.url).create_queue(QueueName="far-only")
    with near.client(dev.url) as c:
        assert c.get("/api/v1/queues/far-only").status_code == 404
        assert c.post("/api/v1/queues/far-only/read", json={"qty": 5}).status_code == 404
        assert c.get("/v1/streams/far-only").status_code == 404
        assert c.get("/v1/stream/far-only").status_code == 404
        assert c.get("/api/v1/pop/queue/far-only", params={"batch": 5}).status_code == 204
        assert c.get(f"{W}/scopes/{scope['id']}").status_code == 404
        assert "far-only" not in {q["name"] for q in c.get("/api/v1/queues").json()["queues"]}
    with pytest.raises(ClientError) as refused:
        near.sqs_client(dev.url).get_queue_url(QueueName="far-only")
    assert refused.value.response["Error"]["Code"].endswith("NonExistentQueue"), refused.value.response
    with httpx.Client(base_url=dev.url, headers={"apikey": dev.key}, timeout=30) as c:  # the dev key still serves
        assert c.get("/api/v1/queues").status_code == 200


def test_admin_reaches_both_cells_through_the_state_dir(cells2):
    _, state, url_one, url_two, near, far = cells2
    listed = ok(state, "cells", database_url=url_one)
    assert [c["name"] for c in listed] == ["cell-1", "cell-2"]
    newest = migrate.available()[-1][0]
    assert all(c["schema_version"] == newest and set(c) == {"name", "schema_version", "tenants"} for c in listed)
    assert {"dev", near.name} <= set(listed[0]["tenants"]) and far.name not in listed[0]["tenants"]
    assert far.name in listed[1]["tenants"] and near.name not in listed[1]["tenants"]

    code, _, err = admin(state, "tenant-create", "nowhere", "--cell", "cell-3", database_url=url_one)
    assert code == 1 and "no cell named 'cell-3'" in err, err
    placed = ok(state, "tenant-create", f"late-{uuid.uuid4().hex[:6]}", "--cell", "cell-2", database_url=url_one)
    assert placed["cell"] == "cell-2" and _tenant_rows(url_two, placed["tenant_id"]) == {"projects": 1}

    # every command naming a tenant runs on its cell
    assert ok(state, "tenant-plan", far.name, "unlimited", database_url=url_one)["plan"] == "unlimited"
    ok(state, "project-create", far.name, "billing", database_url=url_one)
    keys = ok(state, "key-list", far.name, database_url=url_one)
    ok(state, "flows-grant", far.name, "--max-queries", "2", database_url=url_one)
    assert far.name in {g["tenant"] for g in ok(state, "flows-grants", database_url=url_one)}
    spare = ok(state, "key-create", far.name, "--role", "read", database_url=url_one)
    ok(state, "key-revoke", spare["key_id"], database_url=url_one)
    assert len(keys) >= 1
    with psycopg.connect(url_two) as conn:
        assert conn.execute("SELECT plan FROM tenants WHERE id = %s", (far.id,)).fetchone()[0] == "unlimited"
        assert conn.execute("SELECT count(*) FROM projects WHERE tenant_id = %s AND name = 'billing'",
                            (far.id,)).fetchone()[0] == 1
        assert conn.execute("SELECT max_queries FROM flow_quotas WHERE tenant_id = %s", (far.id,)).fetchone()[0] == 2
        assert conn.execute("SELECT revoked_at IS NOT NULL FROM api_keys WHERE id::text = %s",
                            (spare["key_id"],)).fetchone()[0]
    code, _, err = admin(state, "key-revoke", spare["key_id"], database_url=url_one)
    assert code == 1 and "no active key" in err


def test_a_restarted_dev_keeps_its_cells_and_never_leaves_out_one_holding_tenants(tmp_path):
    state = tmp_path / "state"
    dev = Dev(state, None, env=DEV_ENV, args=("--cells", "2"))
    try:
        tenant = ok(state, "tenant-create", "kept", "--cell", "cell-2")
        key = ok(state, "key-create", "kept", "--role", "manage")["key"]
        with httpx.Client(base_url=dev.url, headers={"apikey": key}, timeout=30) as c:
            assert c.post("/api/v1/queues", json={"name": "kept"}).status_code == 201
            assert c.post("/api/v1/queues/kept/send", json={"message": {"n": 1}}).status_code == 201
    finally:
        dev.stop()
    assert json.loads((state / "cells.json").read_text()) == {"cells": 2}

    dev = Dev(state, None, env=DEV_ENV)  # no --cells: the cells it had
    try:
        assert any("cell-2 (database postbox_cell_2)" in line for line in dev.stdout), dev.stdout
        with httpx.Client(base_url=dev.url, headers={"apikey": key}, timeout=30) as c:
            r = c.post("/api/v1/queues/kept/read", json={"qty": 5})
            assert r.status_code == 200 and [m["message"] for m in r.json()["messages"]] == [{"n": 1}], r.text
        listed = ok(state, "cells")
        assert [(c["name"], "kept" in c["tenants"]) for c in listed] == [("cell-1", False), ("cell-2", True)]
        with httpx.Client(base_url=dev.url, headers={"apikey": dev.key}, timeout=30) as c:
            assert c.get("/api/v1/queues").status_code == 200
    finally:
        dev.stop()

    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "POSTBOX_CELLS")}
    refused = subprocess.run([sys.executable, "-m", "functions.local.cli", "dev", "--state-dir", str(state),
                              "--cells", "1", "--port", "0", "--quiet"], cwd=REPO, env=env, capture_output=True,
                             text=True, timeout=120)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "cell-2 holds kept" in refused.stderr and "--cells 2" in refused.stderr, refused.stderr
    assert json.loads((state / "cells.json").read_text()) == {"cells": 2}
    assert tenant["cell"] == "cell-2"
