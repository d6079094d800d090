"""Flows under kill -9: two runner processes and a hosted-sweep process on one query, one of them
killed at random every 1-2 s and restarted while the source is pushed; every event is counted
exactly once in the sink. (bench/flows_crash.py runs the same for longer, with more events.)"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
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

PARTITIONS = 4
FACTORY = "test_flows_crash:crash_query"


def crash_query() -> Query:
    """The query every process runs (also the hosted factory). Event times near the epoch: every
    window is ripe by the wall clock, so idle flushes (every 100 ms) race the folds."""
    return (Query("crash", "crash.src").key_by(lambda e: e["k"])
            .tumbling(2, event_time=lambda e: e["ts"], idle_flush_ms=100)
            .aggregate(n=count()).to("crash.out"))


def _worker(role: str, url: str, key: str) -> None:
    os.environ["DATABASE_URL"] = url
    from postbox import tenancy

    principal = tenancy.resolve_key(key)
    if role == "runner":
        Runner(crash_query(), LocalClient(principal), batch=50, partitions=2, wait_ms=100).run()
        return
    query_id = flows_runner.host(principal, FACTORY)["query_id"]
    while True:
        flows_runner.run_one(query_id, principal.tenant_id, FACTORY, budget_s=0.5,
                             now_ms=lambda: int(time.time() * 1000))


def _caught_up(group):
    with db.transaction() as conn:
        cursors, behind = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE c.committed < p.next_offset) FROM log_cursors c"
            " JOIN log_partitions p ON p.id = c.partition_id WHERE c.consumer_group = %s", (group,)).fetchone()
    return cursors == PARTITIONS and not behind


def test_runner_and_hosted_processes_killed_at_random_count_every_event_exactly_once(make_tenant, database_url):
    tenant = make_tenant()
    quotas.grant(tenant.tenant_id)
    checker = Runner(crash_query(), LocalClient(tenant.principal), wait_ms=0)
    checker.start()
    service.configure(tenant.principal, "crash.src", {"leaseTime": 2})
    env = {**os.environ, "POSTBOX_POOL_MAX": "2", "POSTBOX_POOL_MIN": "1"}

    def spawn(role):
        return subprocess.Popen([sys.executable, __file__, "worker", role, database_url, tenant.key], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    children = {name: spawn(name.split("-")[0]) for name in ("runner-a", "runner-b", "hosted")}
    events = [(f"P{i % PARTITIONS}", {"k": f"k{i % PARTITIONS}", "ts": i * 10}) for i in range(1_200)]
    kills = 0
    try:
        next_kill = time.monotonic() + random.uniform(1, 2)
        for start in range(0, len(events), 40):    # 30 pushes, 0.2 s apart: about 6 s of kills
            chunk = events[start:start + 40]
            service.push(tenant.principal, [Item("crash.src", e, p) for p, e in chunk])
            if time.monotonic() >= next_kill:
                name = random.choice(sorted(children))
                children[name].send_signal(signal.SIGKILL)
                children[name].wait()
                children[name] = spawn(name.split("-")[0])
                kills += 1
                next_kill = time.monotonic() + random.uniform(1, 2)
            time.sleep(0.2)
        deadline = time.monotonic() + 60
        while not _caught_up(checker.group) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        for child in children.values():
            child.send_signal(signal.SIGKILL)
            child.wait()
    assert kills >= 2
    assert _caught_up(checker.group), "the survivors did not catch up"
    checker.flush_idle(force=True)                 # what is still open closes now
    sink = []
    try:
        while got := service.pop(tenant.principal, PopRequest("crash.out", batch=1000, consumer_group="check",
                                                              auto_ack=True)):
            sink += got
    except NotFound:
        pass
    counted: Counter = Counter()
    for m in sink:
        counted[(m["data"]["key"], m["data"]["windowStart"])] += m["data"]["value"]["n"]
    assert counted == Counter((e["k"], e["ts"] // 2_000 * 2_000) for _, e in events)


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    _worker(*sys.argv[2:5])
