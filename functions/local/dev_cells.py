"""The cells of a local server: how many its state dir remembers, and their databases.

`postbox dev --cells N` runs N cells, `cell-1` to `cell-N`, as N databases of one PostgreSQL
server: cell-1 is the server's database (the embedded server's `postbox`, or DATABASE_URL's) and
cell-k a sibling database `<that name>_cell_k`, created when missing. The processes get the cells
as AWS's functions do, in POSTBOX_CELLS (`postbox.cells`); one cell is exactly the runtime without
cells (no POSTBOX_CELLS at all).

The number is kept in the state dir (`cells.json`), so a restart and `postbox admin` given that
state dir see the same cells. A restart may add cells, or leave out empty ones at the end, but
never one that holds tenants (`TenantsHeld`).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import psycopg

from postbox import cells, config, db, directory, migrate

CELLS_FILE = "cells.json"
CELLS_ENV = "POSTBOX_CELLS"


class TenantsHeld(Exception):
    """A start with fewer cells than remembered would leave out cells that hold tenants."""


def name(k: int) -> str:
    return f"cell-{k}"


def remembered(state_dir: Path) -> int:
    """The number of cells the state dir's server runs (1 when it never said)."""
    path = state_dir / CELLS_FILE
    if not path.exists():
        return 1
    count = json.loads(path.read_text())["cells"]
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ValueError(f"{path}: `cells` must be a positive whole number, not {count!r}")
    return count


def remember(state_dir: Path, count: int) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / CELLS_FILE).write_text(json.dumps({"cells": count}) + "\n")


def database_urls(first_url: str, count: int) -> list[str]:
    """Each cell's database: the first is `first_url`'s, the k-th its sibling `<name>_cell_k`."""
    info = psycopg.conninfo.conninfo_to_dict(first_url)
    base = info.get("dbname") or info.get("user") or "postgres"
    return [first_url] + [psycopg.conninfo.make_conninfo(**{**info, "dbname": f"{base}_cell_{k}"})
                          for k in range(2, count + 1)]


def _ensure_database(first_url: str, url: str) -> None:
    """Create the database `url` names, on `first_url`'s server, unless it exists."""
    wanted = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
    with psycopg.connect(first_url, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (wanted,)).fetchone():
            return
        with contextlib.suppress(psycopg.errors.DuplicateDatabase):  # another process made it meanwhile
            conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(wanted)))


def use_cells(first_url: str, count: int) -> dict[str, list[str]]:
    """Point this process (and the processes it starts) at `count` cells on `first_url`'s server,
    each database created if missing and migrated; returns what each cell's migration applied."""
    urls = database_urls(first_url, count)
    for url in urls[1:]:
        _ensure_database(first_url, url)
    applied = {name(k): migrate.apply(url) for k, url in enumerate(urls, start=1)}
    os.environ["DATABASE_URL"] = first_url
    if count > 1:
        os.environ[CELLS_ENV] = json.dumps([{"name": name(k), "database_url": url}
                                            for k, url in enumerate(urls, start=1)])
    else:
        os.environ.pop(CELLS_ENV, None)
    config.reset()
    db.close_pool()
    directory.forget()
    return applied


def tenants_held(cell: cells.Cell) -> list[str]:
    """The tenants the cell holds, by name: those the directory places there and those its own
    database has."""
    listed = directory.tenants_by_cell().get(cell.name, [])
    with cells.use(cell), db.connection() as conn:
        own = [row[0] for row in conn.execute("SELECT name FROM tenants")]
    return sorted(set(listed) | set(own))


def choose(state_dir: Path, first_url: str, wanted: int | None) -> tuple[int, dict[str, list[str]]]:
    """Bring up the cells a start runs: `wanted` (None: as many as remembered), and remember them.
    Fewer than remembered leaves out the last ones only if they hold no tenants (TenantsHeld)."""
    before = remembered(state_dir)
    count = before if wanted is None else wanted
    if count < 1:
        raise ValueError(f"--cells must be 1 or more, not {count}")
    if count < before:
        use_cells(first_url, before)
        held = {c.name: tenants_held(c) for c in cells.all_cells()[count:]}
        held = {cell: names for cell, names in held.items() if names}
        if held:
            listing = "; ".join(f"{cell} holds {', '.join(names)}" for cell, names in held.items())
            last = max(int(cell.rpartition("-")[2]) for cell in held)
            raise TenantsHeld(f"{listing}: a restart never leaves out a cell that holds tenants;"
                              f" start with --cells {last} or more")
    applied = use_cells(first_url, count)
    remember(state_dir, count)
    return count, applied
