"""Ids that never collide across cells, and keep growing for a tenant that moves.

Every sequence of a cell steps by STRIDE (64) times its block (1; 1,024 for the work journal, whose
rows take a block of ids each) and hands out only values whose remainder is the cell's number times
the block. A cell's number (0 to 63) is given once: the first cell is 0 (a database that was never
numbered hands out 0's values), another cell takes the smallest free one from the first cell's
register when a tenant is first placed on it (`number`), its sequences then starting past
everything the first cell handed out (ids made before cells existed have any remainder).

So a moved tenant's rows keep their ids on the target. After copying them, the mover raises the
target's sequences past the source's (`advance_sequences(target, positions(source))`), keeping the
target's remainders, so the tenant's new ids sort after its old ones where a surface orders by id:
queues deliver by msg_id, the work surface claims by seq and reads its events by journal seq.

The hot path is unchanged: a nextval with a step of 64 is the same call as with 1.
"""

from __future__ import annotations

from collections.abc import Mapping

import psycopg
from psycopg import sql

from . import cells, db

STRIDE = 64
_LOCK = 0x63656C6C6964  # "cellid": one numbering at a time, per database

_SEQUENCES = """
SELECT c.oid::regclass::text, q.seqincrement
  FROM pg_sequence q JOIN pg_class c ON c.oid = q.seqrelid
 WHERE c.relnamespace = 'public'::regnamespace
 ORDER BY 1
"""


def steps(conn: psycopg.Connection) -> dict[str, int]:
    """Every sequence of the schema and its step."""
    return dict(conn.execute(_SEQUENCES).fetchall())


def _next_values(conn: psycopg.Connection) -> dict[str, tuple[int, int]]:
    """(the next value, the step) of every sequence, read without drawing one."""
    found = steps(conn)
    if not found:
        return {}
    parts = [
        sql.SQL("SELECT {}, CASE WHEN is_called THEN last_value + {} ELSE last_value END FROM {}").format(
            sql.Literal(name), sql.Literal(step), sql.SQL(name))
        for name, step in found.items()
    ]
    rows = conn.execute(sql.SQL(" UNION ALL ").join(parts)).fetchall()
    return {name: (value, found[name]) for name, value in rows}


def positions(conn: psycopg.Connection) -> dict[str, int]:
    """Every sequence's newest value handed out (below its first value when it handed out none):
    the floors a move gives the target's sequences."""
    return {name: value - step for name, (value, step) in _next_values(conn).items()}


def advance_sequences(conn: psycopg.Connection, floors: Mapping[str, int]) -> dict[str, int]:
    """Raise each named sequence so that it hands out only values above its floor, keeping its
    remainder (the cell's); one already above its floor only draws one value. One round trip, safe
    while the cell serves requests. Returns each one's newest value. KeyError for a name the schema
    has no sequence of."""
    unknown = sorted(set(floors) - set(steps(conn)))
    if unknown:
        raise KeyError(f"no sequence {', '.join(unknown)}")
    names = sorted(floors)
    rows = conn.execute(
        "SELECT s, cell_sequence_raise(s::regclass, f) FROM unnest(%s::text[], %s::bigint[]) AS x(s, f)",
        (names, [floors[n] for n in names]),
    ).fetchall()
    return dict(rows)


def number_of(conn: psycopg.Connection) -> int:
    """This cell's number (0 until it is given one)."""
    row = conn.execute("SELECT number FROM control.cell_identity").fetchone()
    return row[0] if row else 0


def problems(conn: psycopg.Connection) -> list[str]:
    """The sequences that could hand out an id another cell hands out: a step that is not a
    multiple of STRIDE, or a next value whose remainder is not this cell's."""
    k = number_of(conn)
    wrong = []
    for name, (value, step) in sorted(_next_values(conn).items()):
        if step % STRIDE:
            wrong.append(f"{name}: steps by {step}, not a multiple of {STRIDE} (its ids would meet another cell's)")
        elif value % step != k * (step // STRIDE):
            wrong.append(f"{name}: its next value {value} is not cell {k}'s (remainder {k * (step // STRIDE)})")
    return wrong


_numbered: dict[cells.Cell, int] = {}


def number(cell: cells.Cell) -> int:
    """Give `cell` its number, once (the first cell 0, another the smallest free one, from the first
    cell's register), and move its sequences to that number's values past everything the first cell
    handed out. Returns the number; cheap once done in this process."""
    if cell in _numbered:
        return _numbered[cell]
    first = cells.default()
    with cells.use(first), db.transaction() as conn:
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
        row = conn.execute("SELECT number FROM control.cell_numbers WHERE cell = %s", (cell.name,)).fetchone()
        if row is None:
            free = 0 if cell.name == first.name else conn.execute(
                "SELECT min(n) FROM generate_series(1, %s - 1) n"
                " WHERE n NOT IN (SELECT number FROM control.cell_numbers)", (STRIDE,)).fetchone()[0]
            if free is None:
                raise RuntimeError(f"cell {cell.name}: all {STRIDE} cell numbers are taken")
            conn.execute("INSERT INTO control.cell_numbers (number, cell) VALUES (%s, %s)", (free, cell.name))
            row = (free,)
        k = row[0]
        floors = positions(conn) if cell.name != first.name else {}
    with cells.use(cell), db.transaction() as conn:
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
        held = conn.execute("SELECT cell, number FROM control.cell_identity").fetchone()
        if held is not None and tuple(held) != (cell.name, k):
            raise RuntimeError(f"cell {cell.name}'s database says it is cell {held[0]!r} number {held[1]},"
                               f" the register gives it {k}")
        if held is None:
            for name, step in steps(conn).items():
                conn.execute("SELECT cell_sequence_raise(%s::regclass, %s, %s)",
                             (name, floors.get(name, 0), k * (step // STRIDE)))
            conn.execute("INSERT INTO control.cell_identity (cell, number) VALUES (%s, %s)", (cell.name, k))
    _numbered[cell] = k
    return k
