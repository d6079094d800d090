"""The connection pool: created lazily at first use, reused across Lambda invocations.

`prepare_threshold=None` because RDS Proxy pins a session that prepares statements; no session
`SET`s for the same reason. Each unit of work takes one connection and one transaction.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg_pool import ConnectionPool

from . import config

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
                    kwargs={"prepare_threshold": None, "autocommit": False},
                    check=ConnectionPool.check_connection,
                    name="postbox",
                    open=True,
                )
    return _pool


def close_pool() -> None:
    global _pool
    with _lock:
        if _pool is not None:
            _pool.close()
            _pool = None


@contextmanager
def transaction() -> Iterator[psycopg.Connection]:
    """One connection, one transaction: committed on success, rolled back on any error."""
    with pool().connection() as conn:
        yield conn
