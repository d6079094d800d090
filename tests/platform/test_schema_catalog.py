"""One schema, however a database got there: a database built by the numbered migrations that
preceded the baseline (read from git history) and then upgraded by the migrator has exactly the
catalog of a database the migrator builds fresh; a second run changes nothing; a functions file is
applied again exactly when its text changes; every function is defined in one file only.

The two databases live on the session's server beside the session's own."""

from __future__ import annotations

import re
import subprocess
import uuid
from importlib import resources
from pathlib import Path

import psycopg
import pytest

from postbox import migrate
from support import database as session_db

REPO = Path(__file__).resolve().parents[2]
LEGACY_COMMIT = "0bafed9"  # the last commit with the numbered migrations (0001..0026)
LEGACY_DIR = "shared/postbox/migrations"


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)


@pytest.fixture(scope="module")
def legacy_files() -> list[tuple[str, str]]:
    """(file name, sql) of the legacy migrations, in order, as the old migrator read them."""
    if _git("rev-parse", "--git-dir").returncode != 0:
        pytest.skip(f"{REPO} is not a git checkout: the legacy migrations come from its history")
    if _git("cat-file", "-e", f"{LEGACY_COMMIT}^{{commit}}").returncode != 0:
        pytest.fail(f"commit {LEGACY_COMMIT} (the legacy migrations) is missing from this checkout's history")
    listed = _git("ls-tree", "--name-only", f"{LEGACY_COMMIT}:{LEGACY_DIR}")
    assert listed.returncode == 0, listed.stderr
    names = sorted(n for n in listed.stdout.split() if re.match(r"^\d{4}_[a-z0-9_]+\.sql$", n))
    assert names[-1] == "0026_work_complete_one_pass.sql", names
    files = []
    for name in names:
        shown = _git("show", f"{LEGACY_COMMIT}:{LEGACY_DIR}/{name}")
        assert shown.returncode == 0, shown.stderr
        files.append((name, shown.stdout))
    return files


@pytest.fixture(scope="module")
def new_database(database_url):
    """Makes empty databases on the session's server (as the session's owner); drops them after."""
    owner = session_db.OWNER_URL or database_url
    made = []

    def make(label: str) -> str:
        name = f"catalog_{label}_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(owner, autocommit=True) as conn:
            conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
        made.append(name)
        info = psycopg.conninfo.conninfo_to_dict(owner)
        info["dbname"] = name
        return psycopg.conninfo.make_conninfo(**info)

    yield make
    with psycopg.connect(owner, autocommit=True) as conn:
        for name in made:
            drop = psycopg.sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
            conn.execute(drop.format(psycopg.sql.Identifier(name)))


def apply_legacy(url: str, files: list[tuple[str, str]]) -> None:
    """What the migrator before the baseline did: each file in its own transaction, recorded."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version int PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT clock_timestamp())"
        )
        for name, sql in files:
            with conn.transaction():
                conn.execute(sql)
                conn.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (int(name[:4]), name))


@pytest.fixture(scope="module")
def upgraded(new_database, legacy_files) -> tuple[str, list[str]]:
    url = new_database("upgraded")
    apply_legacy(url, legacy_files)
    return url, migrate.apply(url)


@pytest.fixture(scope="module")
def fresh(new_database) -> tuple[str, list[str]]:
    url = new_database("fresh")
    return url, migrate.apply(url)


# ---- the catalog --------------------------------------------------------------------------------

PUBLIC = "c.relnamespace = 'public'::regnamespace"
GRANTEE = "format('%s:%s:%s', coalesce(r.rolname, 'PUBLIC'), a.privilege_type, a.is_grantable)"
ACL = ("(SELECT coalesce(array_agg(" + GRANTEE + " ORDER BY " + GRANTEE + "), '{{}}')"
       " FROM aclexplode(coalesce({acl}, acldefault({kind}, {owner}))) a LEFT JOIN pg_roles r ON r.oid = a.grantee)")

CATALOG = {
    "functions": "SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid), pg_get_userbyid(p.proowner), "
                 + ACL.format(acl="p.proacl", kind="'f'", owner="p.proowner")
                 + " FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace",
    "relations": "SELECT c.relname, c.relkind, c.relpersistence, c.reloptions, pg_get_userbyid(c.relowner), "
                 + ACL.format(acl="c.relacl", kind="CASE WHEN c.relkind = 'S' THEN 's'::\"char\" ELSE 'r' END",
                              owner="c.relowner")
                 + f" FROM pg_class c WHERE {PUBLIC} AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')",
    "columns": "SELECT c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod),"
               " pg_get_expr(d.adbin, d.adrelid), a.attnotnull, a.attgenerated, a.attidentity, a.attstorage,"
               " a.attcollation::regcollation::text"
               " FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
               " LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum"
               f" WHERE {PUBLIC} AND c.relkind IN ('r', 'p', 'v', 'm', 'f') AND a.attnum > 0 AND NOT a.attisdropped",
    "constraints": "SELECT c.relname, k.conname, k.contype, pg_get_constraintdef(k.oid)"
                   " FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid WHERE " + PUBLIC,
    "indexes": "SELECT c.relname, pg_get_indexdef(i.indexrelid),"
               " (SELECT reloptions FROM pg_class WHERE oid = i.indexrelid)"
               " FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid WHERE " + PUBLIC,
    "triggers": "SELECT c.relname, t.tgname, pg_get_triggerdef(t.oid)"
                " FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid WHERE NOT t.tgisinternal AND " + PUBLIC,
    "views": "SELECT c.relname, pg_get_viewdef(c.oid) FROM pg_class c WHERE c.relkind IN ('v', 'm') AND " + PUBLIC,
    "sequences": "SELECT s.sequencename, s.data_type::text, s.start_value, s.min_value, s.max_value, s.increment_by,"
                 " s.cycle, s.cache_size FROM pg_sequences s WHERE s.schemaname = 'public'",
    "sequence_owners": "SELECT s.relname, t.relname, a.attname, d.deptype FROM pg_depend d"
                       " JOIN pg_class s ON s.oid = d.objid AND s.relkind = 'S'"
                       " JOIN pg_class t ON t.oid = d.refobjid"
                       " JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = d.refobjsubid"
                       " WHERE d.classid = 'pg_class'::regclass AND s.relnamespace = 'public'::regnamespace",
    "schema": "SELECT n.nspname, pg_get_userbyid(n.nspowner), "
              + ACL.format(acl="n.nspacl", kind="'n'", owner="n.nspowner")
              + " FROM pg_namespace n WHERE n.nspname = 'public'",
    "default_privileges": "SELECT pg_get_userbyid(d.defaclrole), d.defaclnamespace::regnamespace::text,"
                          " d.defaclobjtype, "
                          "(SELECT array_agg(" + GRANTEE + " ORDER BY " + GRANTEE + ")"
                          " FROM aclexplode(d.defaclacl) a LEFT JOIN pg_roles r ON r.oid = a.grantee)"
                          " FROM pg_default_acl d",
    "extensions": "SELECT extname, extversion FROM pg_extension",
    "plans": "SELECT to_jsonb(p)::text FROM plans p",
}


def catalog(url: str) -> dict[str, list[tuple]]:
    with psycopg.connect(url) as conn:
        return {part: sorted(conn.execute(query).fetchall(), key=repr) for part, query in CATALOG.items()}


def differences(a: dict[str, list[tuple]], b: dict[str, list[tuple]]) -> list[str]:
    out = []
    for part in CATALOG:
        only_a = [row for row in a[part] if row not in b[part]]
        only_b = [row for row in b[part] if row not in a[part]]
        out += [f"{part}: only upgraded: {row!r}"[:600] for row in only_a]
        out += [f"{part}: only fresh: {row!r}"[:600] for row in only_b]
    return out


def test_an_upgraded_database_has_exactly_the_catalog_of_a_fresh_one(upgraded, fresh):
    upgraded_url, upgraded_applied = upgraded
    fresh_url, fresh_applied = fresh
    assert upgraded_applied[0].startswith("schema/0001_baseline.sql (adopted")
    assert fresh_applied[0] == "schema/0001_baseline.sql"
    files = [f"functions/{name}" for name, _ in migrate.functions()]
    assert [x for x in fresh_applied if x.startswith("functions/")] == files
    assert [x for x in upgraded_applied if x.startswith("functions/")] == files
    a, b = catalog(upgraded_url), catalog(fresh_url)
    assert len(b["functions"]) > 80 and len(b["relations"]) > 60 and b["triggers"] and b["views"]
    assert not differences(a, b), "\n".join(differences(a, b))
    with psycopg.connect(upgraded_url) as up, psycopg.connect(fresh_url) as new:
        rows = "SELECT version, name FROM schema_migrations ORDER BY version"
        assert up.execute(rows).fetchall() == new.execute(rows).fetchall() == [
            (v, n) for v, n, _ in migrate.available()]


def test_the_upgrade_dropped_only_what_no_file_defines(upgraded):
    _, applied = upgraded
    assert sorted(x for x in applied if x.startswith("dropped ")) == [
        "dropped function work_claim(uuid,uuid,uuid,integer,integer,text,text,text)",  # it takes a subscription now
        "dropped function work_complete_batch_checked(uuid,uuid,jsonb,uuid[],text,text)",
        "dropped function work_emit(work_scopes,text,work_messages,jsonb)",
        # the journal is a row per call: an entry may count a move; its walks go by tenant
        "dropped function work_journal_add(work_scopes,text,work_messages,text,text,boolean,jsonb)",
        "dropped function work_journal_last_seq()",
    ]


def test_a_second_run_applies_nothing(upgraded, fresh):
    for url, _ in (upgraded, fresh):
        assert migrate.apply(url) == []


def test_a_changed_functions_file_is_applied_again_and_no_other(fresh):
    url, _ = fresh
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE schema_functions SET checksum = 'changed' WHERE file = 'queues.sql'")
    assert migrate.apply(url) == ["functions/queues.sql"]
    assert migrate.apply(url) == []


def test_a_function_no_file_defines_is_dropped(fresh):
    url, _ = fresh
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE FUNCTION stray_helper(int) RETURNS int LANGUAGE sql AS 'SELECT $1'")
        conn.execute("CREATE VIEW stray_view AS SELECT 1 AS one")
    assert migrate.apply(url) == ["dropped view stray_view", "dropped function stray_helper(integer)"]


def test_a_database_at_an_older_legacy_migration_is_refused(new_database, legacy_files):
    url = new_database("older")
    apply_legacy(url, legacy_files[:-3])
    with pytest.raises(RuntimeError, match=r"0022_work_gdpr\.sql.*0026_work_complete_one_pass\.sql.*recreate"):
        migrate.apply(url)


# ---- the files ----------------------------------------------------------------------------------

CREATES = re.compile(r"^\s*CREATE\s+(OR\s+REPLACE\s+)?(FUNCTION|PROCEDURE|VIEW|TRIGGER)\s+([\w.\"]+)", re.I | re.M)


def _sql_files(folder: str) -> dict[str, str]:
    return {e.name: e.read_text(encoding="utf-8")
            for e in resources.files(f"postbox.sql.{folder}").iterdir() if e.name.endswith(".sql")}


def test_every_function_view_and_trigger_is_created_in_one_file_and_replaceable():
    where: dict[tuple[str, str], list[str]] = {}
    for name, sql in _sql_files("functions").items():
        for m in CREATES.finditer(sql):
            assert m.group(1), f"{name}: {m.group(0).strip()!r} is not CREATE OR REPLACE (files are re-applied)"
            where.setdefault((m.group(2).upper(), m.group(3).lower()), []).append(name)
    assert len([k for k in where if k[0] == "FUNCTION"]) > 80
    twice = {k: v for k, v in where.items() if len(v) > 1}
    assert not twice, f"created more than once: {twice}"
    for name, sql in _sql_files("schema").items():
        assert not CREATES.search(sql), f"{name} creates a function, view or trigger: they belong in functions/"


def test_no_sql_file_cites_a_migration_number():
    for folder in ("schema", "functions"):
        for name, sql in _sql_files(folder).items():
            cited = re.findall(r"(?i)\bmigrations?\s+\d{4}\b|(?<![-\w])00(?:0[1-9]|1\d|2[0-6])\b(?![-.]\d)", sql)
            assert not cited, f"{folder}/{name} cites {cited}"


def test_a_moving_tenants_triggers_outlive_a_migration_run(fresh):
    """A deploy's migration run while a tenant moves keeps the move's capture and fence triggers (they
    are the move's own, removed by it): dropping them would let the tenant's writes go uncopied."""
    from postbox.moves import triggers
    from postbox.moves.tables import tables

    url, _ = fresh
    tenant = str(uuid.uuid4())
    moving = "SELECT tgname, tgrelid::regclass::text FROM pg_trigger WHERE tgname LIKE 'postbox\\_move\\_9\\_%'"
    with psycopg.connect(url, autocommit=True) as conn:
        owned = tables(conn, tenant)
        triggers.install_capture(conn, 9, owned)
        triggers.install_fence(conn, 9, owned, tenant)
        before = set(conn.execute(moving).fetchall())
    assert len(before) > len(owned)
    assert migrate.apply(url) == []
    with psycopg.connect(url, autocommit=True) as conn:
        assert set(conn.execute(moving).fetchall()) == before
        for kind in ("capture", "fence"):
            triggers.remove(conn, 9, owned, kind)
        assert conn.execute(moving).fetchall() == []
