"""Every table says whose rows it holds: a tenant_id column, a parent chain that reaches one, or
'shared: why' (so a tenant's move to another cell can copy everything it owns and nothing else);
a table added without a word is named; a tenant's rows, selected by each table's predicate, are its
own on every surface and every row of a cell belongs to exactly one of its tenants."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg import sql

from postbox import directory, ownership, tenancy
from support import cells as test_cells
from support.http import client
from support.work_api import W
from support.work_api import ok as work_ok


def test_every_table_says_whose_rows_it_holds(owner):
    assert ownership.problems(owner) == []
    tables = {t.name: t for t in ownership.catalog(owner)}
    assert tables["queue_messages"].parents == (ownership.Parent("queue_id", "queues"),)
    assert tables["tenants"].column == "id" and tables["api_keys"].column == "tenant_id"
    assert {"plans", "schema_migrations", "agent_runs", "control.tenant_cells"} <= {
        t.name for t in ownership.shared_tables(owner)}
    assert "work_journal" in tables and not any(n.startswith("work_journal_p") for n in tables)  # partitions: one table


def test_a_table_added_without_saying_whose_rows_it_holds_is_named(owner):
    owner.execute("CREATE TABLE public.forgotten_things (id bigint PRIMARY KEY, queue_id bigint)")
    assert ownership.problems(owner) == [
        "forgotten_things: no tenant_id column, no parent and not shared (say whose rows it holds in its comment)"]
    with pytest.raises(ownership.Undeclared, match="forgotten_things"):
        ownership.tenant_tables(owner)
    owner.execute("COMMENT ON TABLE public.forgotten_things IS 'tenant: queue_id -> queues'")
    assert ownership.problems(owner) == []
    assert "forgotten_things" in [t.name for t in ownership.tenant_tables(owner)]


def test_a_tenant_id_column_is_enough(owner):
    owner.execute("CREATE TABLE control.per_tenant_things (tenant_id uuid NOT NULL, n int)")
    assert ownership.problems(owner) == []
    (found,) = [t for t in ownership.tenant_tables(owner) if t.name == "control.per_tenant_things"]
    assert found.select().as_string(owner) == (
        'SELECT "tenant_id", "n" FROM "control"."per_tenant_things" WHERE "tenant_id" = %(tenant)s')


@pytest.mark.parametrize(("comment", "complaint"), [
    ("tenant: queue_id -> nowhere", "parent 'nowhere' is not a table"),
    ("tenant: nope -> queues", "no column 'nope'"),
    ("tenant: owner", "no column 'owner'"),
    ("tenant: queue_id -> plans", "parent plans is shared, so the chain reaches no tenant"),
    ("tenant: queue_id -> queue_heads", "parent queue_heads has no column 'id'"),
    ("tenant: queue_id -> queues if kind = 'a'; queue_id -> pq_queues", "each needs"),
    ("tenant: queue_id -> queues if nope = 'a'; queue_id -> pq_queues if kind = 'b'", "no column 'nope'"),
    ("owned by whoever owns the queue", "is neither 'tenant: ...' nor 'shared: ...'"),
    ("tenant: queue_id => queues", "cannot read"),
    ("shared:", "is neither"),
])
def test_a_declaration_that_reaches_no_tenant_is_named(owner, comment, complaint):
    owner.execute("CREATE TABLE public.odd_things (queue_id bigint, kind text)")
    owner.execute(sql.SQL("COMMENT ON TABLE public.odd_things IS {}").format(sql.Literal(comment)))
    (problem,) = ownership.problems(owner)
    assert problem.startswith("odd_things: ") and complaint in problem, problem


def test_parents_that_go_round_in_a_circle_are_named(owner):
    owner.execute("CREATE TABLE public.ring_a (id bigint, b_id bigint)")
    owner.execute("CREATE TABLE public.ring_b (id bigint, a_id bigint)")
    owner.execute("COMMENT ON TABLE public.ring_a IS 'tenant: b_id -> ring_b'")
    owner.execute("COMMENT ON TABLE public.ring_b IS 'tenant: a_id -> ring_a'")
    assert any("go round in a circle" in p for p in ownership.problems(owner))


def test_tables_come_parents_first(owner):
    order = [t.name for t in ownership.catalog(owner)]
    owned = [t.name for t in ownership.tenant_tables(owner)]
    assert owned[0] == "tenants"
    refs = owner.execute(
        "SELECT conrelid::regclass::text, confrelid::regclass::text FROM pg_constraint"
        " WHERE contype = 'f' AND conparentid = 0 AND conrelid <> confrelid"
        "   AND connamespace IN ('public'::regnamespace, 'control'::regnamespace)").fetchall()
    assert refs
    for child, parent in refs:
        assert order.index(parent) < order.index(child), (parent, child)
    for t in ownership.tenant_tables(owner):
        for p in t.parents:
            assert owned.index(p.table) < owned.index(t.name), (p.table, t.name)


# ---- a tenant's rows on every surface ------------------------------------------------------------

@pytest.fixture(scope="module")
def fresh_cell(database_url):
    url = test_cells.new_database(database_url, "ownership")
    yield url
    test_cells.drop_database(database_url, url)


def _ok(r, status=None):
    assert r.status_code < 300 if status is None else r.status_code == status, (r.request.url, r.status_code, r.text)
    return r.json() if r.content and r.headers.get("content-type", "").startswith("application/json") else None


def _use_every_surface(c, spares: int) -> None:
    """Some of everything; `spares` more queues, streams and scopes first, so that two tenants' ids
    of one kind do not line up with each other's of another (a wrong parent would go unseen)."""
    for n in range(spares):
        _ok(c.post("/api/v1/queues", json={"name": f"spare-{n}"}))
        _ok(c.post("/v1/streams", json={"name": f"spare-{n}"}))
        work_ok(c.post(f"{W}/scopes", json={"slug": f"spare-{n}"}), 201)
    _ok(c.post("/api/v1/queues", json={"name": "orders"}))
    for n in range(3):
        _ok(c.post("/api/v1/queues/orders/send", json={"message": {"n": n}}))
    read = _ok(c.post("/api/v1/queues/orders/read", json={"qty": 1}))
    _ok(c.post("/api/v1/queues/orders/archive", json={"msg_ids": [read["messages"][0]["msg_id"]]}))
    _ok(c.post("/api/v1/push", json={"items": [{"queue": "pq", "payload": {"n": 1}}]}))
    _ok(c.get("/api/v1/pop/queue/pq", params={"wait": "false"}))
    _ok(c.put("/v1/stream/events", content=b'[{"a": 1}]', headers={"content-type": "application/json"}))
    _ok(c.post("/v1/stream/events", content=b'[{"b": 2}]', headers={"content-type": "application/json"}))
    _ok(c.post("/v1/streams", json={"name": "s"}))
    _ok(c.post("/v1/streams/s/subscriptions", json={"name": "worker"}))
    _ok(c.post("/v1/streams/s/messages", json={"payload": 1, "key": "k"}))
    scope = work_ok(c.post(f"{W}/scopes", json={"slug": "main"}), 201)
    queue = work_ok(c.post(f"{W}/scopes/{scope['id']}/queues", json={"slug": "jobs"}), 201)
    for n in range(2):
        work_ok(c.post(f"{W}/scopes/{scope['id']}/queues/{queue['id']}/messages", json={"body": {"n": n}}), 201)
    work_ok(c.post(f"{W}/scopes/{scope['id']}/queues/{queue['id']}/messages/claim", json={"batch_size": 1}))


# What the activity above writes: each must select rows of both tenants.
FILLED = ("tenants", "projects", "api_keys", "queues", "queue_messages", "queue_archive", "queue_counters",
          "queue_heads", "log_partitions", "log_segments", "log_cursors", "pq_queues", "pq_groups", "pq_counters",
          "durable_streams", "streams", "stream_messages", "stream_subscriptions", "stream_pending",
          "stream_sub_keys", "work_scopes", "work_queues", "work_messages", "work_claim_heads", "work_journal")


def test_each_row_of_a_cell_is_selected_for_exactly_one_of_its_tenants(gateway, fresh_cell, database_url,
                                                                        monkeypatch):
    test_cells.use_cells(monkeypatch, database_url, fresh_cell)
    tenants = []
    for spares in (2, 0):
        tenant_id = tenancy.create_tenant(f"owned-{uuid.uuid4().hex[:10]}", plan="pro", cell="cell-2")
        with directory.at(tenant_id):
            key = tenancy.create_key(tenant_id, "manage").key
        with client(gateway.url, key) as c:
            _use_every_surface(c, spares)
        tenants.append(tenant_id)
    a, b = tenants
    with psycopg.connect(fresh_cell) as conn:
        assert conn.execute("SELECT count(*) FROM tenants").fetchone()[0] == 2  # the cell holds these two only
        counts = {}
        for t in ownership.tenant_tables(conn):
            counts[t.name] = conn.execute(sql.SQL(
                "SELECT count(*), count(*) FILTER (WHERE a), count(*) FILTER (WHERE b), count(*) FILTER (WHERE a AND b)"
                " FROM (SELECT ({}) AS a, ({}) AS b FROM {}) x").format(t.where(a), t.where(b), t.ident)).fetchone()
            everything, of_a, of_b, of_both = counts[t.name]
            assert of_both == 0 and of_a + of_b == everything, (t.name, counts[t.name])
        for name in FILLED:
            assert counts[name][1] > 0 and counts[name][2] > 0, (name, counts[name])
        for t in ownership.tenant_tables(conn):  # the copy's own statement, as the mover runs it
            selected = conn.execute(sql.SQL("SELECT count(*) FROM ({}) x").format(t.select()), {"tenant": a})
            assert selected.fetchone()[0] == counts[t.name][1], t.name
