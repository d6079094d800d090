"""Cells: independent databases, each holding whole tenants, and which one a unit of work runs on.

A cell is one PostgreSQL database (on AWS, one Aurora cluster) with the whole schema and its own
agents. A deployment has one or more; the first is the default and holds the directory (the
`control` schema: which cell holds which tenant). A deployment that names no cells has one, built
from the database settings it always had, and behaves exactly as before: no directory lookups.

The cell a unit of work runs on is a context variable: `db` connects to `current()`. A request
starts on the default cell and moves to its tenant's cell as soon as the tenant is known
(`directory.route(tenant_id)`, after its key is resolved); an agent runs once per cell (`each()`).
Finding
a key or an SQS credential, which may live on any cell, asks the cells in turn (`first`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import NamedTuple, TypeVar

from . import config

T = TypeVar("T")

CELL_NAME = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
_FIELDS = ("name", "database_url", "db_host", "db_secret_arn", "listen_host", "region", "weight", "secrets_endpoint")


class Cell(NamedTuple):
    """Where one cell's database is: a URL (local, tests) or, on AWS, its proxy endpoint, its
    secret and its cluster endpoint for LISTEN (the user, port, database name and IAM login are the
    deployment's, the same on every cell). A cell in another region than the functions' names it:
    its IAM tokens are signed for it and its secret read there, through `secrets_endpoint` when set
    (that region's Secrets Manager as the functions' VPC reaches it: over the peering)."""

    name: str
    database_url: str | None = None
    db_host: str | None = None
    db_secret_arn: str | None = None
    listen_host: str | None = None
    region: str | None = None  # None: the deployment's (config.settings().region)
    weight: float = 1.0  # its share of the deployment's capacity: new tenants go where there is most room
    secrets_endpoint: str | None = None


_read: tuple[config.Settings, tuple[Cell, ...]] | None = None  # the settings read, and their cells


def all_cells() -> tuple[Cell, ...]:
    """The deployment's cells, the default first: POSTBOX_CELLS (a JSON list of objects with a
    `name` and where the cell's database is), else one cell from the database settings. Read again
    when the settings are (`config.reset()`); every unit of work asks, so the check is by identity."""
    global _read
    s = config.settings()
    read = _read
    if read is None or read[0] is not s:
        read = _read = (s, _cells(s))
    return read[1]


def _cells(s: config.Settings) -> tuple[Cell, ...]:
    if not s.cells:
        return (Cell(s.cell_name, s.database_url, s.db_host, s.db_secret_arn, s.listen_host, s.region),)
    try:
        listed = json.loads(s.cells)
    except ValueError as e:
        raise RuntimeError(f"POSTBOX_CELLS is not JSON: {e}") from None
    if not isinstance(listed, list) or not listed:
        raise RuntimeError("POSTBOX_CELLS must be a non-empty JSON list of cells")
    found: list[Cell] = []
    for item in listed:
        if not isinstance(item, dict) or set(item) - set(_FIELDS) or not isinstance(item.get("name"), str):
            raise RuntimeError(f"a cell in POSTBOX_CELLS is an object with a name and {', '.join(_FIELDS[1:])}")
        if not CELL_NAME.match(item["name"]) or any(c.name == item["name"] for c in found):
            raise RuntimeError(f"cell name {item['name']!r} is taken or not [a-z][a-z0-9-]*")
        weight = item.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, int | float) or weight <= 0:
            raise RuntimeError(f"cell {item['name']}: weight must be a positive number")
        found.append(Cell(**item))
    return tuple(found)


def default() -> Cell:
    """The first cell: new connections go here until a tenant is known; it holds the directory."""
    return all_cells()[0]


def several() -> bool:
    return len(all_cells()) > 1


def named(name: str) -> Cell:
    for cell in all_cells():
        if cell.name == name:
            return cell
    raise KeyError(name)


_current: ContextVar[Cell | None] = ContextVar("postbox_cell", default=None)


def current() -> Cell:
    return _current.get() or default()


@contextmanager
def use(cell: Cell | str) -> Iterator[Cell]:
    """Run the block on `cell` (a Cell or its name), then go back to where it was."""
    chosen = named(cell) if isinstance(cell, str) else cell
    token = _current.set(chosen)
    try:
        yield chosen
    finally:
        _current.reset(token)


def move_to(cell: Cell) -> None:
    """The rest of the current scope runs on `cell` (see `scope`)."""
    _current.set(cell)


@contextmanager
def scope() -> Iterator[None]:
    """A unit of work's own choice of cell: whatever `route` picks inside it ends with the block (a
    thread of the local server serves one request after another)."""
    token = _current.set(None)
    try:
        yield
    finally:
        _current.reset(token)


def each() -> Iterator[Cell]:
    """Every cell in turn, the block's work running on it (an agent's sweep, a schema migration)."""
    for cell in all_cells():
        with use(cell):
            yield cell


def first(find: Callable[[], T | None]) -> T | None:
    """What `find` finds on the first cell that has it (a key, a credential: they live with their
    tenant, on any cell), the default cell asked first; None when no cell has it."""
    if not several():
        return find()
    for cell in all_cells():
        with use(cell):
            found = find()
        if found is not None:
            return found
    return None
