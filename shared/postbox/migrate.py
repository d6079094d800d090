"""The database's schema, from `postbox/sql/` (its README says what goes where).

* `sql/schema/`: the baseline (`0001_baseline.sql`: tables, indexes, constraints, roles, grants) and
  the numbered table migrations after it. Each is applied once, in number order, in a transaction
  of its own, and recorded in `schema_migrations`.
* `sql/functions/`: every SQL function, view and trigger, each in exactly one file. After the table
  migrations, each file whose sha256 differs from the one recorded in `schema_functions` is applied
  (in name order, a transaction each; all of them again after a table migration ran), and the
  objects its transaction wrote are recorded with its checksum.
* Then every function, view and trigger of schema `public` that no file wrote is dropped (objects
  of extensions excepted), so an upgraded database ends with the catalog a fresh one has.

All of it runs under one advisory lock: safe from many processes at once. A database built by the
numbered migrations that preceded the baseline (up to `0026_work_complete_one_pass.sql`, whose
tables are the baseline's) is adopted: its rows in `schema_migrations` become the baseline's.

Run by the `migrate` function on deploy and by the local runtime and test session at start.
"""

from __future__ import annotations

import hashlib
import re
from importlib import resources

import psycopg

_LOCK_KEY = 0x706F7374626F78  # "postbox"
_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
_FUNCTIONS_NAME = re.compile(r"^[a-z0-9_]+\.sql$")

# The numbered migrations that preceded the baseline: a database whose last one is this has the
# baseline's tables; one that stopped earlier must be brought there by the Postbox that had them.
_LEGACY_FIRST = "0001_tenancy.sql"
_LEGACY_HEAD = (26, "0026_work_complete_one_pass.sql")

_BOOKKEEPING = (
    "CREATE TABLE IF NOT EXISTS schema_migrations ("
    " version int PRIMARY KEY, name text NOT NULL,"
    " applied_at timestamptz NOT NULL DEFAULT clock_timestamp())",
    "CREATE TABLE IF NOT EXISTS schema_functions ("
    " file text PRIMARY KEY, checksum text NOT NULL, objects text[] NOT NULL,"
    " applied_at timestamptz NOT NULL DEFAULT clock_timestamp())",
)

# What the current transaction wrote, as "kind identity": the functions, views and triggers of
# schema public whose catalog row it created or replaced (CREATE OR REPLACE rewrites the row).
_WRITTEN = """
WITH me AS (SELECT pg_current_xact_id()::xid AS x)
SELECT 'function ' || p.oid::regprocedure::text FROM pg_proc p, me
 WHERE p.pronamespace = 'public'::regnamespace AND p.xmin = me.x
UNION ALL
SELECT 'view ' || c.oid::regclass::text FROM pg_class c, me
 WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('v', 'm')
   AND (c.xmin = me.x OR EXISTS (SELECT 1 FROM pg_rewrite r WHERE r.ev_class = c.oid AND r.xmin = me.x))
UNION ALL
SELECT 'trigger ' || quote_ident(t.tgname) || ' ON ' || t.tgrelid::regclass::text FROM pg_trigger t, me
 WHERE NOT t.tgisinternal AND t.xmin = me.x
   AND t.tgrelid IN (SELECT oid FROM pg_class WHERE relnamespace = 'public'::regnamespace)
"""

# Every function, view and trigger of schema public (extensions' excepted), with the statement
# that drops it, triggers first, then views and functions, the newest first. A tenant move's
# triggers (`postbox_move_<id>_...`, their functions in schema control) are the move's, installed
# and removed by it: a migration run while a tenant moves leaves them (its capture and fence).
_PRESENT = """
SELECT 'trigger ' || quote_ident(t.tgname) || ' ON ' || t.tgrelid::regclass::text,
       format('DROP TRIGGER %I ON %s', t.tgname, t.tgrelid::regclass), 0, t.oid
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
 WHERE NOT t.tgisinternal AND c.relnamespace = 'public'::regnamespace
   AND t.tgname NOT LIKE 'postbox\\_move\\_%'
   AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_trigger'::regclass
                   AND d.objid = t.oid AND d.deptype = 'e')
UNION ALL
SELECT 'view ' || c.oid::regclass::text,
       format('DROP %s VIEW %s', CASE c.relkind WHEN 'm' THEN 'MATERIALIZED' ELSE '' END, c.oid::regclass), 1, c.oid
  FROM pg_class c
 WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('v', 'm')
   AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass
                   AND d.objid = c.oid AND d.deptype = 'e')
UNION ALL
SELECT 'function ' || p.oid::regprocedure::text,
       format('DROP %s %s', CASE p.prokind WHEN 'p' THEN 'PROCEDURE' WHEN 'a' THEN 'AGGREGATE' ELSE 'FUNCTION' END,
              p.oid::regprocedure), 2, p.oid
  FROM pg_proc p
 WHERE p.pronamespace = 'public'::regnamespace
   AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass
                   AND d.objid = p.oid AND d.deptype = 'e')
ORDER BY 3, 4 DESC
"""


def available() -> list[tuple[int, str, str]]:
    """(version, file name, sql) for every table migration (the baseline first), in order."""
    found = []
    for entry in resources.files("postbox.sql.schema").iterdir():
        m = _NAME.match(entry.name)
        if m:
            found.append((int(m.group(1)), entry.name, entry.read_text(encoding="utf-8")))
    found.sort()
    versions = [v for v, _, _ in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"duplicate migration numbers: {versions}")
    return found


def functions() -> list[tuple[str, str]]:
    """(file name, sql) for every functions file, in the order they are applied (name order)."""
    found = [
        (entry.name, entry.read_text(encoding="utf-8"))
        for entry in resources.files("postbox.sql.functions").iterdir()
        if _FUNCTIONS_NAME.match(entry.name)
    ]
    return sorted(found)


def checksum(sql: str) -> str:
    return hashlib.sha256(sql.encode("utf-8")).hexdigest()


def apply(conninfo: str) -> list[str]:
    """Bring the database to the files' schema; returns what was done (files applied, objects
    dropped), empty when it already was. Safe to run from many processes at once."""
    with psycopg.connect(conninfo, autocommit=True, prepare_threshold=None) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (_LOCK_KEY,))
        try:
            _bookkeeping(conn)
            done = _adopt_legacy(conn)
            tables = _apply_schema(conn)
            return done + tables + _apply_functions(conn, every=bool(done or tables)) + _drop_undefined(conn)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_KEY,))


def _bookkeeping(conn: psycopg.Connection) -> None:
    for table, ddl in zip(("schema_migrations", "schema_functions"), _BOOKKEEPING, strict=True):
        if conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()[0] is None:
            conn.execute(ddl)


def _adopt_legacy(conn: psycopg.Connection) -> list[str]:
    """A database of the numbered migrations before the baseline: at their last one it is the
    baseline's, so its rows become the baseline's row; at an earlier one it is refused."""
    rows = dict(conn.execute("SELECT version, name FROM schema_migrations").fetchall())
    if rows.get(1) != _LEGACY_FIRST:
        return []
    head = max(rows)
    if (head, rows[head]) != _LEGACY_HEAD:
        raise RuntimeError(
            f"this database is at Postbox migration {rows[head]}, from before the schema baseline, which"
            f" adopts only databases at {_LEGACY_HEAD[1]}: apply the earlier Postbox's migrations to it"
            " first (up to that one), or recreate it"
        )
    version, name, _ = available()[0]
    with conn.transaction():
        conn.execute("DELETE FROM schema_migrations")
        conn.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (version, name))
        # What the baseline's grants give a fresh database on the table this one did not have.
        conn.execute("REVOKE INSERT, UPDATE, DELETE ON schema_functions FROM postbox_app")
    return [f"schema/{name} (adopted: migrations up to {_LEGACY_HEAD[1]})"]


def _apply_schema(conn: psycopg.Connection) -> list[str]:
    applied = []
    done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
    for version, name, sql in available():
        if version in done:
            continue
        with conn.transaction():
            conn.execute(sql)
            conn.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (version, name))
        applied.append(f"schema/{name}")
    return applied


def _apply_functions(conn: psycopg.Connection, *, every: bool) -> list[str]:
    """Apply each functions file whose checksum changed (each of them with `every`); a file no
    longer there loses its row, so what only it defined is dropped next."""
    applied = []
    recorded = dict(conn.execute("SELECT file, checksum FROM schema_functions").fetchall())
    files = functions()
    for name, sql in files:
        digest = checksum(sql)
        if not every and recorded.get(name) == digest:
            continue
        with conn.transaction():
            conn.execute(sql)
            objects = [row[0] for row in conn.execute(_WRITTEN)]
            conn.execute(
                "INSERT INTO schema_functions (file, checksum, objects) VALUES (%s, %s, %s)"
                " ON CONFLICT (file) DO UPDATE SET checksum = excluded.checksum, objects = excluded.objects,"
                " applied_at = clock_timestamp()",
                (name, digest, objects),
            )
        applied.append(f"functions/{name}")
    gone = sorted(set(recorded) - {name for name, _ in files})
    if gone:
        conn.execute("DELETE FROM schema_functions WHERE file = ANY (%s)", (gone,))
    return applied


def _drop_undefined(conn: psycopg.Connection) -> list[str]:
    """Drop the functions, views and triggers that no functions file wrote (no CASCADE: an object
    something else still depends on stops the run instead of taking that with it)."""
    defined = {obj for row in conn.execute("SELECT objects FROM schema_functions") for obj in row[0]}
    stale = [(obj, drop) for obj, drop, _, _ in conn.execute(_PRESENT).fetchall() if obj not in defined]
    if not stale:
        return []
    with conn.transaction():
        for _, drop in stale:
            conn.execute(drop)
    return [f"dropped {obj}" for obj, _ in stale]
