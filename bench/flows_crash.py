"""Flows under crashes: two runner processes and a hosted-sweep process on one query, one of them
killed (SIGKILL) every 1-3 s and restarted, while the source is pushed; then every event must be
counted exactly once in the sink (nothing lost, nothing counted twice).

    .venv/bin/python bench/flows_crash.py [--quick] [--fast]

Events carry event times near the epoch, so every window is ripe by the wall clock and the idle
flushes (every 200 ms) race the folds as hard as they can. The source's lease is 3 s so that a
killed holder's partitions come back quickly; its retryLimit is the flows default (100). Prints
the events, windows and records emitted, kills, and the events lost or counted twice; exits 1 on
any difference.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402

PARTITIONS = 8
WINDOW_S = 10
SOURCE, SINK = "crash.src", "crash.out"
FACTORY = "bench.flows_crash:crash_query"


def crash_query():
    """The query every process runs (also the hosted factory)."""
    from postbox_client.flows import Query, count

    return (Query("crash", SOURCE).key_by(lambda e: e["k"])
            .tumbling(WINDOW_S, event_time=lambda e: e["ts"], idle_flush_ms=200)
            .aggregate(n=count()).to(SINK))


def worker(role: str, url: str, key: str) -> None:
    """A child process: a runner, or hosted sweeps back to back. Runs until killed."""
    common.configure(1)
    from functions.local.runtime import use_database

    use_database(url)
    from functions.agents import flows_runner
    from postbox import tenancy
    from postbox.flows import LocalClient
    from postbox_client.flows import Runner

    principal = tenancy.resolve_key(key)
    if role == "runner":
        Runner(crash_query(), LocalClient(principal), batch=100, partitions=4, wait_ms=200).run()
        return
    query_id = flows_runner.host(principal, FACTORY)["query_id"]
    while True:
        flows_runner.run_one(query_id, principal.tenant_id, FACTORY, budget_s=1.0,
                             now_ms=lambda: int(time.time() * 1000))


class Crashes:
    def __init__(self, url: str, events: int, duration_s: float) -> None:
        from postbox import db
        from postbox.flows import quotas

        self.url = url
        tenant, self.key, self.principal = common.bench_tenant(url)
        quotas.grant(tenant)
        db.pool().wait()
        self.events = [(f"P{i % PARTITIONS}", {"k": f"k{i % PARTITIONS}", "ts": i * 20}) for i in range(events)]
        self.duration_s = duration_s
        self.children: dict[str, subprocess.Popen] = {}
        self.kills = 0

    def spawn(self, name: str) -> None:
        role = "hosted" if name == "hosted" else "runner"
        self.children[name] = subprocess.Popen([sys.executable, __file__, "worker", role, self.url, self.key],
                                               env=os.environ.copy())

    def kill_one(self) -> None:
        name = random.choice(sorted(self.children))
        self.children[name].send_signal(signal.SIGKILL)
        self.children[name].wait()
        self.kills += 1
        self.spawn(name)

    def caught_up(self, group: str) -> bool:
        from postbox import db

        with db.transaction() as conn:
            cursors, behind = conn.execute(
                "SELECT count(*), count(*) FILTER (WHERE c.committed < p.next_offset) FROM log_cursors c"
                " JOIN log_partitions p ON p.id = c.partition_id WHERE c.consumer_group = %s", (group,)).fetchone()
        return cursors == PARTITIONS and not behind

    def run(self) -> bool:
        from postbox.flows import LocalClient
        from postbox.partitioned import service
        from postbox.partitioned.produce import Item
        from postbox_client.flows import Runner

        runner = Runner(crash_query(), LocalClient(self.principal), wait_ms=0)
        runner.start()  # registers the query (and the source's flows defaults) before anyone pops
        service.configure(self.principal, SOURCE, {"leaseTime": 3, "retryLimit": 100})
        for name in ("runner-a", "runner-b", "hosted"):
            self.spawn(name)
        started = time.monotonic()
        per_push = max(1, len(self.events) * 2 // int(self.duration_s * 10))  # pushed over ~half the run
        next_kill = started + random.uniform(1, 3)
        pushed = 0
        try:
            while time.monotonic() - started < self.duration_s or pushed < len(self.events):
                if pushed < len(self.events):
                    chunk = self.events[pushed:pushed + per_push]
                    service.push(self.principal, [Item(SOURCE, e, p) for p, e in chunk])
                    pushed += len(chunk)
                if time.monotonic() >= next_kill:
                    self.kill_one()
                    next_kill = time.monotonic() + random.uniform(1, 3)
                time.sleep(0.1)
            deadline = time.monotonic() + 120  # no more kills: let the survivors catch up
            while not self.caught_up(runner.group) and time.monotonic() < deadline:
                time.sleep(0.5)
            time.sleep(1.0)
        finally:
            for child in self.children.values():
                child.send_signal(signal.SIGKILL)
                child.wait()
        runner.flush_idle(force=True)
        return self.report(runner.group, time.monotonic() - started)

    def report(self, group: str, elapsed: float) -> bool:
        from postbox.errors import NotFound
        from postbox.partitioned import service
        from postbox.partitioned.service import PopRequest

        sink = []
        try:
            while got := service.pop(self.principal, PopRequest(SINK, batch=1000, consumer_group="check",
                                                                auto_ack=True)):
                sink += got
        except NotFound:
            pass
        counted: Counter = Counter()
        for m in sink:
            counted[(m["data"]["key"], m["data"]["windowStart"])] += m["data"]["value"]["n"]
        expected = Counter((e["k"], e["ts"] // (WINDOW_S * 1000) * WINDOW_S * 1000) for _, e in self.events)
        lost = sum((expected - counted).values())
        doubled = sum((counted - expected).values())
        print(f"events {len(self.events):,} in {PARTITIONS} partitions, {len(expected)} windows; "
              f"{len(sink)} records emitted ({len(sink) - len(expected)} extra panes)")
        print(f"kills {self.kills} in {elapsed:.0f} s (2 runner processes and 1 hosted-sweep process)")
        print(f"caught up: {self.caught_up(group)}; events lost {lost}, counted twice {doubled}: "
              f"{'exactly once' if not lost and not doubled else 'NOT exactly once'}")
        return not lost and not doubled


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(*sys.argv[2:5])
        return
    outcome = {"ok": False}

    def run(args, url: str) -> None:
        print(f"Postbox flows: exactly-once under kill -9 ({'quick' if args.quick else 'full'} run)\n")
        outcome["ok"] = Crashes(url, 4_000 if args.quick else 20_000, 15 if args.quick else 40).run()

    common.bench_main(__doc__, 1, run, "5x fewer events, a shorter run")
    sys.exit(0 if outcome["ok"] else 1)


if __name__ == "__main__":
    main()
