"""Slotted counters (counter_slot, sql/functions/counters.sql): a writer counts on a slot no other open
transaction holds while one is free, whatever the backends' pids, and concurrent counts sum exactly."""

from __future__ import annotations

import threading
from contextlib import ExitStack
from pathlib import Path

import psycopg
import pytest

from postbox import db, tenancy
from postbox.queues import service
from postbox.work import queues, scopes

FUNCTIONS = Path(__file__).resolve().parents[2] / "shared" / "postbox" / "sql" / "functions"
SPACE = 0x7465  # a key space of this test's own


def _connect(url: str) -> psycopg.Connection:
    return psycopg.connect(url, prepare_threshold=None)


def _colliding_pair(url: str, stack: ExitStack) -> tuple[psycopg.Connection, psycopg.Connection]:
    """Two connections whose backends have the same home slot (pid % 8): of nine, two must."""
    seen: dict[int, psycopg.Connection] = {}
    for _ in range(9):
        conn = stack.enter_context(_connect(url))
        pid = conn.info.backend_pid
        if pid % 8 in seen:
            return seen[pid % 8], conn
        seen[pid % 8] = conn
    raise AssertionError("unreachable: nine backends over eight remainders")


def _own_slots(conn: psycopg.Connection, table: str, where: str, key: object) -> set[int]:
    """The slots of `table` this connection's open transaction wrote."""
    return {r[0] for r in conn.execute(
        f"SELECT slot FROM {table} WHERE {where} = %s AND xmin = xid(pg_current_xact_id())", (key,))}


def test_only_counter_slot_picks_a_slot_from_the_backend_pid():
    users = sorted(p.name for p in FUNCTIONS.glob("*.sql") if "pg_backend_pid()" in p.read_text())
    assert users == ["counters.sql"]


def test_two_colliding_backends_sending_count_on_different_slots(tenant, database_url):
    """A queue send writes one slotted counter, its queue's (where the tenant's usage is held back
    until the row is folded). Under `pid % 8` the second of two backends with the same remainder
    waited for the first's commit (here: its lock timeout); now each open transaction holds its own
    slot."""
    service.create_queue(tenant.principal, "q", {})
    project = tenancy.project_id(tenant.principal)
    with ExitStack() as stack:
        a, b = _colliding_pair(database_url, stack)
        b.execute("SET lock_timeout = '3s'")
        slots = []
        for conn in (a, b):  # a's transaction stays open while b sends
            conn.execute("SELECT * FROM queue_send(%s, %s, 'q', false, ARRAY['{\"n\": 1}'], ARRAY[8], 8, 0, NULL)",
                         (tenant.tenant_id, project))
            queue = conn.execute("SELECT id FROM queues WHERE tenant_id = %s AND name = 'q'",
                                 (tenant.tenant_id,)).fetchone()[0]
            slots.append(_own_slots(conn, "queue_counters", "queue_id", queue))
            assert not _own_slots(conn, "tenant_storage", "tenant_id", tenant.tenant_id)
            assert not _own_slots(conn, "tenant_monthly_messages", "tenant_id", tenant.tenant_id)
        mine, theirs = slots
        assert len(mine) == 1 and len(theirs) == 1 and mine.isdisjoint(theirs), slots
        a.commit()
        b.commit()
    with db.connection() as conn:
        assert conn.execute("SELECT sum(sent) FROM queue_counters c JOIN queues q ON q.id = c.queue_id"
                            " WHERE q.tenant_id = %s", (tenant.tenant_id,)).fetchone()[0] == 2


def test_two_colliding_backends_cancelling_work_count_on_different_slots(tenant, database_url):
    """A publish writes no counter row (its journal row counts it, folded later); a cancel counts
    as it happens, each open transaction on a slot of its own."""
    scope = scopes.create_scope(tenant.principal, {"slug": "counted"})
    queue = queues.create_queue(tenant.principal, str(scope["id"]), {"slug": "jobs"})
    with db.connection() as conn:
        doomed = [conn.execute("SELECT work_publish(%s, %s, %s, '{\"body\": 1}'::jsonb, 'test')#>>'{message,id}'",
                               (tenant.tenant_id, scope["id"], queue["id"])).fetchone()[0] for _ in range(2)]
    with ExitStack() as stack:
        a, b = _colliding_pair(database_url, stack)
        b.execute("SET lock_timeout = '3s'")
        slots = []
        for conn, message in zip((a, b), doomed, strict=True):
            conn.execute("SELECT work_publish(%s, %s, %s, '{\"body\": {\"n\": 1}}'::jsonb, 'test')",
                         (tenant.tenant_id, scope["id"], queue["id"]))
            qid = conn.execute("SELECT id FROM work_queues WHERE queue_id = %s", (queue["id"],)).fetchone()[0]
            assert not _own_slots(conn, "work_queue_counters", "queue_id", qid)
            conn.execute("SELECT work_finish(%s, %s, 'cancel', jsonb_build_object('id', %s::text))",
                         (tenant.tenant_id, scope["id"], message))
            slots.append(_own_slots(conn, "work_queue_counters", "queue_id", qid))
        assert len(slots[0]) == 1 and len(slots[1]) == 1 and slots[0].isdisjoint(slots[1]), slots
        a.commit()
        b.commit()
    stats = queues.stats(tenant.principal, str(scope["id"]), str(queue["id"]))
    assert (stats["depth_pending"], stats["published_total"]) == (2, 4)


def test_two_colliding_backends_counting_a_partitioned_queue_use_different_slots(tenant, database_url):
    with db.connection() as conn:
        qid = conn.execute("INSERT INTO pq_queues (tenant_id, name) VALUES (%s, 'counted') RETURNING id",
                           (tenant.tenant_id,)).fetchone()[0]
    with ExitStack() as stack:
        a, b = _colliding_pair(database_url, stack)
        b.execute("SET lock_timeout = '3s'")
        for conn in (a, b):
            conn.execute("SELECT pq_count(%s, 1, 0, 0, 0, 0)", (qid,))
        assert _own_slots(a, "pq_counters", "queue_id", qid).isdisjoint(_own_slots(b, "pq_counters", "queue_id", qid))
        a.commit()
        b.commit()
    with db.connection() as conn:
        assert conn.execute("SELECT sum(pushed) FROM pq_counters WHERE queue_id = %s", (qid,)).fetchone()[0] == 2


def test_eight_open_transactions_hold_the_eight_slots_and_a_ninth_waits_for_its_home(database_url):
    key = 42
    with ExitStack() as stack:
        holders = [stack.enter_context(_connect(database_url)) for _ in range(8)]
        got = [c.execute("SELECT counter_slot(%s, %s)", (SPACE, key)).fetchone()[0] for c in holders]
        assert sorted(got) == list(range(8))  # a free slot was always taken, never a held one
        # Counting again in the same transaction keeps its slot (its home is held by another).
        assert [c.execute("SELECT counter_slot(%s, %s)", (SPACE, key)).fetchone()[0] for c in holders] == got
        ninth = stack.enter_context(_connect(database_url))
        home = ninth.info.backend_pid % 8
        ninth.execute("SET lock_timeout = '200ms'")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            ninth.execute("SELECT counter_slot(%s, %s)", (SPACE, key))  # all held: it waits for its home
        ninth.rollback()
        holders[got.index(home)].commit()  # the end of that transaction frees the slot
        ninth.execute("SET lock_timeout = '3s'")
        assert ninth.execute("SELECT counter_slot(%s, %s)", (SPACE, key)).fetchone()[0] == home
        # Another key's slots are its own.
        assert ninth.execute("SELECT counter_slot(%s, %s)", (SPACE, key + 1)).fetchone()[0] == home


def test_an_idle_backend_holds_no_slot(database_url):
    with _connect(database_url) as a, _connect(database_url) as b:
        a.execute("SELECT counter_slot(%s, 7)", (SPACE,))
        a.commit()
        assert a.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
                         ).fetchone()[0] == 0
        assert b.execute("SELECT counter_slot(%s, 7)", (SPACE,)).fetchone()[0] == b.info.backend_pid % 8


def test_many_threads_counting_at_once_sum_exactly(tenant, database_url):
    service.create_queue(tenant.principal, "q", {})
    with db.connection() as conn:
        queue = conn.execute("SELECT id FROM queues WHERE tenant_id = %s AND name = 'q'",
                             (tenant.tenant_id,)).fetchone()[0]
    threads, rounds = 12, 60
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def count() -> None:
        try:
            with _connect(database_url) as conn:
                start.wait()
                for i in range(rounds):
                    conn.execute("SELECT queue_count(%s, 1, 0, 3, 0, 0, 0, 0)", (queue,))
                    if i % 3 == 0:  # some transactions count twice
                        conn.execute("SELECT queue_count(%s, 1, 0, 3, 0, 0, 0, 0)", (queue,))
                    conn.commit()
        except BaseException as error:  # noqa: BLE001 - reported by the test below
            errors.append(error)

    workers = [threading.Thread(target=count) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors
    expected = threads * (rounds + len(range(0, rounds, 3)))
    with db.connection() as conn:
        sent, live, slots = conn.execute("SELECT sum(sent), sum(live_bytes), array_agg(slot ORDER BY slot)"
                                         " FROM queue_counters WHERE queue_id = %s", (queue,)).fetchone()
        stored = conn.execute("SELECT sum(stored_bytes) FROM tenant_storage WHERE tenant_id = %s",
                              (tenant.tenant_id,)).fetchone()[0]
    assert sent == expected and live == 3 * expected and stored == 3 * expected
    assert set(slots) <= set(range(8)) and len(slots) == len(set(slots))
