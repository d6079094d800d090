"""A database that cannot be reached is a 503 with Retry-After, in each surface's own envelope, within
POSTBOX_POOL_TIMEOUT_S: the pool pointed at a closed port (the function's key cache warm, so the
surface's own handler meets the timeout; then cold, so its key lookup does), and a connection that
breaks under a request. The pool then serves again by itself."""

from __future__ import annotations

import os
import time
import uuid

import httpx
import psycopg
import pytest

from functions import keys
from postbox import config, db, errors
from support.http import free_port

TIMEOUT_S = 1.0


def _surfaces(key: str) -> list[tuple[str, str, str, dict | None]]:
    """(surface, method, path, JSON body) of one request per surface that reads the database."""
    return [
        ("queues", "GET", "/api/v1/queues", None),
        ("work", "GET", "/v1/modules/scaiqueue/scopes", None),
        ("flows", "POST", "/streams/v1/state/get", {"query_id": str(uuid.uuid4()), "partition_id": "p"}),
        ("durable", "GET", f"/v1/stream/unavail-{uuid.uuid4().hex[:8]}?offset=-1", None),
        ("keyed_streams", "GET", "/v1/streams", None),
        ("partitioned", "GET", "/api/v1/resources/overview", None),
    ]


def assert_envelope(surface: str, body: dict) -> None:
    """The 503 in the surface's envelope (see each surface's `envelope`)."""
    if surface == "queues":
        assert isinstance(body["detail"], str) and "unavailable" in body["detail"], body
    elif surface == "work":
        assert body["error"]["code"] == "SERVICE_UNAVAILABLE" and body["error"]["retry_after"] >= 1, body
        assert body["meta"]["request_id"], body
    elif surface == "flows":
        assert body["success"] is False and "unavailable" in body["error"], body
    elif surface in ("durable", "keyed_streams"):
        assert body["error"]["code"] == "unavailable" and body["error"]["message"], body
    elif surface == "partitioned":
        assert isinstance(body["error"], str) and "unavailable" in body["error"], body


@pytest.fixture
def database_gone(database_url, monkeypatch):
    """Point this process's pool at a port nothing listens on, with a 1 s pool timeout; restored after."""
    before = os.environ["DATABASE_URL"]
    closed = psycopg.conninfo.make_conninfo(before, host="127.0.0.1", port=str(free_port()))

    def gone() -> None:
        monkeypatch.setenv("DATABASE_URL", closed)
        monkeypatch.setenv("POSTBOX_POOL_TIMEOUT_S", str(TIMEOUT_S))
        config.reset()
        db.close_pool()

    yield gone
    monkeypatch.setenv("DATABASE_URL", before)
    monkeypatch.delenv("POSTBOX_POOL_TIMEOUT_S")
    config.reset()
    db.close_pool()
    keys.clear_cache()


def test_no_connection_in_time_is_503_with_retry_after_in_each_envelope(gateway, tenant, database_gone):
    with httpx.Client(base_url=gateway.url, headers={"apikey": tenant.key}, timeout=30) as c:
        for _, method, path, body in _surfaces(tenant.key):  # the key cached by the function
            assert c.request(method, path, json=body).status_code < 500
        database_gone()
        for cached in (True, False):  # the handler meets the timeout; then the key lookup does
            if not cached:
                keys.clear_cache()
            for surface, method, path, body in _surfaces(tenant.key):
                started = time.monotonic()
                r = c.request(method, path, json=body)
                took = time.monotonic() - started
                assert r.status_code == 503, (surface, cached, r.status_code, r.text)
                assert int(r.headers["retry-after"]) >= 1, (surface, r.headers)
                assert_envelope(surface, r.json())
                assert took < TIMEOUT_S + 2.0, (surface, cached, took)


def test_a_connection_lost_under_a_request_is_unavailable_and_the_pool_heals(database_url):
    with pytest.raises(errors.Unavailable) as lost, db.transaction() as conn:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        with psycopg.connect(database_url, autocommit=True) as other:
            other.execute("SELECT pg_terminate_backend(%s)", (pid,))
        conn.execute("SELECT 1")
    assert lost.value.status == 503 and lost.value.details["retry_after"] >= 1
    for _ in range(3):  # the broken connection was discarded, never handed out again
        with db.connection() as conn:
            assert conn.execute("SELECT 1").fetchone()[0] == 1


def test_a_statement_error_on_a_live_connection_stays_what_it_is(database_url):
    with pytest.raises(psycopg.errors.QueryCanceled), db.transaction() as conn:
        conn.execute("SET LOCAL statement_timeout = '50ms'")
        conn.execute("SELECT pg_sleep(1)")
