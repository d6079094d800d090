"""The tables a move copies: every tenant-owned table the ownership catalog declares, parents
before children (the order a copy must follow; a drain deletes in reverse), each with the predicate
that selects the tenant's rows and the key its changes are captured by.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql

from postbox import ownership

# The key of a table without a primary key (a partitioned table cannot have one on a column its
# partitions are not keyed by): what identifies its rows instead.
_KEYS_WITHOUT_PRIMARY = {"work_journal": ("seq",)}

# Columns copied as another value than the source's (an SQL expression read on the source). A work
# journal row's `moved` says the fold has yet to add it to the counters, by a transaction id that
# only means something on its own cell: the target receives every row as already counted, and its
# counters as the source's exact figures (moves/counters.py).
_COPIED_AS = {"work_journal": {"moved": "NULL::int"}}


@dataclass(frozen=True)
class Table:
    """One tenant-owned table as the mover handles it: its copied columns (generated ones are not
    copied), its key (the primary key, or the one named for a table without), the SQL types of the
    key's columns, and the predicate with the tenant's id in it."""

    name: str
    where: str
    columns: tuple[str, ...]
    key: tuple[str, ...]
    key_types: tuple[str, ...]
    has_primary_key: bool
    unhashable: tuple[str, ...] = ()  # columns of a type without a hash function (json): hashed as text
    copied_as: tuple[tuple[str, str], ...] = ()  # (column, what the source's rows give it on the target)

    def ident(self) -> sql.Identifier:
        return sql.Identifier(self.name)

    def cols(self, names: tuple[str, ...] | None = None) -> sql.Composable:
        return sql.SQL(", ").join(map(sql.Identifier, names or self.columns))

    def source_cols(self) -> sql.Composable:
        """The columns as the source's rows are read for the target (see _COPIED_AS)."""
        given = dict(self.copied_as)
        return sql.SQL(", ").join(sql.SQL(given[c]) if c in given else sql.Identifier(c) for c in self.columns)


def tables(conn: psycopg.Connection, tenant_id: str) -> list[Table]:
    """Every table the tenant owns rows in, parents first, read from `conn`'s catalog."""
    found = []
    for owned in ownership.tenant_tables(conn):
        name = owned.name
        primary = [r[0] for r in conn.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid"
            " AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary"
            " ORDER BY array_position(i.indkey::int2[], a.attnum)", (name,))]
        chosen = tuple(primary) if primary else _KEYS_WITHOUT_PRIMARY.get(name)
        if not chosen:
            raise RuntimeError(f"table {name} has no primary key and the mover was given none")
        types = tuple(conn.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = %s::regclass"
            " AND attname = %s", (name, c)).fetchone()[0] for c in chosen)
        unhashable = tuple(r[0] for r in conn.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND atttypid = 'json'::regtype", (name,)))
        found.append(Table(name, owned.where(tenant_id).as_string(conn), owned.columns, chosen, types,
                           bool(primary), unhashable, tuple(_COPIED_AS.get(name, {}).items())))
    return found
