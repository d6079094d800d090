"""Exactly-once with several runners and the hosted agent on one query: an idle flush and a fold of
the same partition never interleave wrongly, a restarted runner flushes what others folded, and a
window emitted twice (two panes) is stored twice."""

from __future__ import annotations

import threading
import time
from collections import Counter

from functions.agents import flows_runner
from postbox import db
from postbox.errors import NotFound
from postbox.flows import LocalClient, quotas
from postbox.partitioned import service
from postbox.partitioned.produce import Item
from postbox.partitioned.service import PopRequest
from postbox_client.flows import Query, Runner, count

AHEAD_S = 3600  # a runner clock an hour ahead: every window is ripe by the wall clock


def _sink(principal, queue):
    out = []
    try:
        while got := service.pop(principal, PopRequest(queue, batch=1000, consumer_group="check", auto_ack=True)):
            out += got
    except NotFound:
        pass
    return out


def _runner(query, tenant, **kw):
    runner = Runner(query, LocalClient(tenant.principal), wait_ms=0, clock=lambda: time.time() + AHEAD_S, **kw)
    runner.start()
    return runner


def _granted(make_tenant):
    tenant = make_tenant()
    quotas.grant(tenant.tenant_id)
    return tenant


def _event_time_minute(name):
    return Query(name, f"{name}.src").tumbling(60, event_time=lambda e: e["ts"]).aggregate(n=count()).to(f"{name}.out")


def _processing_time_5s(name):
    return Query(name, f"{name}.src").tumbling(5).aggregate(n=count()).to(f"{name}.out")


def _two_runners_split_one_window(make_tenant, build):
    """One partition, 400 events in one window; runner A folds the first 200 and idle-flushes while
    200 still wait in the source; runner B folds those and flushes. Returns the sink's counts."""
    tenant = _granted(make_tenant)
    query = build("split")
    service.push(tenant.principal, [Item(query.source, {"ts": 1_000 + i * 100}) for i in range(400)])
    a = _runner(query, tenant, batch=200, partitions=1)
    assert a.run_once() == 200
    a.flush_idle(force=True)                      # 200 still wait: the window must stay open
    b = _runner(build("split"), tenant, batch=200, partitions=1)
    assert b.run_once() == 200
    b.flush_idle(force=True)
    return [m["data"]["value"]["n"] for m in _sink(tenant.principal, query.sink_queue)]


def test_an_idle_flush_waits_for_the_partitions_backlog_event_time(make_tenant):
    assert _two_runners_split_one_window(make_tenant, _event_time_minute) == [400]


def test_an_idle_flush_waits_for_the_partitions_backlog_processing_time(make_tenant):
    assert _two_runners_split_one_window(make_tenant, _processing_time_5s) == [400]


def test_a_restarted_runner_flushes_windows_another_process_folded(make_tenant):
    tenant = _granted(make_tenant)
    query = _event_time_minute("restart")
    for part in ("A", "B", "C"):
        service.push(tenant.principal, [Item(query.source, {"ts": 1_000 + i}, part) for i in range(5)])
    first = _runner(query, tenant, batch=100, partitions=3)
    while first.run_once():
        pass                                       # folded everything, then "died" before flushing
    fresh = _runner(_event_time_minute("restart"), tenant)
    assert fresh.run_once() == 0                   # nothing left to pop: it never sees these partitions
    fresh.flush_idle(force=True)
    assert sorted(m["data"]["value"]["n"] for m in _sink(tenant.principal, query.sink_queue)) == [5, 5, 5]


def test_a_window_reached_again_after_its_flush_is_stored_as_a_second_pane(make_tenant):
    tenant = _granted(make_tenant)
    query = _event_time_minute("panes")
    runner = _runner(query, tenant)
    for ts in (1_000, 2_000):                      # the same window, the same content (n=1) twice
        service.push(tenant.principal, [Item(query.source, {"ts": ts})])
        assert runner.run_once() == 1
        runner.flush_idle(force=True)
    sink = _sink(tenant.principal, query.sink_queue)
    assert [(m["data"]["windowStart"], m["data"]["value"]["n"]) for m in sink] == [(0, 1), (0, 1)]


def test_a_batch_the_fold_cannot_process_is_nacked_at_once_not_held_for_its_lease(make_tenant):
    tenant = _granted(make_tenant)
    failures = {"left": 1}

    def flaky(event):
        if failures["left"]:
            failures["left"] -= 1
            raise ValueError("flaky parser")
        return event

    query = (Query("flaky", "flaky.src").map(flaky).tumbling(60, event_time=lambda e: e["ts"])
             .aggregate(n=count()).to("flaky.out"))
    service.push(tenant.principal, [Item(query.source, {"ts": i}) for i in range(3)])
    runner = _runner(query, tenant)
    assert runner.run_once() == 0 and runner.stats["failed_folds"] == 1
    with db.transaction() as conn:
        assert conn.execute("SELECT committed, lease_id, retry_count FROM log_cursors WHERE consumer_group = %s",
                            (runner.group,)).fetchone() == (0, None, 1)     # given back, counted as a retry
    assert runner.run_once() == 3                  # redelivered at once (the lease is 30 s)
    runner.flush_idle(force=True)
    assert [m["data"]["value"]["n"] for m in _sink(tenant.principal, query.sink_queue)] == [3]


# ---- two runners and the hosted agent at once, the source pushed while they run ------------------

WINDOW_MS = 2_000
PARTITIONS = ("P0", "P1", "P2")


def busy_query() -> Query:
    """The query both runners and the hosted agent run (a hosted factory: module:function)."""
    return (Query("busy", "busy.src").key_by(lambda e: e["k"])
            .tumbling(WINDOW_MS // 1000, event_time=lambda e: e["ts"], idle_flush_ms=20)
            .aggregate(n=count()).to("busy.out"))


def _caught_up(group):
    with db.transaction() as conn:
        cursors, behind = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE c.committed < p.next_offset OR"
            " (c.lease_id IS NOT NULL AND c.lease_expires_at > clock_timestamp()))"
            " FROM log_cursors c JOIN log_partitions p ON p.id = c.partition_id WHERE c.consumer_group = %s",
            (group,)).fetchone()
    return cursors == len(PARTITIONS) and not behind


def test_two_runners_and_hosted_sweeps_count_every_event_exactly_once(make_tenant):
    tenant = _granted(make_tenant)
    service.configure(tenant.principal, "busy.src", {"leaseTime": 30})
    qid = flows_runner.host(tenant.principal, f"{__name__}:busy_query")["query_id"]
    runners = [_runner(busy_query(), tenant, batch=17, partitions=2) for _ in range(2)]
    events = [(PARTITIONS[i % 3], {"k": f"k{i % 3}", "ts": i * 50}) for i in range(900)]
    stop = threading.Event()
    failures: list[BaseException] = []

    def sweep():
        while not stop.is_set():
            try:
                flows_runner.run_one(qid, tenant.tenant_id, f"{__name__}:busy_query", budget_s=0.2,
                               now_ms=lambda: int((time.time() + AHEAD_S) * 1000))
            except Exception as failed:  # noqa: BLE001 - surfaced by the assertion below
                failures.append(failed)

    threads = [threading.Thread(target=r.run, kwargs={"stop": stop, "duration_s": 60}) for r in runners]
    threads.append(threading.Thread(target=sweep))
    [t.start() for t in threads]
    try:
        for start in range(0, len(events), 30):    # pushed while they run, in small pushes
            chunk = events[start:start + 30]
            for part in PARTITIONS:
                items = [Item("busy.src", e, p) for p, e in chunk if p == part]
                if items:
                    service.push(tenant.principal, items)
            time.sleep(0.02)
        deadline = time.monotonic() + 40
        while not _caught_up(runners[0].group) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        [t.join() for t in threads]
    assert not failures
    assert _caught_up(runners[0].group), "the runners did not catch up"
    runners[0].flush_idle(force=True)              # whatever is still open is ripe by the runner clock
    counted: Counter = Counter()
    for m in _sink(tenant.principal, "busy.out"):
        counted[(m["data"]["key"], m["data"]["windowStart"])] += m["data"]["value"]["n"]
    expected = Counter((e["k"], e["ts"] // WINDOW_MS * WINDOW_MS) for _, e in events)
    assert counted == expected
