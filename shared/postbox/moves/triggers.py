"""The triggers a move puts on its source cell, for that move only (no cost on any other day).

- capture: after every statement on a tenant-owned table, the keys of the moving tenant's rows it
  inserted, updated or deleted go to `control.tenant_move_changes`, for the catch-up passes;
- fence: before any write of one of the moving tenant's rows, a refusal with SQLSTATE PB503 (the
  domain's Unavailable: 503 with Retry-After), from the final copy until the source is drained.
  The drain passes it, its writes firing no trigger (`session_replication_role = replica`).

- arrival: on the TARGET, from the first copy until the check passed, every write of the arriving
  tenant's rows is skipped (a BEFORE trigger returning NULL), but the mover's own, which fire no
  trigger (`session_replication_role = replica`). The target's agents sweep every tenant in one
  statement: they go on for the others and leave the copy alone (no delivery of a copied message,
  no retention or visibility sweep making the copy differ from the source). A table whose rows
  name their tenant is filtered by the trigger's WHEN (no function call for another tenant's row).

Creating a trigger waits for the table's running writers and holds off new ones until committed, so
once `install` returns every later write of the tenant is seen. Their names carry the move's id.
"""

from __future__ import annotations

import re

import psycopg
from psycopg import sql

from .tables import Table

LOCK_TIMEOUT = "2s"  # a trigger waiting longer for a table gives way (and is tried again)


def _names(move_id: int, table: Table, kind: str) -> tuple[sql.Identifier, sql.Identifier]:
    return (sql.Identifier("control", f"move_{move_id}_{kind}_{table.name}"),
            sql.Identifier(f"postbox_move_{move_id}_{kind}"))


def _capture_sql(move_id: int, table: Table) -> list[sql.Composable]:
    function, trigger = _names(move_id, table, "capture")
    key = sql.SQL("jsonb_build_array({})").format(sql.SQL(", ").join(sql.Identifier(table.name, c) for c in table.key))

    def logged(rows: str) -> sql.Composable:  # the tenant's keys among a transition table's rows
        return sql.SQL("INSERT INTO control.tenant_move_changes (move_id, tbl, key)"
                       " SELECT {}, {}, {} FROM {} AS {} WHERE {};").format(
            sql.Literal(move_id), sql.Literal(table.name), key, sql.Identifier(rows), table.ident(),
            sql.SQL(table.where))

    body = sql.SQL(
        "BEGIN IF TG_OP <> 'DELETE' THEN {} END IF; IF TG_OP <> 'INSERT' THEN {} END IF; RETURN NULL; END"
    ).format(logged("n"), logged("o"))
    create = sql.SQL("CREATE OR REPLACE FUNCTION {} () RETURNS trigger LANGUAGE plpgsql AS {}").format(
        function, sql.Literal(body.as_string(None)))
    statements: list[sql.Composable] = [create]
    for event, referencing in (("INSERT", "NEW TABLE AS n"), ("UPDATE", "OLD TABLE AS o NEW TABLE AS n"),
                               ("DELETE", "OLD TABLE AS o")):
        name = sql.Identifier(f"{trigger.as_string(None)[1:-1]}_{event.lower()}")
        statements.append(sql.SQL("DROP TRIGGER IF EXISTS {} ON {}").format(name, table.ident()))
        statements.append(sql.SQL(
            "CREATE TRIGGER {} AFTER {} ON {} REFERENCING {} FOR EACH STATEMENT EXECUTE FUNCTION {} ()").format(
            name, sql.SQL(event), table.ident(), sql.SQL(referencing), function))
    return statements


def _fence_sql(move_id: int, table: Table, tenant_id: str) -> list[sql.Composable]:
    function, trigger = _names(move_id, table, "fence")
    body = sql.SQL(
        "DECLARE r {row}%ROWTYPE; BEGIN"
        " IF TG_OP = 'INSERT' THEN r := NEW; ELSE r := OLD; END IF;"
        " PERFORM 1 FROM (SELECT r.*) AS {alias} WHERE {where};"
        " IF FOUND THEN RAISE EXCEPTION USING ERRCODE = 'PB503', DETAIL = 'TENANT_MOVING',"
        " MESSAGE = 'This tenant is moving to another cell; retry shortly.', HINT = {hint}; END IF;"
        " RETURN COALESCE(NEW, OLD); END"
    ).format(row=table.ident(), alias=table.ident(), where=sql.SQL(table.where),
             hint=sql.Literal(f'{{"retry_after": 1, "moving_tenant": "{tenant_id}"}}'))
    return [
        sql.SQL("CREATE OR REPLACE FUNCTION {} () RETURNS trigger LANGUAGE plpgsql AS {}").format(
            function, sql.Literal(body.as_string(None))),
        sql.SQL("DROP TRIGGER IF EXISTS {} ON {}").format(trigger, table.ident()),
        sql.SQL("CREATE TRIGGER {} BEFORE INSERT OR UPDATE OR DELETE ON {} FOR EACH ROW EXECUTE FUNCTION {} ()").format(
            trigger, table.ident(), function),
    ]


def _arrival_sql(move_id: int, table: Table, tenant_id: str) -> list[sql.Composable]:
    function, trigger = _names(move_id, table, "arrival")
    statements: list[sql.Composable] = [sql.SQL(
        "CREATE OR REPLACE FUNCTION {} () RETURNS trigger LANGUAGE plpgsql AS {}").format(function, sql.Literal(
            sql.SQL("DECLARE r {row}%ROWTYPE; BEGIN"
                    " IF TG_OP = 'INSERT' THEN r := NEW; ELSE r := OLD; END IF;"
                    " PERFORM 1 FROM (SELECT r.*) AS {alias} WHERE {where};"
                    " IF FOUND THEN RETURN NULL; END IF; RETURN COALESCE(NEW, OLD); END").format(
                row=table.ident(), alias=table.ident(), where=sql.SQL(table.where)).as_string(None)))]
    simple = re.fullmatch(r'"(\w+)" = (\S+)', table.where)  # the row names its tenant: a WHEN does
    for event, row in (("INSERT", "NEW"), ("UPDATE", "OLD"), ("DELETE", "OLD")):
        name = sql.Identifier(f"{trigger.as_string(None)[1:-1]}_{event.lower()}")
        when = sql.SQL(" WHEN ({}.{} = {})").format(sql.SQL(row), sql.Identifier(simple[1]), sql.SQL(simple[2])) \
            if simple else sql.SQL("")
        statements.append(sql.SQL("DROP TRIGGER IF EXISTS {} ON {}").format(name, table.ident()))
        statements.append(sql.SQL("CREATE TRIGGER {} BEFORE {} ON {} FOR EACH ROW{} EXECUTE FUNCTION {} ()").format(
            name, sql.SQL(event), table.ident(), when, function))
    return statements


def _run_all(conn: psycopg.Connection, statements: list[sql.Composable]) -> None:
    """All in one transaction, tried again when a table's lock is not had in time (or a deadlock)."""
    for attempt in range(30):
        try:
            with conn.transaction():
                conn.execute(sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(LOCK_TIMEOUT)))
                for statement in statements:
                    conn.execute(statement)
            return
        except (psycopg.errors.LockNotAvailable, psycopg.errors.DeadlockDetected):
            if attempt == 29:
                raise


def install_capture(conn: psycopg.Connection, move_id: int, tables: list[Table]) -> None:
    _run_all(conn, [s for t in tables for s in _capture_sql(move_id, t)])


def install_fence(conn: psycopg.Connection, move_id: int, tables: list[Table], tenant_id: str) -> None:
    _run_all(conn, [s for t in tables for s in _fence_sql(move_id, t, tenant_id)])


def install_arrival(conn: psycopg.Connection, move_id: int, tables: list[Table], tenant_id: str) -> None:
    _run_all(conn, [s for t in tables for s in _arrival_sql(move_id, t, tenant_id)])


def remove(conn: psycopg.Connection, move_id: int, tables: list[Table], kind: str) -> None:
    """Drop the move's triggers of one kind ('capture', 'fence' or 'arrival') and their functions."""
    statements: list[sql.Composable] = []
    for table in tables:
        function, trigger = _names(move_id, table, kind)
        names = [trigger] if kind == "fence" else [
            sql.Identifier(f"{trigger.as_string(None)[1:-1]}_{e}") for e in ("insert", "update", "delete")]
        statements += [sql.SQL("DROP TRIGGER IF EXISTS {} ON {}").format(n, table.ident()) for n in names]
        statements.append(sql.SQL("DROP FUNCTION IF EXISTS {} ()").format(function))
    _run_all(conn, statements)
