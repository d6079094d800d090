"""The connection pool: created lazily at first use, reused across Lambda invocations.

`prepare_threshold=None` because RDS Proxy pins a session that prepares statements; no session
`SET`s for the same reason. Each unit of work takes one connection and one transaction.
"""

from __future__ import annotations

import json
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg_pool import ConnectionPool

from . import config, errors, jsoncodec

_pool: ConnectionPool | None = None
_lock = threading.Lock()


SECRET_TTL_S = 60.0  # a rotated DB password reaches new connections within a minute
_secret_cache: dict[tuple[str, str], tuple[float, str]] = {}


def conninfo() -> str:
    """DATABASE_URL when set (local, tests); otherwise the proxy endpoint plus the DB secret.

    The pool calls this for every new connection; the secret is re-read at most every
    SECRET_TTL_S, so a rotated password is picked up without a cold start.
    """
    s = config.settings()
    if s.database_url:
        return s.database_url
    if not (s.db_host and s.db_secret_arn):
        raise RuntimeError("set DATABASE_URL, or POSTBOX_DB_HOST and POSTBOX_DB_SECRET_ARN")
    now = time.monotonic()
    cached = _secret_cache.get((s.db_secret_arn, s.db_host))
    if cached and cached[0] > now:
        return cached[1]
    secret = _read_secret(s.db_secret_arn, s.region)
    info = psycopg.conninfo.make_conninfo(
        host=s.db_host,
        port=s.db_port,
        dbname=s.db_name,
        user=secret["username"],
        password=secret["password"],
        sslmode=s.db_sslmode,
        application_name="postbox",
        connect_timeout=5,
    )
    _secret_cache[(s.db_secret_arn, s.db_host)] = (now + SECRET_TTL_S, info)
    return info


def _read_secret(arn: str, region: str | None) -> dict:
    import boto3  # imported here: only cold starts on AWS pay for it

    client = boto3.client("secretsmanager", region_name=region)
    return json.loads(client.get_secret_value(SecretId=arn)["SecretString"])


def pool() -> ConnectionPool:
    global _pool
    if _pool is None:
        with _lock:
            if _pool is None:
                s = config.settings()
                _pool = ConnectionPool(
                    conninfo,
                    min_size=s.pool_min,
                    max_size=max(s.pool_max, 1),
                    kwargs={"prepare_threshold": None, "autocommit": True},
                    configure=jsoncodec.use_on,
                    check=_check_if_idle,
                    reset=_reset,
                    name="postbox",
                    open=True,
                )
    return _pool


CHECK_AFTER_IDLE_S = 5.0  # a connection idle longer than this is pinged before it is handed out
_last_used: weakref.WeakKeyDictionary[psycopg.Connection, float] = weakref.WeakKeyDictionary()


def _reset(conn: psycopg.Connection) -> None:
    """Back in the pool: autocommit again (whatever the borrower did), and remember when."""
    conn.autocommit = True
    _last_used[conn] = time.monotonic()


def _check_if_idle(conn: psycopg.Connection) -> None:
    """Ping only connections that sat idle: a busy function pays no extra round trip per call."""
    if time.monotonic() - _last_used.get(conn, 0.0) > CHECK_AFTER_IDLE_S:
        ConnectionPool.check_connection(conn)


def close_pool() -> None:
    global _pool
    with _lock:
        if _pool is not None:
            _pool.close()
            _pool = None


@contextmanager
def transaction() -> Iterator[psycopg.Connection]:
    """One connection, one transaction: committed on success, rolled back on any error."""
    with pool().connection() as conn, conn.transaction():
        yield conn


@contextmanager
def connection() -> Iterator[psycopg.Connection]:
    """One connection in autocommit mode: each statement is its own transaction (one round trip)."""
    with pool().connection() as conn:
        yield conn


@contextmanager
def domain_errors() -> Iterator[None]:
    """Turn the PB-class SQLSTATEs our SQL functions raise into the domain's typed errors."""
    try:
        yield
    except psycopg.Error as e:
        diag = e.diag
        error = errors.from_sqlstate(e.sqlstate, diag.message_primary or "", diag.message_detail, diag.message_hint)
        if error is None:
            raise
        raise error from None
