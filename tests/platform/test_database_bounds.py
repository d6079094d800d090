"""What bounds the pool's sessions, the same locally as on AWS: the session settings every pooled
connection carries (startup options with DATABASE_URL, the roles' defaults for AWS, where RDS Proxy
refuses startup options), a lock timeout answered 503, and the liveness watch, which asks a silent
server nothing twice and never cuts a statement the server is still working on."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator

import psycopg
import pytest

from postbox import config, db, errors, liveness, roles
from support import database as session_db
from support.http import free_port


def test_pooled_sessions_carry_the_session_settings(database_url):
    with db.connection() as conn:
        for name, value in db.SESSION_SETTINGS.items():
            assert conn.execute(f"SHOW {name}").fetchone()[0] == value, name


def test_the_app_roles_carry_the_same_settings_as_their_defaults(database_url):
    with psycopg.connect(session_db.OWNER_URL) as conn:
        for role in (roles.APP, roles.LISTEN):
            row = conn.execute("SELECT setconfig FROM pg_db_role_setting WHERE setdatabase = 0"
                               " AND setrole = %s::regrole", (role,)).fetchone()
            assert row is not None, role
            assert dict(s.split("=", 1) for s in row[0]) == db.SESSION_SETTINGS, role


def test_a_url_naming_options_keeps_its_own(database_url, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", psycopg.conninfo.make_conninfo(database_url, options=""))
    config.reset()
    assert "options" not in db._connection_kwargs()
    monkeypatch.setenv("DATABASE_URL", database_url)
    config.reset()
    assert db._connection_kwargs()["options"].count("-c ") == len(db.SESSION_SETTINGS)


def test_a_lock_waited_for_past_lock_timeout_is_503(tenant):
    lock = "SELECT 1 FROM tenants WHERE id = %s FOR UPDATE"
    with psycopg.connect(session_db.OWNER_URL) as holder:
        holder.execute(lock, (tenant.tenant_id,))  # held until this block ends
        with pytest.raises(errors.Unavailable) as refused, db.transaction() as conn:
            conn.execute("SET LOCAL lock_timeout = '100ms'")
            conn.execute(lock, (tenant.tenant_id,))
    assert refused.value.status == 503 and refused.value.details["retry_after"] == 1


def test_a_slow_statement_is_left_alone_while_the_server_answers(database_url, monkeypatch):
    asked: list[bool] = []
    answers = liveness.answers
    monkeypatch.setattr(liveness, "answers", lambda connect: asked.append(answers(connect)) or asked[-1])
    with db.connection() as conn:
        assert conn.execute("SELECT pg_sleep(1.6), 1").fetchone()[1] == 1
    assert len(asked) >= 2 and all(asked), asked  # asked every SUSPECT_S while it ran; it answered


@contextlib.contextmanager
def _silent_server() -> Iterator[Callable[[], psycopg.Connection]]:
    """A server that takes connections (the kernel's backlog) and never says a word, as a stopped
    postmaster or a partitioned host: a function connecting to it."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        yield lambda: psycopg.connect(host="127.0.0.1", port=port, connect_timeout=liveness.CONNECT_S)


def test_only_silence_is_no_answer(database_url):
    assert liveness.answers(db._ping_connection)
    closed = free_port()  # nothing listens: refused at once, which is an answer (no wait hangs on it)
    assert liveness.answers(lambda: psycopg.connect(host="127.0.0.1", port=closed, connect_timeout=2))
    with _silent_server() as connect:
        assert not liveness.answers(connect)


def test_silence_shuts_every_connection_down_under_its_waiter(database_url):
    lost = threading.Event()
    with _silent_server() as connect, psycopg.connect(session_db.OWNER_URL) as conn, \
            psycopg.connect(session_db.OWNER_URL) as idle:
        watch = liveness.Watch(connect, lost.set)
        watch.adopt(conn)
        watch.adopt(idle)
        failed: list[BaseException] = []

        def wait() -> None:
            watch.waits[conn] = time.monotonic()  # what a pooled connection reports of its waits
            try:
                conn.execute("SELECT pg_sleep(60)")
            except psycopg.Error as e:
                failed.append(e)
            finally:
                watch.waits.pop(conn, None)

        waiter = threading.Thread(target=wait)
        waiter.start()
        waiter.join(30)
        # The waiter wakes as its connection is shut down, which comes just before on_lost is called.
        assert lost.wait(5) and not waiter.is_alive()
        assert len(failed) == 1 and isinstance(failed[0], psycopg.OperationalError) and failed[0].sqlstate is None
        with pytest.raises(psycopg.OperationalError):  # a connection that was not waiting is gone too
            idle.execute("SELECT 1")
