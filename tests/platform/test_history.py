"""The console's history (postbox.history, the history agent): after threads send, consume and
acknowledge on a queue, a work queue, a partitioned queue and a keyed stream, a minute's record
holds exactly what they did; runs at once record a minute once; retention keeps a day."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta

from functions.agents import history as agent
from functions.local.lambda_context import LocalContext
from postbox import db, history
from postbox_client import Client, item

THREADS = 4
SENT = 30  # per thread, on every resource
TAKEN = 12  # per thread: consumed and acknowledged (or deleted, or completed)


def _at_once(work: Callable[[int], None]) -> None:
    """Run work(0..THREADS-1) in threads started behind one barrier; raise the first failure."""
    start, failures = threading.Barrier(THREADS), []

    def run(n: int) -> None:
        try:
            start.wait()
            work(n)
        except Exception as e:  # noqa: BLE001 - reported below
            failures.append(e)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not failures, failures


def _until(taken: int, take_one: Callable[[], int]) -> None:
    done = 0
    for _ in range(2000):
        done += take_one()
        if done >= taken:
            return
    raise AssertionError(f"took {done} of {taken}")


def _resources(gateway, tenant) -> dict[str, int]:
    """Make one resource of each kind; their history ids."""
    with Client(gateway.url, tenant.key) as pb:
        pb.queues.create("jobs")
        scope = pb.work.create_scope("charts")
        work = pb.work.create_queue(scope, "tickets")
        pb.partitioned.configure("orders")
        pb.streams.create("signups")
        pb.streams.subscribe("signups", "mailer", start="earliest")
    with db.connection() as conn:
        return {
            "queue": conn.execute("SELECT id FROM queues WHERE tenant_id = %s AND name = 'jobs'",
                                  (tenant.tenant_id,)).fetchone()[0],
            "work": conn.execute("SELECT id FROM work_queues WHERE queue_id = %s", (work["id"],)).fetchone()[0],
            "partitioned": conn.execute("SELECT id FROM pq_queues WHERE tenant_id = %s AND name = 'orders'",
                                        (tenant.tenant_id,)).fetchone()[0],
            "stream": conn.execute("SELECT id FROM streams WHERE tenant_id = %s AND name = 'signups'",
                                   (tenant.tenant_id,)).fetchone()[0],
            "scope": scope, "work_queue": work,
        }


def _traffic(gateway, tenant, ids: dict) -> Callable[[int], None]:
    """What each thread does: send SENT and take TAKEN on every resource."""
    scope, work = ids["scope"], ids["work_queue"]

    def run(n: int) -> None:
        with Client(gateway.url, tenant.key) as pb:
            pb.queues.send_batch("jobs", [{"n": i} for i in range(SENT)])
            for i in range(SENT):
                pb.work.publish(scope, work, {"n": i})
            pb.partitioned.push([item("orders", {"n": i}, partition=f"p{(n + i) % 2}") for i in range(SENT)])
            pb.streams.publish_batch("signups", [{"payload": {"n": i}} for i in range(SENT)])

            def queue_one() -> int:
                got = pb.queues.read("jobs", 1, vt=30)
                return len(pb.queues.delete_messages("jobs", [m.msg_id for m in got])) if got else 0

            def work_one() -> int:
                got = pb.work.claim(scope, work, 1)
                for m in got:
                    pb.work.complete(scope, m)
                return len(got)

            def partitioned_one() -> int:
                got = pb.partitioned.pop("orders", batch=1, consumer_group="billing")
                for m in got:
                    pb.partitioned.ack(m)
                return len(got)

            def stream_one() -> int:
                got = pb.streams.consume("signups", "mailer", max_messages=1)
                if got:
                    pb.streams.ack("signups", "mailer", [m.receipt for m in got])
                return len(got)

            for take in (queue_one, work_one, partitioned_one, stream_one):
                _until(TAKEN, take)

    return run


def _rows(ids: dict, minute=None) -> dict[str, tuple]:
    with db.connection() as conn:
        return {kind: conn.execute(
            "SELECT minute, in_total, out_total, depth, oldest_age_s FROM history_minutes"
            " WHERE kind = %s AND resource_id = %s" + (" AND minute = date_trunc('minute', %s::timestamptz)"
                                                         if minute else "") + " ORDER BY minute",
            (kind, ids[kind], *([minute] if minute else []))).fetchall() for kind in history.KINDS}


def _db_now():
    with db.connection() as conn:
        return conn.execute("SELECT clock_timestamp()").fetchone()[0]


def test_a_minute_recorded_after_threads_holds_exactly_what_they_did(gateway, tenant):
    ids = _resources(gateway, tenant)
    _at_once(_traffic(gateway, tenant, ids))
    at = _db_now() - timedelta(minutes=3)
    written = []
    _at_once(lambda n: written.append(history.record(at)))  # four runs of one minute at once
    assert sum(1 for w in written if w) >= 1

    rows = _rows(ids, at)
    sent, taken = THREADS * SENT, THREADS * TAKEN
    for kind in history.KINDS:
        assert len(rows[kind]) == 1, kind
        _, in_total, out_total, depth, oldest = rows[kind][0]
        assert (in_total, out_total, depth) == (sent, taken, sent - taken), kind
        assert oldest is not None and 0 <= oldest < 600, kind

    history.record(at)  # a second run in the same minute records nothing more
    assert _rows(ids, at) == rows


def test_the_series_gives_messages_in_and_out_per_minute_between_recorded_minutes(gateway, tenant):
    ids = _resources(gateway, tenant)
    now = _db_now()
    history.record(now - timedelta(minutes=4))
    _at_once(_traffic(gateway, tenant, ids))
    history.record(now - timedelta(minutes=2))  # a minute missed: the rate is over two minutes
    with Client(gateway.url, tenant.key) as pb:
        pb.queues.send_batch("jobs", [{"late": i} for i in range(7)])
    history.record(now - timedelta(minutes=1))

    with db.connection() as conn:
        hour = history.series(conn, "queue", ids["queue"], "hour")
        day = history.series(conn, "queue", ids["queue"], "day")
        empty = history.series(conn, "queue", -1, "hour")
    sent, taken = THREADS * SENT, THREADS * TAKEN
    assert hour["depth"] == [0, sent - taken, sent - taken + 7]
    assert hour["in_per_min"] == [None, sent / 2, 7]
    assert hour["out_per_min"] == [None, taken / 2, 0]
    assert hour["oldest_age_sec"][0] is None and hour["oldest_age_sec"][2] > 0
    assert [b - a for a, b in zip(hour["t"], hour["t"][1:], strict=False)] == [120, 60]
    assert hour["to"] - hour["from"] == 3600 and hour["from"] < hour["t"][0] <= hour["to"]
    assert day["t"] == hour["t"] and day["to"] - day["from"] == 86400
    assert empty["t"] == [] and empty["depth"] == []


def test_the_first_minute_of_a_window_is_measured_from_the_minute_before_it(gateway, tenant):
    ids = _resources(gateway, tenant)
    now = _db_now()
    history.record(now - timedelta(minutes=61))  # outside the hour, kept for the rate after it
    with Client(gateway.url, tenant.key) as pb:
        pb.queues.send_batch("jobs", [{"n": i} for i in range(5)])
    history.record(now - timedelta(minutes=58))
    with db.connection() as conn:
        hour = history.series(conn, "queue", ids["queue"], "hour")
    assert hour["depth"] == [5] and hour["in_per_min"] == [round(5 / 3, 2)]


def test_retention_deletes_what_is_older_than_a_day_and_keeps_the_rest(gateway, tenant):
    ids = _resources(gateway, tenant)
    now = _db_now()
    for ago in (timedelta(days=2), timedelta(days=1, minutes=10), timedelta(days=1, minutes=-10),
                timedelta(minutes=5)):
        history.record(now - ago)
    before = _rows(ids)
    assert all(len(r) == 4 for r in before.values())

    trimmed = history.trim()
    after = _rows(ids)
    assert trimmed >= 2 * len(history.KINDS)
    for kind in history.KINDS:
        assert after[kind] == before[kind][2:], kind
    assert history.trim() == 0  # nothing left to delete until a minute ages out


def test_the_agent_records_the_current_minute_and_counts_its_run(gateway, tenant):
    ids = _resources(gateway, tenant)
    result = agent.handler({}, LocalContext("history"))
    assert result["recorded"] >= len(history.KINDS)
    assert all(len(r) == 1 for r in _rows(ids).values())  # fresh resources: this run's minute only
    with db.connection() as conn:
        runs = conn.execute("SELECT total_runs, total_processed FROM agent_runs WHERE agent = 'history'").fetchone()
    assert runs[0] >= 1 and runs[1] >= len(history.KINDS)
