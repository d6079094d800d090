"""Copying a tenant's rows from one cell's database to another's: a table whole (COPY piped from
source to target), the rows the capture triggers logged since (a catch-up pass), the checks, and
the drain of the source once the directory names the target."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import psycopg
from psycopg import sql

from . import counters
from .tables import Table


def copy_table(src: psycopg.Connection, dst: psycopg.Connection, table: Table) -> int:
    """The tenant's rows of `table` on the target replaced by the source's, in one target
    transaction (a copy cut short by a crash leaves nothing and is done again)."""
    rows = 0
    with dst.transaction():
        dst.execute(sql.SQL("DELETE FROM {} WHERE {}").format(table.ident(), sql.SQL(table.where)))
        out = sql.SQL("COPY (SELECT {} FROM {} WHERE {}) TO STDOUT (FORMAT binary)").format(
            table.source_cols(), table.ident(), sql.SQL(table.where))
        into = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT binary)").format(table.ident(), table.cols())
        with src.cursor().copy(out) as reader, dst.cursor().copy(into) as writer:
            for chunk in reader:
                writer.write(chunk)
        rows = dst.execute(sql.SQL("SELECT count(*) FROM {} WHERE {}").format(
            table.ident(), sql.SQL(table.where))).fetchone()[0]
    return rows


def _keys_in(table: Table, param: str = "keys") -> sql.Composable:
    """`(key columns) IN (the keys of a jsonb array of arrays)`, which an index on the key serves."""
    picks = sql.SQL(", ").join(
        sql.SQL("(e->>{})::{}").format(sql.Literal(i), sql.SQL(t)) for i, t in enumerate(table.key_types))
    return sql.SQL("({}) IN (SELECT {} FROM jsonb_array_elements({}) e)").format(
        table.cols(table.key), picks, sql.Placeholder(param))


def apply_pass(src: psycopg.Connection, dst: psycopg.Connection, move_id: int, tables: list[Table]) -> int:
    """Copy again every row the capture logged: the logged keys are taken off the log in a source
    transaction committed only after the target's (a crash in between replays them: each step is
    idempotent), rows gone from the source are deleted on the target (children first), the others
    written over (parents first). Returns how many keys were applied."""
    with src.transaction():
        logged = src.execute("DELETE FROM control.tenant_move_changes WHERE move_id = %s RETURNING tbl, key",
                             (move_id,)).fetchall()
        if not logged:
            return 0
        keys: dict[str, dict[str, list]] = {}
        for tbl, key in logged:
            keys.setdefault(tbl, {})[json.dumps(key)] = key
        todo = [t for t in tables if t.name in keys]
        with dst.transaction():
            for table in todo:  # the source's current rows of those keys, into a scratch table
                scratch = sql.Identifier(f"move_in_{table.name}")
                dst.execute(sql.SQL("CREATE TEMP TABLE {} ON COMMIT DROP AS SELECT {} FROM {} WITH NO DATA").format(
                    scratch, table.cols(), table.ident()))
                out = sql.SQL("COPY (SELECT {} FROM {} WHERE {} AND {}) TO STDOUT (FORMAT binary)").format(
                    table.source_cols(), table.ident(), _keys_in(table), sql.SQL(table.where))
                params = {"keys": json.dumps(list(keys[table.name].values()))}
                with src.cursor().copy(out, params) as reader, dst.cursor().copy(
                        sql.SQL("COPY {} ({}) FROM STDIN (FORMAT binary)").format(scratch, table.cols())) as writer:
                    for chunk in reader:
                        writer.write(chunk)
            for table in reversed(todo):  # gone from the source: gone from the target
                scratch = sql.Identifier(f"move_in_{table.name}")
                kept = sql.SQL("")
                if table.has_primary_key:
                    kept = sql.SQL(" AND ({}) NOT IN (SELECT {} FROM {})").format(
                        table.cols(table.key), table.cols(table.key), scratch)
                dst.execute(sql.SQL("DELETE FROM {} WHERE {} AND {}{}").format(
                    table.ident(), _keys_in(table), sql.SQL(table.where), kept),
                    {"keys": json.dumps(list(keys[table.name].values()))})
            for table in todo:  # the others as the source has them now
                scratch = sql.Identifier(f"move_in_{table.name}")
                rest = [c for c in table.columns if c not in table.key]
                if not table.has_primary_key:
                    conflict = sql.SQL("")
                elif rest:
                    conflict = sql.SQL(" ON CONFLICT ({}) DO UPDATE SET {}").format(
                        table.cols(table.key), sql.SQL(", ").join(
                            sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in rest))
                else:
                    conflict = sql.SQL(" ON CONFLICT DO NOTHING")
                dst.execute(sql.SQL("INSERT INTO {} ({}) OVERRIDING SYSTEM VALUE SELECT {} FROM {}{}").format(
                    table.ident(), table.cols(), table.cols(), scratch, conflict))
    return len(logged)


def pending(src: psycopg.Connection, move_id: int) -> int:
    return src.execute("SELECT count(*) FROM control.tenant_move_changes WHERE move_id = %s", (move_id,)).fetchone()[0]


def _sums(conn: psycopg.Connection, tables: list[Table], source: bool) -> dict[str, tuple[int, int]]:
    found = {}
    for table in tables:
        given = dict(table.copied_as) if source else {}  # the source's rows as the target received them
        row = sql.SQL(", ").join(
            sql.SQL(given[c]) if c in given else
            sql.SQL("{}::text" if c in table.unhashable else "{}").format(sql.Identifier(c))
            for c in table.columns)
        count, total = conn.execute(sql.SQL(  # each column by its type's hash (no text form made)
            "SELECT count(*), coalesce(sum(hash_record_extended(ROW({}), 0)), 0) FROM {} WHERE {}").format(
            row, table.ident(), sql.SQL(table.where))).fetchone()
        found[table.name] = (count, int(total))
    return found


def check(src: psycopg.Connection, dst: psycopg.Connection, tables: list[Table]) -> tuple[dict, list[str]]:
    """Rows and a checksum (the sum of each row's hash) per table on both sides, read side by side,
    but for the counters, compared by the figures they answer (moves/counters.py); returns the
    figures and the tables that differ."""
    rowed = [t for t in tables if t.name not in counters.SETTLED]
    with ThreadPoolExecutor(2) as pool:
        source, target = pool.map(lambda side: _sums(side[0], rowed, side[1]), ((src, True), (dst, False)))
    differ = [t.name for t in rowed if source[t.name] != target[t.name]]
    differ += counters.differ(src, dst, tables)
    return {name: {"rows": rows} for name, (rows, _) in source.items() if rows}, differ


def drain(src: psycopg.Connection, tables: list[Table]) -> int:
    """Delete the tenant's rows on the source, children first, in one transaction whose writes fire
    no trigger (as a replica's: the fence, and the counters of rows that go with their counters).
    Returns how many rows went."""
    gone = 0
    with src.transaction():
        src.execute("SET LOCAL session_replication_role = replica")
        for table in reversed(tables):
            gone += src.execute(sql.SQL("DELETE FROM {} WHERE {}").format(table.ident(), sql.SQL(table.where))).rowcount
    return gone
