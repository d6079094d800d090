"""The directory: which cell holds each tenant, kept in the first cell's `control` schema.

Functions read it through a per-process cache, as they do keys: a tenant's cell is asked for at
most once every POSTBOX_CELL_CACHE_SECONDS (5 s by default), so a warm request pays no round trip
for it, and a tenant moved to another cell is found there within that time. A tenant with no row
predates the directory and is on the first cell.

New tenants go to the cell an admin names, or else to the one with the most room: the fewest
tenants for its `weight` (its share of the deployment's capacity, 1 unless the cell says), the
first such cell on a tie.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from . import cell_ids, cells, config, db
from .errors import Conflict, Invalid

_cache: dict[str, tuple[float, cells.Cell]] = {}
_CACHE_MAX = 100_000


def route(tenant_id: str) -> cells.Cell:
    """Move the current unit of work to the tenant's cell (one cell: nothing to look up)."""
    if not cells.several():
        return cells.default()
    cell = cell_of(tenant_id)
    cells.move_to(cell)
    return cell


@contextmanager
def at(tenant_id: str) -> Iterator[cells.Cell]:
    """Run the block on the tenant's cell (an admin command, a start-up step: no request routed it)."""
    with cells.scope():
        yield route(tenant_id)


def cell_of(tenant_id: str) -> cells.Cell:
    """The tenant's cell, from the cache while it is fresh."""
    now = time.monotonic()
    hit = _cache.get(tenant_id)
    if hit and hit[0] > now:
        return hit[1]
    with cells.use(cells.default()), db.connection() as conn:
        row = conn.execute("SELECT cell FROM control.tenant_cells WHERE tenant_id = %s", (tenant_id,)).fetchone()
    cell = _known(row[0]) if row else cells.default()
    if len(_cache) > _CACHE_MAX:
        _cache.clear()
    _cache[tenant_id] = (now + config.settings().cell_cache_seconds, cell)
    return cell


def forget(tenant_id: str | None = None) -> None:
    """Drop the cached cell of one tenant (all when None): the next request asks the directory."""
    if tenant_id is None:
        _cache.clear()
    else:
        _cache.pop(tenant_id, None)


db.on_fenced(forget)  # a request that met a moving tenant's fence routes afresh when it runs again


def _known(name: str) -> cells.Cell:
    try:
        return cells.named(name)
    except KeyError:
        raise RuntimeError(f"the directory names cell {name!r}, which this deployment does not have") from None


def named_cell(name: str) -> cells.Cell:
    """The cell an admin names; Invalid, naming the deployment's cells, when there is none."""
    try:
        return cells.named(name)
    except KeyError:
        known = ", ".join(c.name for c in cells.all_cells())
        raise Invalid(f"no cell named {name!r}; one of {known}", code="cell") from None


def place(name: str, cell: str | None = None) -> tuple[str, cells.Cell]:
    """Reserve the tenant name `name` and choose its cell: the one named, or the one with the most
    room. Returns the new tenant's id and its cell, numbered (its ids are its own); Conflict when the
    name is taken on any cell."""
    if cell is not None:
        chosen = named_cell(cell)
    tenant_id = str(uuid.uuid4())
    with cells.use(cells.default()), db.transaction() as conn:
        if cell is None:
            counts = dict(conn.execute("SELECT cell, count(*) FROM control.tenant_cells GROUP BY cell").fetchall())
            chosen = min(cells.all_cells(), key=lambda c: counts.get(c.name, 0) / c.weight)
        row = conn.execute(
            "INSERT INTO control.tenant_cells (tenant_id, name, cell) VALUES (%s, %s, %s)"
            " ON CONFLICT (name) DO NOTHING RETURNING tenant_id",
            (tenant_id, name, chosen.name),
        ).fetchone()
    if row is None:
        raise Conflict(f"tenant {name!r} exists")
    if cells.several():
        try:
            cell_ids.number(chosen)  # before the tenant's first id is drawn there
        except BaseException:
            release(tenant_id)
            raise
    return tenant_id, chosen


def tenant_id_by_name(name: str) -> str | None:
    """The id of the tenant the directory lists by that name (None: it lists none)."""
    with cells.use(cells.default()), db.connection() as conn:
        row = conn.execute("SELECT tenant_id FROM control.tenant_cells WHERE name = %s", (name,)).fetchone()
    return str(row[0]) if row else None


def release(tenant_id: str) -> None:
    """Give a reserved name back (the tenant was not made after all)."""
    with cells.use(cells.default()), db.connection() as conn:
        conn.execute("DELETE FROM control.tenant_cells WHERE tenant_id = %s", (tenant_id,))
    forget(tenant_id)


def tenants_by_cell() -> dict[str, list[str]]:
    """Every cell's tenants by name, in name order; a tenant the directory does not list is on the
    first cell (it predates the directory)."""
    held: dict[str, list[str]] = {c.name: [] for c in cells.all_cells()}
    listed: set[str] = set()
    with cells.use(cells.default()), db.connection() as conn:
        for name, cell in conn.execute("SELECT name, cell FROM control.tenant_cells"):
            held.setdefault(cell, []).append(name)
            listed.add(name)
        for (name,) in conn.execute("SELECT name FROM tenants"):
            if name not in listed:
                held[cells.default().name].append(name)
    return {cell: sorted(names) for cell, names in held.items()}


def report() -> list[dict]:
    """Every cell with its schema version (the highest table migration applied to its database)
    and its tenants' names, the default cell first."""
    by_cell = tenants_by_cell()
    found = []
    for cell in cells.each():
        with db.connection() as conn:
            version = conn.execute("SELECT max(version) FROM schema_migrations").fetchone()[0]
        found.append({"name": cell.name, "schema_version": version, "tenants": by_cell.get(cell.name, [])})
    return found
