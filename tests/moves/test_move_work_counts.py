"""A moved work queue answers exactly the figures it had on the source, and stays exact on the target
(its fold running, more traffic); the scope's `_events` hold every event exactly once."""

from __future__ import annotations

from collections import Counter

from postbox import directory, moves, tenancy
from postbox.db import connection
from postbox.work import browse, messages, queues, scopes, sweeps

# A queue's depths and totals as a recount of its messages (none is archived in this test).
_RECOUNT = """
SELECT count(*) FILTER (WHERE ended_at IS NULL AND state = 'pending'),
       count(*) FILTER (WHERE ended_at IS NULL AND state = 'claimed'),
       count(*), count(*) FILTER (WHERE state = 'completed'), count(*) FILTER (WHERE state = 'dead_lettered')
FROM work_messages WHERE queue_id = (SELECT id FROM work_queues WHERE queue_id = %s)
"""
_FIELDS = ("depth_pending", "depth_claimed", "published_total", "completed_total", "dead_lettered_total")


def _figures(p, scope, queue) -> tuple[int, ...]:
    found = queues.stats(p, scope, queue)
    return tuple(found[f] for f in _FIELDS)


def _recount(queue) -> tuple[int, ...]:
    with connection() as conn:
        return tuple(conn.execute(_RECOUNT, (queue,)).fetchone())


def _traffic(p, scope, queue, n: int) -> None:
    """n messages: some left pending, some claimed, completed, failed (retried), dead-lettered."""
    for i in range(n):
        messages.publish(p, scope, queue, {"body": i})
    claimed = messages.claim(p, scope, queue, n * 3 // 4, 600)
    for m in claimed[: n // 4]:
        messages.finish(p, scope, m["id"], "complete", {"claim_token": m["claim_token"]})
    for m in claimed[n // 4: n // 2]:  # max_retries 1: a failure ends it in the dead letters
        messages.finish(p, scope, m["id"], "fail", {"claim_token": m["claim_token"], "reason": "no"})


def _events(p, scope) -> Counter:
    seen: Counter = Counter()
    cursor = None
    while True:
        page, cursor = browse.list_messages(p, scope["id"], scope["system_queues"]["_events"], None, limit=200,
                                            cursor=cursor)
        seen.update((e["body"]["event_type"], e["body"]["payload"]["message_id"]) for e in page)
        if not cursor:
            return seen


def test_work_figures_and_events_are_exact_after_a_move_and_stay_exact(two_cells, moving):
    p = tenancy.resolve_key(moving.key)
    with directory.at(moving.id):
        s = scopes.create_scope(p, {"slug": "moving", "emit_events": ["published"]})
        free = queues.create_queue(p, s["id"], {"slug": "free", "max_retries": 1})["id"]
        bounded = queues.create_queue(p, s["id"], {"slug": "bounded", "max_retries": 1, "max_depth": 1000})["id"]
        watched = [free, bounded, s["system_queues"]["_dead_letter"]]
        for q in (free, bounded):
            _traffic(p, s["id"], q, 40)
        sweeps.fold_counts()  # some of the journal folded on the source, the rest not yet
        assert sum(_events(p, s).values()) > 0  # some events materialised on the source, the rest not yet
        for q in (free, bounded):
            _traffic(p, s["id"], q, 20)
        before = {q: _figures(p, s["id"], q) for q in watched}
        assert before[free] == _recount(free) and before[free][0] and before[free][1] and before[free][4]

    moves.move(moving.name, "cell-2")

    with directory.at(moving.id):
        assert {q: _figures(p, s["id"], q) for q in watched} == before
        sweeps.fold_counts()  # the target's fold: adds nothing of what came with the move
        assert {q: _figures(p, s["id"], q) for q in watched} == before
        for q in (free, bounded):
            _traffic(p, s["id"], q, 20)
        for q in (free, bounded):
            assert _figures(p, s["id"], q) == _recount(q)
        sweeps.fold_counts()
        for q in (free, bounded):
            assert _figures(p, s["id"], q) == _recount(q)
        seen = _events(p, s)
        assert seen and max(seen.values()) == 1, "an event materialised twice"
        with connection() as conn:
            published = conn.execute("SELECT count(*) FROM work_messages m JOIN work_queues q ON q.id = m.queue_id"
                                     " WHERE q.scope_id = %s AND NOT q.is_system", (s["id"],)).fetchone()[0]
        assert sum(1 for kind, _ in seen if kind == "scaiqueue.message.published") == published == 160


def test_the_sources_fold_waits_out_the_fence_and_loses_no_count(two_cells, moving):
    """Under the fence the source's fold cannot write the moving tenant's counters: it folds nothing
    (no agent error for the cell's other tenants, the mark kept), and the next fold after it does."""
    p = tenancy.resolve_key(moving.key)
    with directory.at(moving.id):
        s = scopes.create_scope(p, {"slug": "fenced"})
        q = queues.create_queue(p, s["id"], {"slug": "jobs"})["id"]
    other = tenancy.resolve_key(tenancy.create_key(tenancy.create_tenant(f"stay-{moving.name}", cell="cell-1"),
                                                   "manage").key)
    with directory.at(other.tenant_id):
        sweeps.fold_counts()
        t = scopes.create_scope(other, {"slug": "staying"})
        r = queues.create_queue(other, t["id"], {"slug": "jobs"})["id"]
    folded: list[int] = []

    def step(phase: str) -> None:
        if phase == "check":  # under the fence, on the source
            with directory.at(other.tenant_id):
                messages.publish(other, t["id"], r, {"body": "staying"})
                folded.append(sweeps.fold_counts())

    with directory.at(moving.id):
        messages.publish(p, s["id"], q, {"body": "moving"})  # not folded before the fence
    moves.move(moving.name, "cell-2", step=step)
    assert folded == [0]
    with directory.at(other.tenant_id):
        assert sweeps.fold_counts() >= 1  # the fence is gone: what waited is folded now
        assert _figures(other, t["id"], r) == _recount(r) == (1, 0, 1, 0, 0)
    with directory.at(moving.id):
        assert _figures(p, s["id"], q) == _recount(q) == (1, 0, 1, 0, 0)
