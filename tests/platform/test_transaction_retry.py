"""The transaction wrapper runs again what the database broke off (a deadlock, 40P01; a serialization
failure, 40001) where the whole unit of work was the transaction that failed: a block `db.transact`
opened the transaction for, or a statement outside any transaction block. Real failures, provoked
deterministically with a second connection; a bounded number of runs, then 503 with Retry-After;
never a block inside a caller's transaction."""

from __future__ import annotations

import threading
import time
import uuid

import psycopg
import pytest
from psycopg import sql

from postbox import db, errors
from support import database as session_db


@pytest.fixture
def probe(database_url):
    """A table with rows 1 and 2 (n = 0) and a sequence, both open to every role; dropped after."""
    owner = session_db.OWNER_URL or database_url
    name = f"retry_probe_{uuid.uuid4().hex[:8]}"
    table, seq = sql.Identifier(name), sql.Identifier(name + "_seq")
    with psycopg.connect(owner, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, n int NOT NULL)").format(table))
        conn.execute(sql.SQL("INSERT INTO {} VALUES (1, 0), (2, 0)").format(table))
        conn.execute(sql.SQL("CREATE SEQUENCE {}").format(seq))
        conn.execute(sql.SQL("GRANT ALL ON {} TO PUBLIC").format(table))
        conn.execute(sql.SQL("GRANT ALL ON SEQUENCE {} TO PUBLIC").format(seq))
    yield name
    with psycopg.connect(owner, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP TABLE {}").format(table))
        conn.execute(sql.SQL("DROP SEQUENCE {}").format(seq))


def _fail(probe: str, sqlstate: str, times: int) -> str:
    """A statement that fails with `sqlstate` the first `times` times it runs (counted by a sequence,
    which no rollback undoes)."""
    return (f"DO $$ BEGIN IF nextval('{probe}_seq') <= {times} THEN"
            f" RAISE EXCEPTION USING ERRCODE = '{sqlstate}', MESSAGE = 'provoked'; END IF; END $$")


def _runs(probe: str) -> int:
    with psycopg.connect(session_db.OWNER_URL, autocommit=True) as conn:
        return conn.execute(sql.SQL("SELECT last_value FROM {}").format(sql.Identifier(probe + "_seq"))).fetchone()[0]


def _values(probe: str) -> dict[int, int]:
    with psycopg.connect(session_db.OWNER_URL, autocommit=True) as conn:
        return dict(conn.execute(sql.SQL("SELECT id, n FROM {}").format(sql.Identifier(probe))).fetchall())


def _wait_until_blocked(pid: int) -> None:
    with psycopg.connect(session_db.OWNER_URL, autocommit=True) as watcher:
        deadline = time.monotonic() + 30
        while watcher.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                              (pid,)).fetchone()[0] != "Lock":
            assert time.monotonic() < deadline, "the transaction never waited for the other's lock"
            time.sleep(0.02)


def test_a_deadlock_victim_is_run_again_and_commits_once(probe):
    table = sql.Identifier(probe)
    other = psycopg.connect(session_db.OWNER_URL)
    other.execute("SET deadlock_timeout = '60s'")  # the wrapper's transaction detects it: the victim
    other.execute(sql.SQL("SELECT 1 FROM {} WHERE id = 2 FOR UPDATE").format(table))
    runs: list[int] = []
    crossing = []

    def cross(pid: int) -> None:  # once the wrapper waits for row 2, the other waits for row 1
        _wait_until_blocked(pid)
        other.execute(sql.SQL("UPDATE {} SET n = n + 1 WHERE id = 1").format(table))
        other.commit()

    def work(conn: psycopg.Connection) -> int:
        runs.append(1)
        if len(runs) > 1:  # the rerun starts once the other committed: else it may race the other for
            crossing[0].join(30)  # row 1 (freed by the victim's abort) and deadlock again
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        conn.execute(sql.SQL("UPDATE {} SET n = n + 1 WHERE id = 1").format(table))
        if len(runs) == 1:
            crossing.append(threading.Thread(target=cross, args=(pid,)))
            crossing[0].start()
        conn.execute(sql.SQL("UPDATE {} SET n = n + 1 WHERE id = 2").format(table))
        return len(runs)

    try:
        assert db.transact(work) == 2
        crossing[0].join(30)
    finally:
        other.close()
    assert _values(probe) == {1: 2, 2: 1}  # the other's update and ours, each once


def test_a_serialization_failure_is_run_again(probe):
    table = sql.Identifier(probe)
    runs: list[int] = []

    def work(conn: psycopg.Connection) -> None:
        runs.append(1)
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        conn.execute(sql.SQL("SELECT n FROM {} WHERE id = 1").format(table)).fetchone()  # the snapshot
        if len(runs) == 1:
            with psycopg.connect(session_db.OWNER_URL, autocommit=True) as other:
                other.execute(sql.SQL("UPDATE {} SET n = n + 10 WHERE id = 1").format(table))
        conn.execute(sql.SQL("UPDATE {} SET n = n + 1 WHERE id = 1").format(table))

    db.transact(work)
    assert len(runs) == 2
    assert _values(probe)[1] == 11


def test_runs_are_bounded_with_jittered_pauses_then_503(probe, monkeypatch):
    pauses: list[float] = []
    sleep, me = time.sleep, threading.current_thread()

    def recorded(s: float) -> None:  # this thread's pauses (the pool's and the watch's threads sleep too)
        if threading.current_thread() is me:
            pauses.append(s)
        sleep(s)

    monkeypatch.setattr(db.time, "sleep", recorded)
    with pytest.raises(errors.Unavailable) as refused:
        db.transact(lambda conn: conn.execute(_fail(probe, "40P01", 100)))
    assert _runs(probe) == db.RETRY_ATTEMPTS
    assert refused.value.status == 503 and refused.value.details["retry_after"] >= 1
    assert len(pauses) == db.RETRY_ATTEMPTS - 1
    assert all(0 <= p <= db.RETRY_BACKOFF_S * 2 ** k for k, p in enumerate(pauses)), pauses


def test_a_statement_outside_a_transaction_is_run_again_alone(probe):
    with db.connection() as conn:
        conn.execute(_fail(probe, "40001", 2))
    assert _runs(probe) == 3
    with pytest.raises(errors.Unavailable), db.connection() as conn:
        conn.execute(_fail(probe, "40P01", 100))
    assert _runs(probe) == 3 + db.RETRY_ATTEMPTS


def test_nothing_inside_a_callers_transaction_is_run_again(probe):
    with pytest.raises(errors.Unavailable), db.transaction() as conn:
        conn.execute(_fail(probe, "40P01", 1))  # a statement of the caller's block
    assert _runs(probe) == 1
    with pytest.raises(errors.Unavailable), db.transaction() as conn:
        db.transact(lambda c: c.execute(_fail(probe, "40P01", 2)), conn)  # a unit inside the caller's
    assert _runs(probe) == 2
    with db.connection() as conn:  # the pool's connections are back to autocommit: retried again
        conn.execute(_fail(probe, "40P01", 3))
    assert _runs(probe) == 4
