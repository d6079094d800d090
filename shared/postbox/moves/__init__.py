"""Moving a tenant live from one cell to another (`postbox admin tenant-move TENANT --to CELL`).

The copy is our own, on plain SQL (docs/scale.md says why not logical replication): triggers on
the source log the keys of the tenant's rows that change (capture), each table is copied whole,
then catch-up passes copy again what changed, until little is left. Then a short write freeze: a
fence refuses the tenant's writes on the source (503 with Retry-After), the last changes are
copied, counts and checksums compared table by table, the target's sequences raised, and the
directory flipped. Meanwhile the target skips every write of the tenant's rows but the mover's
(its agents sweep every tenant: they must not deliver or sweep the copy). After the directory
cache's staleness bound the source's rows are deleted and the triggers dropped.

Every phase is recorded in the first cell's `control.tenant_moves`, and each step is idempotent, so
a mover killed anywhere is continued by the next run; a session advisory lock on the first cell
says a mover is running (a second one is refused while it lives).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psycopg

from .. import cell_ids, cells, config, db, directory, tenancy
from ..errors import Conflict, Invalid, NotFound
from ..queues import retention
from . import copying, counters, triggers
from .tables import Table, tables

CATCH_UP_PASSES = 20  # at most, before the freeze
FREEZE_BELOW = 2_000  # logged keys left after a pass: few enough to copy during the freeze
_LOCK_CLASS = 4242  # advisory locks of moves: (class, hashtext(tenant id))

Step = Callable[[str], None]


def _connect(cell: cells.Cell, *, writing: bool = False) -> psycopg.Connection:
    """The mover's own connection to a cell (outside the pool). On the target (`writing`) the
    copied rows fire none of its triggers, as a replica's: the rows come with their counters."""
    conn = psycopg.connect(db.conninfo(cell), autocommit=True)
    conn.execute("SET TIME ZONE 'UTC'")  # rows compared as text read alike on both sides
    if writing:
        conn.execute("SET session_replication_role = replica")
    return conn


def _versions(conn: psycopg.Connection) -> set[str]:
    return {str(r[0]) for r in conn.execute("SELECT version FROM schema_migrations")}


def move(tenant: str, to: str, *, step: Step | None = None) -> dict[str, Any]:
    """Move `tenant` (its name or id) to cell `to`, or continue the unfinished move of it there.
    `step(phase)` is called as each phase starts (progress lines; tests stop the mover there)."""
    say = step or (lambda phase: None)
    target = directory.named_cell(to)
    tenant_id = tenancy.tenant_id_of(tenant)
    with _connect(cells.default()) as control:
        if not control.execute("SELECT pg_try_advisory_lock(%s, hashtext(%s))", (_LOCK_CLASS, tenant_id)).fetchone()[0]:
            raise Conflict(f"a move of tenant {tenant} is already running", code="move_running")
        row = control.execute("SELECT id, source, target FROM control.tenant_moves WHERE tenant_id = %s"
                              " AND phase <> 'done'", (tenant_id,)).fetchone()
        if row is None:
            move_id, source = _start(control, tenant_id, target)
        else:
            move_id, source_name, target_name = row
            if target_name != target.name:
                raise Conflict(f"tenant {tenant} is being moved to {target_name}; that move must finish first",
                               code="move_running")
            source = directory.named_cell(source_name)
        with _connect(source) as src, _connect(target, writing=True) as dst:
            return _run(control, src, dst, move_id, tenant_id, source, target, say)


def _start(control: psycopg.Connection, tenant_id: str, target: cells.Cell) -> tuple[int, cells.Cell]:
    """The refusals, then the move's row: the tenant must be on another cell than the target, and
    the target must have every schema version the source has."""
    directory.forget(tenant_id)
    source = directory.cell_of(tenant_id)
    if source.name == target.name:
        raise Invalid(f"the tenant is already on {target.name}", code="same_cell")
    with _connect(source) as src, _connect(target) as dst:
        if src.execute("SELECT 1 FROM tenants WHERE id = %s", (tenant_id,)).fetchone() is None:
            raise NotFound(f"tenant {tenant_id} is not on {source.name}")
        missing = _versions(src) - _versions(dst)
        if missing:
            raise Conflict(f"cell {target.name} lacks schema versions {', '.join(sorted(missing))} that"
                           f" {source.name} has: migrate it first", code="schema_version")
    move_id = control.execute("INSERT INTO control.tenant_moves (tenant_id, source, target) VALUES (%s, %s, %s)"
                              " RETURNING id", (tenant_id, source.name, target.name)).fetchone()[0]
    return move_id, source


def _phase(control: psycopg.Connection, move_id: int, phase: str, **stamps: Any) -> None:
    extra = "".join(f", {name} = clock_timestamp()" for name in stamps)
    control.execute(f"UPDATE control.tenant_moves SET phase = %s, updated_at = clock_timestamp(){extra}"
                    " WHERE id = %s", (phase, move_id))


def _run(control: psycopg.Connection, src: psycopg.Connection, dst: psycopg.Connection, move_id: int,
         tenant_id: str, source: cells.Cell, target: cells.Cell, say: Step) -> dict[str, Any]:
    owned = tables(src, tenant_id)
    phase, copied = control.execute("SELECT phase, copied FROM control.tenant_moves WHERE id = %s",
                                    (move_id,)).fetchone()
    report: dict[str, Any] = {"tenant": tenant_id, "from": source.name, "to": target.name, "move": move_id}
    if phase in ("copying", "catching_up", "frozen"):  # the target's agents leave the copy alone until the check
        triggers.install_arrival(dst, move_id, owned, tenant_id)
    if phase == "copying":
        cell_ids.number(target)  # a cell that holds no tenant yet takes its number: its ids are its own
        say("capture")
        triggers.install_capture(src, move_id, owned)
        for table in owned:
            if table.name in copied:
                continue
            say(f"copy {table.name}")
            copying.copy_table(src, dst, table)
            control.execute("UPDATE control.tenant_moves SET copied = array_append(copied, %s),"
                            " updated_at = clock_timestamp() WHERE id = %s", (table.name, move_id))
        _phase(control, move_id, phase := "catching_up")
    if phase == "catching_up":
        for _ in range(CATCH_UP_PASSES):
            say("catch up")
            copying.apply_pass(src, dst, move_id, owned)
            if copying.pending(src, move_id) < FREEZE_BELOW:
                break
        _phase(control, move_id, phase := "frozen", frozen_at=True)
    if phase == "frozen":
        report.update(_freeze_and_flip(control, src, dst, move_id, tenant_id, target, owned, say))
        phase = "flipped"
    if phase == "flipped":
        say("drain")
        triggers.remove(src, move_id, owned, "capture")
        triggers.remove(dst, move_id, owned, "arrival")  # (gone already, unless a crash came between)
        wait = control.execute("SELECT extract(epoch FROM flipped_at + make_interval(secs => %s) - clock_timestamp())"
                               " FROM control.tenant_moves WHERE id = %s",
                               (config.settings().cell_cache_seconds, move_id)).fetchone()[0]
        if wait and wait > 0:  # a function's cached cell may still name the source until then
            time.sleep(float(wait))
        report["drained_rows"] = copying.drain(src, owned)
        triggers.remove(src, move_id, owned, "fence")
        src.execute("DELETE FROM control.tenant_move_changes WHERE move_id = %s", (move_id,))
        _phase(control, move_id, "done", finished_at=True)
    row = control.execute("SELECT report, extract(epoch FROM flipped_at - frozen_at),"
                          " extract(epoch FROM finished_at - started_at) FROM control.tenant_moves WHERE id = %s",
                          (move_id,)).fetchone()
    report.update(row[0], freeze_s=float(row[1] or 0), duration_s=float(row[2] or 0))
    say("done")
    return report


def _freeze_and_flip(control: psycopg.Connection, src: psycopg.Connection, dst: psycopg.Connection,
                     move_id: int, tenant_id: str, target: cells.Cell, owned: list[Table], say: Step) -> dict:
    say("freeze")
    triggers.install_fence(src, move_id, owned, tenant_id)  # the freeze counts from before: writers wait for it
    while copying.apply_pass(src, dst, move_id, owned):
        pass
    counters.settle(src, dst, owned)  # the work queues' figures, exact on the target (see counters.py)
    say("check")
    figures, differ = copying.check(src, dst, owned)
    if differ:  # give the tenant its writes back and copy again from the catch-up
        triggers.remove(src, move_id, owned, "fence")
        _phase(control, move_id, "catching_up")
        raise Conflict(f"the copy differs from the source in {', '.join(differ)}; run the move again to"
                       " copy them again", code="move_check")
    cell_ids.advance_sequences(dst, cell_ids.positions(src))  # its next ids follow the ones it brought
    retention.forget_marks(dst)  # the archive's ids it brought are above the marks taken before
    triggers.remove(dst, move_id, owned, "arrival")  # the copy is the tenant's now (its source fenced)
    say("flip")
    name = src.execute("SELECT name FROM tenants WHERE id = %s", (tenant_id,)).fetchone()[0]
    with control.transaction():
        control.execute("INSERT INTO control.tenant_cells (tenant_id, name, cell) VALUES (%s, %s, %s)"
                        " ON CONFLICT (tenant_id) DO UPDATE SET cell = EXCLUDED.cell, placed_at = clock_timestamp()",
                        (tenant_id, name, target.name))
        control.execute("UPDATE control.tenant_moves SET phase = 'flipped', flipped_at = clock_timestamp(),"
                        " updated_at = clock_timestamp(), report = %s WHERE id = %s",
                        (psycopg.types.json.Jsonb({"tables": figures}), move_id))
    directory.forget(tenant_id)
    return {}
