"""On AWS a process's long polls LISTEN on its one connection straight to the cluster (RDS Proxy would
pin a LISTENing session), as postbox_listen with an IAM token; when none can be had they fall back to
re-checking. Here the "cluster" is the test server, reached as postbox_listen."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from postbox import config, db, listener, roles
from postbox.queues import service


@pytest.fixture
def direct_listen(database_url, monkeypatch):
    """POSTBOX_DB_LISTEN_HOST set (as the stack sets it), IAM tokens recorded instead of signed."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        roles.allow_iam_login(conn, roles.LISTEN, 20)
    info = psycopg.conninfo.conninfo_to_dict(database_url)
    monkeypatch.setenv("POSTBOX_DB_LISTEN_HOST", info["host"])
    monkeypatch.setenv("POSTBOX_DB_LISTEN_USER", roles.LISTEN)
    monkeypatch.setenv("POSTBOX_DB_NAME", info["dbname"])
    monkeypatch.setenv("POSTBOX_DB_SSLMODE", "prefer")
    if info.get("port"):
        monkeypatch.setenv("POSTBOX_DB_PORT", info["port"])
    tokens = []
    monkeypatch.setattr(db, "_iam_token", lambda host, port, user, region: tokens.append((host, user)) or "token")
    db._secret_cache.clear()
    config.reset()
    listener.stop()  # the next wait connects as set here
    yield tokens
    listener.stop()
    monkeypatch.undo()
    config.reset()
    db._secret_cache.clear()


def _queue_id(tenant, name) -> int:
    with db.connection() as conn:
        return conn.execute("SELECT id FROM queues WHERE tenant_id = %s AND name = %s",
                            (tenant.tenant_id, name)).fetchone()[0]


def test_a_long_poll_listens_directly_as_the_listen_role_and_a_send_wakes_it(tenant, direct_listen, notify_only):
    service.create_queue(tenant.principal, "q", {})
    listeners = []

    def wait():
        listeners.append(service.read_messages(tenant.principal, "q", 1, 30, wait_seconds=20))

    t = threading.Thread(target=wait)
    t.start()
    notify_only.wait_until_asleep()
    with db.connection() as conn:
        row = conn.execute("SELECT usename FROM pg_stat_activity WHERE query LIKE 'INSERT INTO waiters%%'"
                           " AND state = 'idle'").fetchone()
    # the process LISTENs, then registers the waiter's channel, on the listen role's own connection
    # (its last statement)
    assert row == (roles.LISTEN,)
    service.send_messages(tenant.principal, "q", ["hello"])
    t.join(30)
    assert [m["message"] for m in listeners[0]] == ["hello"]
    assert notify_only.woken == [True]  # the send's NOTIFY woke it, not a re-check
    assert direct_listen and all(user == roles.LISTEN for _, user in direct_listen)


def test_without_a_listening_connection_a_long_poll_still_finds_the_message(tenant, direct_listen, monkeypatch):
    monkeypatch.setenv("POSTBOX_DB_LISTEN_HOST", "/nonexistent-socket-dir")
    monkeypatch.setattr(listener, "LISTEN_WAIT_S", 0.2)
    config.reset()
    listener.stop()
    service.create_queue(tenant.principal, "q", {})
    found = []
    t = threading.Thread(target=lambda: found.append(
        service.read_messages(tenant.principal, "q", 1, 30, wait_seconds=10)))
    t.start()
    time.sleep(0.5)
    service.send_messages(tenant.principal, "q", ["by re-check"])
    t.join(30)
    assert [m["message"] for m in found[0]] == ["by re-check"]
    assert not listener.current().connected
