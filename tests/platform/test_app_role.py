"""The least-privilege roles: postbox_app can do what every surface and agent does and nothing more
(no DDL, no TRUNCATE, no writes to the migrator's tables); postbox_listen can only register waiters."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

import support.database
from functions import routes as route_table
from postbox import db, roles
from support.database import as_role

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def app_url(database_url):
    # the owner gives the login: a session already running as the app role may not ALTER ROLE
    return as_role(support.database.OWNER_URL or database_url, roles.APP, "app-role-test-password")


def test_the_app_role_has_dml_and_execute_on_everything_and_nothing_else(app_url):
    with db.connection() as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')"
            " AND c.relname NOT IN ('schema_migrations', 'schema_functions')")]
        functions = [r[0] for r in conn.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = 'public' AND p.prokind = 'f'")]
        for table in tables:
            for privilege in ("SELECT", "INSERT", "UPDATE", "DELETE"):
                assert conn.execute("SELECT has_table_privilege(%s, %s, %s)", (roles.APP, table, privilege)
                                    ).fetchone()[0], (table, privilege)
            assert not conn.execute("SELECT has_table_privilege(%s, %s, 'TRUNCATE')", (roles.APP, table)).fetchone()[0]
        for fn in functions:
            assert conn.execute("SELECT has_function_privilege(%s, %s, 'EXECUTE')", (roles.APP, fn)).fetchone()[0], fn
        assert not conn.execute("SELECT has_schema_privilege(%s, 'public', 'CREATE')", (roles.APP,)).fetchone()[0]
    assert len(tables) > 20 and len(functions) > 20
    with psycopg.connect(app_url, autocommit=True) as conn:
        assert conn.execute("SELECT current_user").fetchone()[0] == roles.APP
        conn.execute("SELECT count(*) FROM schema_migrations")  # it may read which migrations ran
        for refused in (
            "CREATE TABLE app_made (x int)",
            "ALTER TABLE queues ADD COLUMN x int",
            "DROP TABLE waiters",
            "TRUNCATE queue_messages",
            "DELETE FROM schema_migrations",
            "UPDATE schema_functions SET checksum = ''",
            "CREATE ROLE app_made",
            "CREATE OR REPLACE FUNCTION queue_find_x() RETURNS int LANGUAGE sql AS 'SELECT 1'",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(refused)


def test_tables_a_later_migration_creates_are_granted_too(database_url, app_url):
    """Default privileges: what a later migration or functions file creates (as the same owner) is the app's too."""
    with psycopg.connect(database_url, autocommit=True) as owner:
        owner.execute("CREATE TABLE later_migration_table (id bigserial PRIMARY KEY, v text)")
        owner.execute("CREATE FUNCTION later_migration_fn() RETURNS int LANGUAGE sql AS 'SELECT 7'")
    try:
        with psycopg.connect(app_url, autocommit=True) as conn:
            conn.execute("INSERT INTO later_migration_table (v) VALUES ('x')")
            assert conn.execute("SELECT later_migration_fn()").fetchone()[0] == 7
    finally:
        with psycopg.connect(database_url, autocommit=True) as owner:
            owner.execute("DROP TABLE later_migration_table")
            owner.execute("DROP FUNCTION later_migration_fn()")


def test_the_listen_role_only_registers_waiters(database_url):
    with psycopg.connect(database_url, autocommit=True) as conn:
        roles.allow_iam_login(conn, roles.LISTEN, 7)
        assert conn.execute("SELECT rolcanlogin, rolconnlimit FROM pg_roles WHERE rolname = %s",
                            (roles.LISTEN,)).fetchone() == (True, 7)
    info = psycopg.conninfo.conninfo_to_dict(database_url)
    info["user"] = roles.LISTEN
    with psycopg.connect(psycopg.conninfo.make_conninfo(**info), autocommit=True) as conn:
        conn.execute("INSERT INTO waiters (channel, waiter, until) VALUES ('queue_0', gen_random_uuid(), now())")
        conn.execute("LISTEN queue_0")
        conn.execute("DELETE FROM waiters WHERE channel = 'queue_0'")
        for refused in ("SELECT * FROM queue_messages", "UPDATE waiters SET until = now()", "SELECT * FROM api_keys"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(refused)


def surface_test_files() -> list[str]:
    """Each surface's HTTP tests (tests/<surface>/test_<surface>_http.py, from the route table), and
    the agents' domain tests: every request shape a function makes, end to end."""
    folders = [name.replace("-", "_") for name in route_table.FUNCTIONS]
    files = [f"tests/{folder}/test_{folder}_http.py" for folder in folders]
    files += ["tests/queues/test_consumers.py", "tests/queues/test_retention.py",
              "tests/keyed_streams/test_keyed_streams_lifecycle.py"]
    missing = [f for f in files if not (REPO / f).exists()]
    assert not missing, f"surface test files moved: {missing}"
    return files


def test_every_surface_and_agent_works_as_the_app_role():
    """The surfaces' HTTP tests and the agents' tests, in a session that connects as postbox_app."""
    files = surface_test_files()
    assert len(files) >= len(route_table.FUNCTIONS)
    env = {**os.environ, "POSTBOX_TEST_DB_ROLE": roles.APP}
    env.pop("TEST_DATABASE_URL", None)
    run = subprocess.run([sys.executable, "-m", "pytest", "-x", "-p", "no:cacheprovider", *files],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and " failed" not in run.stdout
