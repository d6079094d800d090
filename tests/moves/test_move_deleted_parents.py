"""A parent deleted on the source while its tenant moves (a queue deleted with messages waiting,
a work scope with its queues and messages) leaves no orphan on the target."""

from __future__ import annotations

import psycopg

from postbox import directory, moves, tenancy
from postbox.queues import service
from postbox.work import messages, queues, scopes

# Rows of the tenant's children whose parent is gone, on one cell.
_ORPHANS = """
SELECT (SELECT count(*) FROM queue_messages m WHERE m.queue_id = ANY(%(queues)s)
          AND NOT EXISTS (SELECT 1 FROM queues q WHERE q.id = m.queue_id))
     + (SELECT count(*) FROM queue_archive a WHERE a.queue_id = ANY(%(queues)s)
          AND NOT EXISTS (SELECT 1 FROM queues q WHERE q.id = a.queue_id))
     + (SELECT count(*) FROM work_messages m WHERE m.tenant_id = %(tenant)s
          AND NOT EXISTS (SELECT 1 FROM work_queues q WHERE q.id = m.queue_id))
     + (SELECT count(*) FROM work_queues q WHERE q.tenant_id = %(tenant)s
          AND NOT EXISTS (SELECT 1 FROM work_scopes s WHERE s.id = q.scope_id))
"""


def test_parents_deleted_during_a_move_leave_no_orphans_on_the_target(two_cells, moving):
    one, two = two_cells
    p = tenancy.resolve_key(moving.key)
    with directory.at(moving.id):
        service.create_queue(p, "doomed", {})
        service.send_messages(p, "doomed", list(range(50)))
        service.archive_messages(p, "doomed", service.send_messages(p, "doomed", list(range(5))))
        service.create_queue(p, "kept", {})
        service.send_messages(p, "kept", list(range(3)))
        s = scopes.create_scope(p, {"slug": "doomed"})
        q = queues.create_queue(p, s["id"], {"slug": "jobs"})["id"]
        for i in range(20):
            messages.publish(p, s["id"], q, {"body": i})
    with psycopg.connect(one) as conn:
        doomed = [r[0] for r in conn.execute("SELECT id FROM queues WHERE tenant_id = %s", (moving.id,))]

    def step(phase: str) -> None:
        if phase == "catch up" and not deleted:  # copied whole already: the deletions come by the catch-up
            with directory.at(moving.id):
                service.delete_queue(p, "doomed")
                scopes.transition(p, s["id"], "archive")  # (a scope is deleted once archived)
                scopes.delete_scope(p, s["id"])
            deleted.append(True)

    deleted: list[bool] = []
    moves.move(moving.name, "cell-2", step=step)
    assert deleted
    with psycopg.connect(two) as conn:
        assert conn.execute(_ORPHANS, {"queues": doomed, "tenant": moving.id}).fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM queues WHERE tenant_id = %s", (moving.id,)).fetchone()[0] == 1
        assert conn.execute("SELECT count(*) FROM work_scopes WHERE tenant_id = %s", (moving.id,)).fetchone()[0] == 0
    with directory.at(moving.id):
        assert service.queue_metrics(p, "kept")["queue_length"] == 3

