"""The test session's PostgreSQL: an embedded server in a temporary folder, migrated once.

With POSTBOX_TEST_DB_ROLE=postbox_app the session migrates as the server's superuser (as the
migrate function does with the master user), gives the application role its login the way the
migrate function does, and then runs every test as that role: a test that needs a privilege the
role lacks fails.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import psycopg

from functions.local.embedded import EmbeddedPostgres
from functions.local.runtime import use_database

# The session database as the user that migrated it (the owner of every object), even when the
# tests run as another role: what a test that creates databases or owns objects connects as.
OWNER_URL: str | None = None


def start_session_database() -> tuple[str, EmbeddedPostgres | None]:
    """TEST_DATABASE_URL if given (a server you run), else a fresh embedded server."""
    url = os.environ.get("TEST_DATABASE_URL")
    server = None
    if not url:
        root = Path(tempfile.mkdtemp(prefix="postbox-test-"))
        root.chmod(0o755)
        server = EmbeddedPostgres(root / "pgdata", keep=False, fast=True)
        url = server.ensure_database("postbox_test", fresh=True)
    use_database(url)
    global OWNER_URL
    OWNER_URL = url
    role = os.environ.get("POSTBOX_TEST_DB_ROLE")
    if role:
        url = as_role(url, role, "app-role-test-password")
        _connect_as(url)
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT current_user").fetchone()[0] == role
    return url, server


def as_role(url: str, role: str, password: str) -> str:
    """Give `role` its login (as the migrate function does on AWS) and return `url` logging in as it."""
    from postbox import roles

    with psycopg.connect(url, autocommit=True) as conn:
        roles.set_password(conn, role, password)
    info = psycopg.conninfo.conninfo_to_dict(url)
    info.update(user=role, password=password)
    return psycopg.conninfo.make_conninfo(**info)


def _connect_as(url: str) -> None:
    """Point the pool at `url` without migrating (the role may not, as on AWS)."""
    from postbox import config, db

    os.environ["DATABASE_URL"] = url
    config.reset()
    db.close_pool()
