"""A mover killed (SIGKILL) at any step is continued by the next run, and the refusals."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from postbox import directory, moves
from postbox.errors import Conflict, Invalid, NotFound

ROOT = Path(__file__).resolve().parents[2]
KILLED = """
import os, signal, sys
from postbox import moves
def step(phase):
    if phase == sys.argv[3]:
        os.kill(os.getpid(), signal.SIGKILL)
moves.move(sys.argv[1], sys.argv[2], step=step)
"""


def _backlog(url: str, tenant_id: str, n: int) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        project = conn.execute("SELECT id FROM projects WHERE tenant_id = %s", (tenant_id,)).fetchone()[0]
        queue = conn.execute("INSERT INTO queues (queue_id, tenant_id, project_id, name) VALUES"
                             " (gen_random_uuid(), %s, %s, 'orders') RETURNING id", (tenant_id, project)).fetchone()[0]
        conn.execute("INSERT INTO queue_messages (queue_id, vt, read_ct, enqueued_at, message, size)"
                     " SELECT %s, now(), 0, now(), jsonb_build_object('n', g), 8 FROM generate_series(1, %s) g",
                     (queue, n))
    return queue


def _messages(url: str, queue: int) -> list[int]:
    with psycopg.connect(url) as conn:
        return [r[0] for r in conn.execute("SELECT (message->>'n')::int FROM queue_messages WHERE queue_id = %s"
                                           " ORDER BY msg_id", (queue,))]


@pytest.mark.parametrize("killed_at", ["copy queue_archive", "catch up", "check", "drain"])
def test_a_mover_killed_at_any_step_is_finished_by_the_next_run(two_cells, moving, killed_at):
    one, two = two_cells
    queue = _backlog(one, moving.id, 20_000)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "shared"), str(ROOT)])}
    run = subprocess.run([sys.executable, "-c", KILLED, moving.name, "cell-2", killed_at], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == -9, run.stderr
    with psycopg.connect(one) as conn:
        phase = conn.execute("SELECT phase FROM control.tenant_moves WHERE tenant_id = %s AND phase <> 'done'",
                             (moving.id,)).fetchone()
    assert phase is not None  # unfinished, recorded
    report = moves.move(moving.name, "cell-2")
    assert directory.cell_of(moving.id).name == "cell-2"
    assert _messages(two, queue) == list(range(1, 20_001))
    assert _messages(one, queue) == []
    assert report["tables"]["queue_messages"]["rows"] == 20_000


def test_a_move_is_refused_to_an_unknown_cell_or_its_own(two_cells, moving):
    with pytest.raises(Invalid, match="no cell named 'cell-9'"):
        moves.move(moving.name, "cell-9")
    with pytest.raises(Invalid, match="already on cell-1"):
        moves.move(moving.name, "cell-1")
    with pytest.raises(NotFound):
        moves.move("no-such-tenant-anywhere", "cell-2")


def test_a_move_is_refused_when_the_target_lacks_a_schema_version(two_cells, moving):
    one, _ = two_cells
    with psycopg.connect(one, autocommit=True) as conn:
        conn.execute("INSERT INTO schema_migrations (version, name) VALUES (9999, 'not_on_the_target')")
        try:
            with pytest.raises(Conflict, match="lacks schema versions 9999"):
                moves.move(moving.name, "cell-2")
        finally:
            conn.execute("DELETE FROM schema_migrations WHERE version = 9999")
        assert conn.execute("SELECT count(*) FROM control.tenant_moves WHERE tenant_id = %s",
                            (moving.id,)).fetchone()[0] == 0


def test_a_second_mover_is_refused_while_one_runs(two_cells, moving):
    one, _ = two_cells
    with psycopg.connect(one, autocommit=True) as running:
        running.execute("SELECT pg_advisory_lock(4242, hashtext(%s))", (moving.id,))
        with pytest.raises(Conflict, match="already running"):
            moves.move(moving.name, "cell-2")


def test_the_migrate_function_moves_a_tenant_and_refuses_by_name(two_cells, moving):
    from functions.local.lambda_context import LocalContext
    from functions.migrate import handler

    ctx = LocalContext("migrate")
    assert "missing field 'cell'" in handler({"action": "tenant-move", "tenant": moving.name}, ctx)["error"]
    assert "no cell named 'cell-9'" in handler({"action": "tenant-move", "tenant": moving.name, "cell": "cell-9"},
                                                ctx)["error"]
    out = handler({"action": "tenant-move", "tenant": moving.name, "cell": "cell-2"}, ctx)
    assert out["moved"]["to"] == "cell-2" and out["moved"]["from"] == "cell-1", out
    assert directory.cell_of(moving.id).name == "cell-2"
