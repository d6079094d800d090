"""Whose rows each table holds: what a tenant's move to another cell copies, and in what order.

Every table of schemas `public` and `control` (a partitioned table counts once) is one of:

* the tenant's by a column holding the tenant's id: `tenant_id` (no comment needed), or the
  column its comment names (`tenants`: `'tenant: id'`);
* the tenant's through a parent: its comment says `'tenant: queue_id -> queues'` (the row is the
  parent's whose `id` it holds, the parent being the tenant's by its own declaration), or several
  parents chosen by a kind column (`'tenant: resource_id -> queues if kind = ''queue''; ...'`);
* shared: the cell's own rows, never moved; its comment says `'shared: <why>'`.

The declarations live in the database, as table comments beside the tables; `problems` lists every
table that makes none and every chain that does not reach a tenant (a test keeps it empty).
For a move, `tenant_tables` gives the tenant-owned tables parents first (`tenants` first, and a
table after every table it has a foreign key to and after its declared parents), each with the predicate that
selects one tenant's rows and the columns a copy writes.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace

import psycopg
from psycopg import sql

SCHEMAS = ("public", "control")
TENANT_COLUMN = "tenant_id"

_COLUMN = re.compile(r"^tenant:\s*(\w+)\s*$")
_PARENT = re.compile(r"^\s*(\w+)\s*->\s*([\w.]+)(?:\s+if\s+(\w+)\s*=\s*'([^']*)')?\s*$")
_PARENTS = re.compile(r"^tenant:(.*)$", re.S)
_SHARED = re.compile(r"^shared:\s*\S", re.S)

# The tables of the two schemas: name (schema-qualified outside public), its comment, its columns,
# and those a copy writes (generated columns are computed by the target).
_TABLES = """
SELECT CASE WHEN n.nspname = 'public' THEN c.relname ELSE n.nspname || '.' || c.relname END,
       n.nspname, c.relname, obj_description(c.oid, 'pg_class'),
       array(SELECT a.attname::text FROM pg_attribute a
              WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum),
       array(SELECT a.attname::text FROM pg_attribute a
              WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
              ORDER BY a.attnum)
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = ANY (%s) AND c.relkind IN ('r', 'p') AND NOT c.relispartition
 ORDER BY 1
"""

# Foreign keys between those tables (child, parent), partitions' own constraints left out.
_REFERENCES = """
SELECT CASE WHEN cn.nspname = 'public' THEN c.relname ELSE cn.nspname || '.' || c.relname END,
       CASE WHEN pn.nspname = 'public' THEN p.relname ELSE pn.nspname || '.' || p.relname END
  FROM pg_constraint k
  JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace cn ON cn.oid = c.relnamespace
  JOIN pg_class p ON p.oid = k.confrelid JOIN pg_namespace pn ON pn.oid = p.relnamespace
 WHERE k.contype = 'f' AND k.conparentid = 0 AND NOT c.relispartition AND NOT p.relispartition
   AND cn.nspname = ANY (%s) AND pn.nspname = ANY (%s)
"""


@dataclass(frozen=True)
class Parent:
    """The row is the tenant's whose `table` row has `id` = `column` (when `kind` = `value`)."""

    column: str
    table: str
    kind: str | None = None
    value: str | None = None


@dataclass(frozen=True)
class Table:
    """One table's declaration: `column` holds the tenant's id, or `parents` lead to one, or it is
    `shared` (the reason). `columns` are those a copy writes, in the table's order."""

    name: str
    ident: sql.Identifier
    columns: tuple[str, ...]
    column: str | None = None
    parents: tuple[Parent, ...] = ()
    shared: str | None = None
    predicate: Callable[[sql.Composable], sql.Composable] | None = None  # given the tenant's id

    @property
    def owned(self) -> bool:
        return self.shared is None

    def where(self, tenant_id: str | None = None) -> sql.Composable:
        """The predicate selecting one tenant's rows: with `%(tenant)s` as a placeholder, or the
        given tenant's id as a literal."""
        if self.predicate is None:
            raise ValueError(f"{self.name} is shared: no tenant's rows")
        tenant = sql.Placeholder("tenant") if tenant_id is None else sql.Literal(uuid.UUID(str(tenant_id)))
        return self.predicate(tenant)

    def select(self, tenant_id: str | None = None) -> sql.Composable:
        """`SELECT <the columns a copy writes> FROM <table> WHERE <the tenant's rows>`."""
        return sql.SQL("SELECT {} FROM {} WHERE {}").format(
            sql.SQL(", ").join(map(sql.Identifier, self.columns)), self.ident, self.where(tenant_id))


class Undeclared(RuntimeError):
    """Some table does not say whose rows it holds (or says it wrong): a move could miss them."""


def _declare(name: str, schema: str, rel: str, comment: str | None, names: list[str],
             written: list[str]) -> Table | str:
    """The table's declaration, or what is wrong with it."""
    base = {"name": name, "ident": sql.Identifier(schema, rel), "columns": tuple(written)}
    text = (comment or "").strip()
    if not text:
        if TENANT_COLUMN in names:
            return Table(column=TENANT_COLUMN, **base)
        return f"{name}: no {TENANT_COLUMN} column, no parent and not shared (say whose rows it holds in its comment)"
    if _SHARED.match(text):
        return Table(shared=text.split(":", 1)[1].strip(), **base)
    m = _COLUMN.match(text)
    if m:
        return Table(column=m.group(1), **base) if m.group(1) in names else f"{name}: no column {m.group(1)!r}"
    m = _PARENTS.match(text)
    if not m:
        return f"{name}: its comment {text!r} is neither 'tenant: ...' nor 'shared: ...'"
    parents = []
    for part in m.group(1).split(";"):
        p = _PARENT.match(part)
        if not p:
            return f"{name}: cannot read {part.strip()!r} as '<column> -> <table> [if <column> = ''<value>'']'"
        parents.append(Parent(*p.groups()))
    for p in parents:
        for col in (p.column, p.kind):
            if col is not None and col not in names:
                return f"{name}: no column {col!r}"
    if len(parents) > 1 and any(p.kind is None for p in parents):
        return f"{name}: several parents, each needs 'if <column> = ''<value>'''"
    return Table(parents=tuple(parents), **base)


def _read(conn: psycopg.Connection) -> tuple[dict[str, Table], list[str], list[tuple[str, str]]]:
    tables: dict[str, Table] = {}
    wrong: list[str] = []
    columns: dict[str, list[str]] = {}
    for name, schema, rel, comment, names, written in conn.execute(_TABLES, (list(SCHEMAS),)):
        columns[name] = names
        found = _declare(name, schema, rel, comment, names, written)
        if isinstance(found, str):
            wrong.append(found)
        else:
            tables[name] = found
    refs = [tuple(r) for r in conn.execute(_REFERENCES, (list(SCHEMAS), list(SCHEMAS)))]
    # Each chain must reach a tenant column through tables that exist, have an `id`, and are owned.
    Predicate = Callable[[sql.Composable], sql.Composable]
    resolved: dict[str, Predicate] = {}

    def where(name: str, seen: tuple[str, ...]) -> Predicate | str:
        if name in resolved:
            return resolved[name]
        t = tables[name]
        if t.column is not None:
            column = sql.Identifier(t.column)
            resolved[name] = lambda tenant: sql.SQL("{} = {}").format(column, tenant)
            return resolved[name]
        alternatives = []
        for p in t.parents:
            trail = " -> ".join((*seen, name, p.table))
            if p.table in seen or p.table == name:
                return f"{name}: its parents go round in a circle ({trail})"
            if p.table not in tables:
                return f"{name}: parent {p.table!r} is not a table that says whose rows it holds"
            parent = tables[p.table]
            if not parent.owned:
                return f"{name}: parent {p.table} is shared, so the chain reaches no tenant ({trail})"
            if "id" not in columns[p.table]:
                return f"{name}: parent {p.table} has no column 'id'"
            above = where(p.table, (*seen, name))
            if isinstance(above, str):
                return above
            alternatives.append(_through(p, parent.ident, above))
        if len(alternatives) == 1:
            resolved[name] = alternatives[0]
        else:
            resolved[name] = lambda tenant: sql.SQL(" OR ").join(a(tenant) for a in alternatives)
        return resolved[name]

    for name, t in sorted(tables.items()):
        if t.owned:
            found = where(name, ())
            if isinstance(found, str):
                wrong.append(found)
            else:
                tables[name] = replace(t, predicate=found)
    return tables, sorted(set(wrong)), refs


def _through(p: Parent, parent: sql.Identifier, above: Callable[[sql.Composable], sql.Composable]
             ) -> Callable[[sql.Composable], sql.Composable]:
    """`<column> IN (SELECT id FROM <parent> WHERE <the parent's predicate>)`, behind its kind."""
    def predicate(tenant: sql.Composable) -> sql.Composable:
        inner = sql.SQL("{} IN (SELECT id FROM {} WHERE {})").format(sql.Identifier(p.column), parent, above(tenant))
        if p.kind is None:
            return inner
        return sql.SQL("({} = {} AND {})").format(sql.Identifier(p.kind), sql.Literal(p.value), inner)
    return predicate


def problems(conn: psycopg.Connection) -> list[str]:
    """Every table that does not say whose rows it holds, or whose chain reaches no tenant."""
    return _read(conn)[1]


def catalog(conn: psycopg.Connection) -> list[Table]:
    """Every table of the two schemas, declared; parents before children. Undeclared when some
    table says nothing (or something wrong): a move must not run then."""
    tables, wrong, refs = _read(conn)
    if wrong:
        raise Undeclared("; ".join(wrong))
    after: dict[str, set[str]] = {name: set() for name in tables}
    for child, parent in refs:
        if child != parent and child in after and parent in after:
            after[child].add(parent)
    roots = {name for name, t in tables.items() if t.column == "id"}  # the tenants themselves
    for name, t in tables.items():
        after[name].update(p.table for p in t.parents)
        if t.column is not None and name not in roots:
            after[name].update(roots)
    ordered: list[str] = []
    placed: set[str] = set()
    while len(ordered) < len(tables):
        ready = sorted(n for n in tables if n not in placed and after[n] <= placed)
        if not ready:
            stuck = sorted(n for n in tables if n not in placed)
            raise Undeclared(f"foreign keys go round in a circle among {', '.join(stuck)}")
        ordered.extend(ready)
        placed.update(ready)
    return [tables[n] for n in ordered]


def tenant_tables(conn: psycopg.Connection) -> list[Table]:
    """The tables holding tenants' rows, parents first: the order a copy inserts them in (and the
    reverse, the order a drain deletes them in)."""
    return [t for t in catalog(conn) if t.owned]


def shared_tables(conn: psycopg.Connection) -> list[Table]:
    """The cell's own tables, never moved."""
    return [t for t in catalog(conn) if not t.owned]
