"""The queues' counters folded from the journal, on real PostgreSQL: under threads that publish (one
at a time and in batches), claim, complete, fail and release at once while two folds run and backends
are killed mid-call and mid-fold, every depth read equals a recount of the messages in the same
snapshot, and the counters the fold leaves equal a recount once everything has ended."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

import psycopg

from postbox import db
from postbox.errors import PostboxError
from postbox.work import messages, queues, scopes, sweeps

# Each queue of the scope: what its depths and totals answer (exact at the read: the counters and
# the journal rows not folded yet), and a recount of its messages, in one statement (one snapshot).
# No message is archived in these tests, so every message the queue ever had is still a row.
_READ_AND_RECOUNT = """
SELECT q.slug,
       ARRAY[coalesce(d.pending, 0), coalesce(d.claimed, 0), coalesce(d.published, 0), coalesce(d.completed, 0),
             coalesce(d.dead_lettered, 0)],
       ARRAY[count(m.id) FILTER (WHERE m.ended_at IS NULL AND m.state = 'pending'),
             count(m.id) FILTER (WHERE m.ended_at IS NULL AND m.state = 'claimed'),
             count(m.id), count(m.id) FILTER (WHERE m.state = 'completed'),
             count(m.id) FILTER (WHERE m.state = 'dead_lettered')]
FROM work_queues q
LEFT JOIN LATERAL work_queue_depths(ARRAY[q.id]) d ON true
LEFT JOIN work_messages m ON m.queue_id = q.id
WHERE q.scope_id = %s
GROUP BY q.slug, d.pending, d.claimed, d.published, d.completed, d.dead_lettered
"""
# The same with the counters alone (what the fold wrote and the rarer moves added).
_FOLDED_AND_RECOUNT = _READ_AND_RECOUNT.replace(
    "LEFT JOIN LATERAL work_queue_depths(ARRAY[q.id]) d ON true",
    "LEFT JOIN LATERAL (SELECT sum(k.pending) AS pending, sum(k.claimed) AS claimed, sum(k.published) AS published,"
    " sum(k.completed) AS completed, sum(k.dead_lettered) AS dead_lettered"
    " FROM work_queue_counters k WHERE k.queue_id = q.id) d ON true")


def _mismatches(statement: str, scope_id: str) -> dict[str, tuple]:
    with db.connection() as conn:
        rows = conn.execute(statement, (scope_id,)).fetchall()
    return {slug: (read, recount) for slug, read, recount in rows if read != recount}


def _killable(e: BaseException) -> bool:
    """An error a killed backend leaves its caller with (the test kills them on purpose)."""
    return isinstance(e, (psycopg.Error, PostboxError)) and not isinstance(e, AssertionError)


def test_every_depth_read_is_exact_and_the_fold_equals_a_recount_under_threads_and_kills(tenant, database_url):
    p = tenant.principal
    s = scopes.create_scope(p, {"slug": "counted"})
    free = queues.create_queue(p, s["id"], {"slug": "free", "max_retries": 2})
    # A bounded queue counts its publishes and completions as they happen (its publishes read its depth).
    bounded = queues.create_queue(p, s["id"], {"slug": "bounded", "max_retries": 2, "max_depth": 100_000})
    targets = [free["id"], bounded["id"]]
    per_publisher = 300
    stop = threading.Event()
    publishing = threading.Event()
    publishing.set()
    lock = threading.Lock()
    completed: Counter[str] = Counter()
    published: list[str] = []
    unexpected: list[BaseException] = []
    read_mismatches: list[dict] = []
    kills = Counter()

    def guarded(fn):
        def run(*args):
            try:
                fn(*args)
            except BaseException as e:  # surfaced below
                unexpected.append(e)
        return run

    @guarded
    def publisher(i: int) -> None:
        for n in range(per_publisher):
            try:
                msg, _ = messages.publish(p, s["id"], targets[n % 2], {"body": {"p": i, "n": n}})
                with lock:
                    published.append(msg["id"])
            except Exception as e:
                if not _killable(e):
                    raise

    @guarded
    def batch_publisher() -> None:  # batches of 10: a call killed mid-way publishes all of it or none
        for n in range(per_publisher // 10):
            try:
                answers = messages.publish_batch(p, s["id"], targets[n % 2],
                                                 [{"body": {"b": n, "k": k}} for k in range(10)])
                assert all(not isinstance(a, PostboxError) for a in answers), answers
                with lock:
                    published.extend(a["id"] for a in answers)
            except Exception as e:
                if not _killable(e):
                    raise

    @guarded
    def consumer(i: int) -> None:
        rng = random.Random(i)
        while not stop.is_set():
            queue = rng.choice(targets)
            try:
                batch = messages.claim(p, s["id"], queue, rng.randint(1, 12), 1)
                if not batch:
                    time.sleep(0.02)
                    continue
                items = [{"id": m["id"], "claim_token": m["claim_token"]} for m in batch]
                how = rng.random()
                if how < 0.5:
                    answers = messages.finish_batch(p, s["id"], "complete", items)
                    with lock:
                        completed.update(a["id"] for a in answers if a["ok"])
                elif how < 0.65:
                    for item in items:
                        messages.finish(p, s["id"], item["id"], "complete", {"claim_token": item["claim_token"]})
                        with lock:
                            completed[item["id"]] += 1
                elif how < 0.85:
                    messages.finish_batch(p, s["id"], "fail",
                                          [dict(x, reason=rng.choice(["flaky", "down"])) for x in items])
                elif how < 0.93:
                    messages.finish(p, s["id"], items[0]["id"], "fail", {"reason": "single"})
                else:
                    messages.finish_batch(p, s["id"], "release", items)
            except Exception as e:
                if not _killable(e):
                    raise

    @guarded
    def folder() -> None:
        while not stop.is_set():
            try:
                sweeps.fold_counts()
            except Exception as e:
                if not _killable(e):
                    raise
            time.sleep(0.01)

    @guarded
    def checker() -> None:
        while not stop.is_set():
            try:
                found = _mismatches(_READ_AND_RECOUNT, s["id"])
            except Exception as e:
                if not _killable(e):
                    raise
                continue
            if found:
                read_mismatches.append(found)

    @guarded
    def killer() -> None:
        rng = random.Random(7)
        with psycopg.connect(database_url, autocommit=True) as conn:
            while not stop.is_set():
                time.sleep(rng.uniform(0.05, 0.2))
                victim = conn.execute(
                    "SELECT pid, query FROM pg_stat_activity WHERE datname = current_database()"
                    " AND pid <> pg_backend_pid() AND state = 'active'"
                    " AND (query LIKE '%%work_counts_fold%%' OR query LIKE '%%work_finish%%'"
                    "      OR query LIKE '%%work_claim%%' OR query LIKE '%%work_publish%%')"
                    " ORDER BY random() LIMIT 1").fetchone()
                if victim and conn.execute("SELECT pg_terminate_backend(%s)", (victim[0],)).fetchone()[0]:
                    kills["fold" if "work_counts_fold" in victim[1] else "call"] += 1
                    kills["batch"] += "work_publish_batch" in victim[1]

    threads = ([threading.Thread(target=publisher, args=(i,)) for i in range(2)]
               + [threading.Thread(target=batch_publisher)]
               + [threading.Thread(target=consumer, args=(i,)) for i in range(3)]
               + [threading.Thread(target=folder) for _ in range(2)]
               + [threading.Thread(target=checker), threading.Thread(target=killer)])
    for t in threads:
        t.start()
    for t in threads[:3]:
        t.join()
    deadline = time.monotonic() + 120
    with psycopg.connect(database_url, autocommit=True) as poll:  # a connection of its own: the killer's pass it by
        while time.monotonic() < deadline and not unexpected:  # until every message has ended
            live = poll.execute("SELECT count(*) FROM work_messages WHERE scope_id = %s AND ended_at IS NULL"
                                " AND queue_id IN (SELECT id FROM work_queues WHERE queue_id = ANY(%s::uuid[]))",
                                (s["id"], targets)).fetchone()[0]
            if live == 0:
                break
            time.sleep(0.2)
    stop.set()
    for t in threads[3:]:
        t.join()
    db.close_pool()  # a connection killed as its call ended may sit in the pool: the next users get fresh ones

    assert not unexpected, unexpected[:3]
    assert kills["call"] > 0, kills  # the run did kill calls (and, most runs, folds and batches: not asserted)
    assert live == 0, f"{live} messages never ended"
    assert not read_mismatches, read_mismatches[:3]  # every read exact, whatever the fold had done
    assert len(published) > per_publisher  # most publishes answered (a killed one may have committed)
    assert len(set(published)) == len(published)
    assert max(completed.values()) == 1  # no message completed twice
    assert not _mismatches(_READ_AND_RECOUNT, s["id"])
    sweeps.fold_counts()  # nothing runs now: it folds every row
    with db.connection() as conn:
        left = conn.execute("SELECT count(*) FROM work_journal_moves m JOIN work_queues q ON q.id = m.queue_id"
                            " WHERE q.scope_id = %s AND m.txid >= (SELECT upto FROM work_counts_folded)",
                            (s["id"],)).fetchone()[0]
    assert left == 0
    assert not _mismatches(_FOLDED_AND_RECOUNT, s["id"])  # the counters alone equal the recount
    stats = queues.stats(p, s["id"], free["id"])
    assert stats["depth_current"] == 0 and stats["published_total"] > 0


def test_a_fold_counts_each_journal_row_once_however_often_it_runs(tenant):
    """Moves written while folds run are folded by exactly one of them: two folds in a row add
    nothing the first did not, and a read before and after any fold answers the same."""
    p = tenant.principal
    s = scopes.create_scope(p, {"slug": "twice"})
    q = queues.create_queue(p, s["id"], {"slug": "jobs"})
    for i in range(30):
        messages.publish(p, s["id"], q["id"], {"body": i})
    claimed = messages.claim(p, s["id"], q["id"], 20, 60)
    messages.finish_batch(p, s["id"], "complete", [{"id": m["id"]} for m in claimed[:15]])
    messages.finish_batch(p, s["id"], "release", [{"id": m["id"]} for m in claimed[15:]])
    before = queues.stats(p, s["id"], q["id"])
    assert (before["depth_pending"], before["depth_claimed"], before["published_total"],
            before["completed_total"]) == (15, 0, 30, 15)
    for _ in range(3):
        sweeps.fold_counts()
        assert queues.stats(p, s["id"], q["id"]) == before
    assert not _mismatches(_FOLDED_AND_RECOUNT, s["id"])


def test_an_open_transaction_holds_the_fold_back_and_its_rows_are_folded_after_it_commits(tenant, database_url):
    """A publish that has not committed is neither read nor folded; once it commits, a read has it
    at once and the next fold folds it, once."""
    p = tenant.principal
    s = scopes.create_scope(p, {"slug": "open"})
    q = queues.create_queue(p, s["id"], {"slug": "jobs"})
    messages.publish(p, s["id"], q["id"], {"body": "first"})
    with psycopg.connect(database_url) as open_tx:  # a publish left open, as a slow caller's
        open_tx.execute("SELECT work_publish(%s, %s, %s, '{\"body\": 2}'::jsonb, 'slow')",
                        (tenant.tenant_id, s["id"], q["id"]))
        messages.publish(p, s["id"], q["id"], {"body": "third"})  # committed after it began
        sweeps.fold_counts()
        assert queues.stats(p, s["id"], q["id"])["depth_pending"] == 2
        open_tx.commit()
    assert queues.stats(p, s["id"], q["id"])["depth_pending"] == 3
    sweeps.fold_counts()
    assert queues.stats(p, s["id"], q["id"])["depth_pending"] == 3
    assert not _mismatches(_FOLDED_AND_RECOUNT, s["id"])
