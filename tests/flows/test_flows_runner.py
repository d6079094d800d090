"""The runner through the real pop and cycle path (LocalClient): exactly-once across a kill between
pop and cycle, concurrent runners on one query, idle flush, and hosted queries run by the agent."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from functions.agents import flows_runner
from postbox import db
from postbox.errors import NotFound
from postbox.flows import LocalClient, quotas
from postbox.partitioned import service
from postbox.partitioned.produce import Item
from postbox.partitioned.service import PopRequest
from postbox_client.flows import Query, Runner, count, sum_of

WINDOW_S = 10


class Killed(BaseException):
    """The process died: nothing after this point runs (not an Exception the runner would catch)."""


class DyingClient(LocalClient):
    """Dies right before sending its `die_at`-th cycle: the batch was popped, nothing committed."""

    def __init__(self, principal, die_at: int) -> None:
        super().__init__(principal)
        self.calls = 0
        self.die_at = die_at

    def cycle(self, body):
        self.calls += 1
        if self.calls == self.die_at:
            raise Killed()
        return super().cycle(body)


def _query(name="per10s", source="events", sink="counts"):
    return (Query(name, source).key_by(lambda e: e["k"])
            .tumbling(WINDOW_S, event_time=lambda e: e["ts"])
            .aggregate(n=count(), total=sum_of(lambda e: e["amount"])).to(sink))


def _events(n=90):
    """Events in 3 partitions (state is sharded per partition: one key per partition here), event
    times 0.5 s apart, in order within each partition."""
    return [(f"P{i % 3}", {"k": f"k{i % 3}", "ts": i * 500, "amount": i}) for i in range(n)]


def _expected(events):
    out: Counter = Counter()
    for _, e in events:
        out[(e["k"], e["ts"] // (WINDOW_S * 1000) * WINDOW_S * 1000)] += 1
    return out


def _setup(tenant, events, lease_time=1):
    quotas.grant(tenant.tenant_id)
    service.configure(tenant.principal, "events", {"leaseTime": lease_time})
    by_partition: dict[str, list] = {}
    for part, e in events:
        by_partition.setdefault(part, []).append(e)
    for part, es in by_partition.items():
        for start in range(0, len(es), 10):  # several segments per partition
            service.push(tenant.principal, [Item("events", e, part) for e in es[start:start + 10]])


def _sink(principal, queue="counts"):
    out = []
    try:
        while got := service.pop(principal, PopRequest(queue, batch=1000, consumer_group="check", auto_ack=True)):
            out += got
    except NotFound:
        pass
    return out


def _drain(runner, deadline_s=30.0):
    """Run until every source message is committed for the runner's group, then idle-flush."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        runner.run_once(wait_ms=300)
        with db.transaction() as conn:
            behind = conn.execute(
                "SELECT count(*) FROM log_cursors c JOIN log_partitions p ON p.id = c.partition_id"
                " WHERE c.consumer_group = %s AND c.committed < p.next_offset", (runner.group,)).fetchone()[0]
        if not behind:
            break
    assert not behind, "the runner did not catch up"
    runner.flush_idle(force=True)


def _windows(sink):
    return Counter({(m["data"]["key"], m["data"]["windowStart"]): m["data"]["value"]["n"] for m in sink})


def test_a_runner_killed_between_pop_and_cycle_then_restarted_emits_exactly_the_same(make_tenant):
    events = _events()
    expected = _expected(events)

    steady = make_tenant()
    _setup(steady, events)
    runner = Runner(_query(), LocalClient(steady.principal), batch=7, partitions=2)
    runner.start()
    _drain(runner)
    clean = _sink(steady.principal)

    crashed = make_tenant()
    _setup(crashed, events)
    for die_at in (3, 2):  # two crashes, each right before a cycle: popped, folded, never committed
        doomed = Runner(_query(), DyingClient(crashed.principal, die_at), batch=7, partitions=2)
        with pytest.raises(Killed):
            while True:
                doomed.run_once(wait_ms=300)
    restarted = Runner(_query(), LocalClient(crashed.principal), batch=7, partitions=2)
    restarted.start()
    _drain(restarted)
    recovered = _sink(crashed.principal)

    assert _windows(clean) == expected                 # every window, counted exactly
    assert len(clean) == len(expected) and len(recovered) == len(clean)
    strip = lambda sink: sorted((m["partition"], repr(m["data"])) for m in sink)  # noqa: E731
    assert strip(recovered) == strip(clean)
    totals = Counter()
    for _, e in events:
        totals[(e["k"], e["ts"] // 10_000 * 10_000)] += e["amount"]
    assert {(m["data"]["key"], m["data"]["windowStart"]): m["data"]["value"]["total"] for m in recovered} == totals


def test_concurrent_runners_on_one_query_count_every_message(make_tenant):
    events = [(f"P{i % 4}", {"k": f"k{i % 4}", "ts": i * 250, "amount": 1}) for i in range(240)]
    tenant = make_tenant()
    _setup(tenant, events, lease_time=30)
    runners = [Runner(_query(), LocalClient(tenant.principal), batch=13, partitions=2) for _ in range(3)]
    for r in runners:
        r.start()
    stop = threading.Event()
    threads = [threading.Thread(target=r.run, kwargs={"stop": stop, "duration_s": 30}) for r in runners]
    [t.start() for t in threads]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with db.transaction() as conn:
            cursors, behind = conn.execute(
                "SELECT count(*), count(*) FILTER (WHERE c.committed < p.next_offset) FROM log_cursors c"
                " JOIN log_partitions p ON p.id = c.partition_id WHERE c.consumer_group = %s",
                (runners[0].group,)).fetchone()
        if cursors == 4 and not behind:  # the group has met every partition and caught up on each
            break
        time.sleep(0.1)
    stop.set()
    [t.join() for t in threads]
    runners[0].flush_idle(force=True)
    sink = _sink(tenant.principal)
    assert _windows(sink) == _expected(events) and len(sink) == len(_expected(events))
    assert sum(r.stats["messages"] for r in runners) >= 240


def test_idle_flush_emits_a_quiet_partitions_windows(make_tenant):
    tenant = make_tenant()
    quotas.grant(tenant.tenant_id)
    q = Query("quiet", "src").tumbling(60, idle_flush_ms=50).aggregate(n=count()).to("out")
    service.push(tenant.principal, [Item("src", {"x": i}) for i in range(5)])
    runner = Runner(q, LocalClient(tenant.principal), wait_ms=0)
    runner.start()
    assert runner.run_once() == 5
    assert _sink(tenant.principal, "out") == []              # the window is open: nothing came after it
    assert runner.flush_idle() == 0                          # not quiet long enough yet
    time.sleep(0.1)
    # Ripe by the wall clock only once its end has passed: pretend the clock is 2 minutes ahead.
    runner.clock = lambda: time.time() + 120
    assert runner.flush_idle() == 1
    sink = _sink(tenant.principal, "out")
    assert [m["data"]["value"] for m in sink] == [{"n": 5}]
    pid = sink and _partitions_of(tenant, "src")[0]
    assert LocalClient(tenant.principal).get_state(runner.query_id, pid) == []


def _partitions_of(tenant, queue):
    with db.transaction() as conn:
        return [str(r[0]) for r in conn.execute(
            "SELECT p.id FROM log_partitions p JOIN pq_queues q ON q.id = p.owner_id"
            " WHERE p.owner_kind = 'pq' AND q.tenant_id = %s AND q.name = %s", (tenant.tenant_id, queue))]


def hosted_counter() -> Query:
    """A hosted query's factory (module:function the agent imports)."""
    return Query("hosted-count", "hsrc").tumbling(60).aggregate(n=count()).to("hout")


def test_a_hosted_query_runs_and_idle_flushes_without_a_worker(make_tenant):
    tenant = make_tenant()
    quotas.grant(tenant.tenant_id)
    service.push(tenant.principal, [Item("hsrc", i) for i in range(7)])
    qid = flows_runner.host(tenant.principal, f"{__name__}:hosted_counter")["query_id"]
    first = flows_runner.sweep(budget_s=5, now_ms=lambda: int(time.time() * 1000))
    assert first["queries"] >= 1 and first["errors"] == 0
    assert _sink(tenant.principal, "hout") == []              # folded, window still open
    later = flows_runner.sweep(budget_s=5, now_ms=lambda: int(time.time() * 1000) + 120_000)
    assert later["emitted"] >= 1
    assert [m["data"]["value"] for m in _sink(tenant.principal, "hout")] == [{"n": 7}]
    with db.transaction() as conn:
        assert conn.execute("SELECT last_error FROM flow_hosted WHERE query_id = %s", (qid,)).fetchone() == (None,)


def test_a_gate_partially_acks_and_finishes_its_tail_on_the_real_cursor(make_tenant):
    tenant = make_tenant()
    quotas.grant(tenant.tenant_id)
    service.push(tenant.principal, [Item("gsrc", i) for i in range(6)])
    budget = {"left": 4}

    def admit(value, state):
        budget["left"] -= 1
        return budget["left"] >= 0

    runner = Runner(Query("gated", "gsrc").gate(admit).to("gout"), LocalClient(tenant.principal), wait_ms=0)
    runner.gate_retry_ms = 0
    runner.start()
    runner.run_once()
    with db.transaction() as conn:
        committed, leased = conn.execute(
            "SELECT committed, lease_id IS NOT NULL FROM log_cursors WHERE consumer_group = %s",
            (runner.group,)).fetchone()
    assert (committed, leased) == (4, True)
    budget["left"] = 100
    runner.run_once()
    with db.transaction() as conn:
        assert conn.execute("SELECT committed, lease_id IS NULL FROM log_cursors WHERE consumer_group = %s",
                            (runner.group,)).fetchone() == (6, True)
    assert [m["data"] for m in _sink(tenant.principal, "gout")] == [0, 1, 2, 3, 4, 5]


def test_host_for_tenant_resolves_the_tenant_by_name(make_tenant):
    with pytest.raises(NotFound):
        flows_runner.host_for_tenant("no-such-tenant-for-flows", f"{__name__}:hosted_counter")
    tenant = make_tenant()
    quotas.grant(tenant.tenant_id)
    with db.transaction() as conn:
        name = conn.execute("SELECT name FROM tenants WHERE id = %s", (tenant.tenant_id,)).fetchone()[0]
    answer = flows_runner.host_for_tenant(name, f"{__name__}:hosted_counter")
    assert answer["fresh"] is True and answer["factory"].endswith(":hosted_counter")


def test_the_runner_reports_how_many_source_events_it_has_not_folded(make_tenant):
    tenant = make_tenant()
    _setup(tenant, _events(90))
    runner = Runner(_query(), LocalClient(tenant.principal), batch=7, partitions=2)
    runner.start()
    assert runner.lag()["pending"] == 90  # the group has read nothing yet
    folded = runner.run_once(wait_ms=0)
    assert folded == 14 and runner.lag()["pending"] == 90 - 14
    assert runner.lag()["behind_s"] > 0
    _drain(runner)
    assert runner.lag()["pending"] == 0
    runner.run_once(wait_ms=0)
    assert runner.lag() == {"pending": 0, "behind_s": 0.0}
    assert LocalClient(tenant.principal).resource("no-such-queue") is None
