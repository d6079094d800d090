"""The target cell's agents leave a moving tenant's copied rows alone until the move's check passed
(no delivery, no retention or visibility sweep: the copy would be delivered twice, or differ from
the source and fail the check forever), and act on them as they would have once the tenant is there."""

from __future__ import annotations

import psycopg

from postbox import cells, directory, moves, tenancy
from postbox.queues import consumers, retention, service
from postbox.work import messages, queues, scopes, sweeps


def _ran_on_the_target(delivered: list) -> dict[str, int]:
    """Each agent's run on the target cell, as its schedule would run it there."""

    def invoke(tenant_id, function_name, payload):
        delivered.extend(m["message"] for m in payload["messages"])

    with cells.use("cell-2"):
        return {"retention": retention.sweep(), "released": sweeps.recover_claims(),
                "dispatched": consumers.dispatch(invoke, budget_s=2)}


def test_the_targets_agents_leave_a_moving_tenants_rows_alone_until_the_check(two_cells, moving):
    one, two = two_cells
    p = tenancy.resolve_key(moving.key)
    with directory.at(moving.id):
        service.create_queue(p, "pushed", {"visibility_timeout_sec": 1, "consumer": {"function_name": "mover-fn"}})
        service.send_messages(p, "pushed", list(range(5)))
        service.create_queue(p, "kept", {"retention_days": 1})
        service.archive_messages(p, "kept", service.send_messages(p, "kept", list(range(10))))
        s = scopes.create_scope(p, {"slug": "claims"})
        q = queues.create_queue(p, s["id"], {"slug": "jobs"})["id"]
        for i in range(3):
            messages.publish(p, s["id"], q, {"body": i})
        messages.claim(p, s["id"], q, 3, 600)
    with psycopg.connect(one, autocommit=True) as conn:  # the archive past retention, the claims run out
        conn.execute("UPDATE queue_archive a SET archived_at = archived_at - interval '2 days' FROM queues q"
                     " WHERE q.id = a.queue_id AND q.tenant_id = %s", (moving.id,))
        conn.execute("UPDATE work_messages SET visible_at = clock_timestamp() - interval '1 s' WHERE queue_id ="
                     " (SELECT id FROM work_queues WHERE queue_id = %s)", (q,))

    with psycopg.connect(two, autocommit=True) as conn:  # a retention run there an hour ago, its ids below the copy's
        conn.execute("INSERT INTO queue_archive_marks VALUES (clock_timestamp() - interval '1 hour', 0)")

    delivered: list = []
    during: list[dict] = []

    def step(phase: str) -> None:
        if phase in ("catch up", "check"):  # the copy is on the target, the directory names the source
            during.append(_ran_on_the_target(delivered))

    moves.move(moving.name, "cell-2", step=step)  # the check passes: the copy was left as copied
    assert delivered == [], "the target delivered a copied message before the flip"
    with psycopg.connect(two) as conn:
        assert conn.execute("SELECT count(*) FROM queue_archive a JOIN queues q ON q.id = a.queue_id"
                            " WHERE q.tenant_id = %s", (moving.id,)).fetchone()[0] == 10
    with directory.at(moving.id):
        assert queues.stats(p, s["id"], q)["depth_claimed"] == 3
    after = _ran_on_the_target(delivered)  # now the tenant's: as they would have
    assert after["retention"] >= 10 and after["released"] >= 3
    assert sorted(delivered) == list(range(5))
    with directory.at(moving.id):
        assert queues.stats(p, s["id"], q)["depth_pending"] == 3
        assert service.queue_metrics(p, "kept")["archived"] == 0
