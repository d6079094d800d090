"""A moved work queue's depths and totals: exactly the source's, and exact afterwards.

A work queue's figures are its counter rows plus the moves of the journal rows the fold has not
added yet, told apart by transaction ids that only mean something on their own cell (the fold's
mark). So the journal is copied with every row already counted (`moved` NULL: see tables.py) and,
under the fence, the target's counters of the tenant's queues are replaced by one row a queue
holding what `work_queue_depths` answers on the source: the target's fold has nothing of the
tenant's to add until the tenant writes there, and its reads add nothing unfolded. The check
compares those figures on both sides, not the counter rows (which then differ by construction).
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from .tables import Table

SETTLED = frozenset({"work_queue_counters"})  # compared by their figures, not row by row
_FOLD_SLOT = 8  # the fold's own slot: no hot path writes it
_FIGURES = ("SELECT queue_id, pending, claimed, published, completed, dead_lettered"
            " FROM work_queue_depths(%s::bigint[]) ORDER BY queue_id")


def _table(tables: list[Table], name: str) -> Table | None:
    return next((t for t in tables if t.name == name), None)


def _queues(conn: psycopg.Connection, tables: list[Table]) -> list[int]:
    queues = _table(tables, "work_queues")
    if queues is None:
        return []
    return [r[0] for r in conn.execute(sql.SQL("SELECT id FROM work_queues WHERE {}").format(sql.SQL(queues.where)))]


def figures(conn: psycopg.Connection, tables: list[Table]) -> dict[int, tuple[int, ...]]:
    """Each of the tenant's work queues' exact figures (a queue whose figures are all 0 left out)."""
    ids = _queues(conn, tables)
    if not ids:
        return {}
    return {r[0]: tuple(int(v) for v in r[1:]) for r in conn.execute(_FIGURES, (ids,)) if any(r[1:])}


def settle(src: psycopg.Connection, dst: psycopg.Connection, tables: list[Table]) -> None:
    """Under the fence: the target's counters of the tenant's queues become the source's exact
    figures, one row a queue (idempotent: a mover killed after it does it again)."""
    counters = _table(tables, "work_queue_counters")
    if counters is None:
        return
    exact = figures(src, tables)
    with dst.transaction():
        dst.execute(sql.SQL("DELETE FROM work_queue_counters WHERE {}").format(sql.SQL(counters.where)))
        if exact:
            with dst.cursor() as cur:
                cur.executemany(
                    "INSERT INTO work_queue_counters (queue_id, slot, pending, claimed, published, completed,"
                    " dead_lettered) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                    [(queue, _FOLD_SLOT, *values) for queue, values in exact.items()])


def differ(src: psycopg.Connection, dst: psycopg.Connection, tables: list[Table]) -> list[str]:
    """The counter tables whose figures differ between source and target (the check's part)."""
    if _table(tables, "work_queue_counters") is None:
        return []
    return [] if figures(src, tables) == figures(dst, tables) else ["work_queue_counters"]
