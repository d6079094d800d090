"""Two senders whose backends share a home counter slot, against two whose backends do not.

    .venv/bin/python bench/counters.py [--quick] [--fast]

Counters are spread over 8 slot rows per key; a writer's home slot is its backend's pid % 8. Two
connections whose pids share the remainder are the case the slot choice (counter_slot) exists for:
if both wrote their home slot, each would wait for the other's commit (its WAL flush) on the same
row. Each line runs the same single-message workload on 2 threads, one connection each, one
committed transaction per call, taking turns: a pair of connections whose backends collide, then a
pair whose backends do not (the reference), in short turns, each side first in every other turn.
ratio = colliding / apart (medians over the turns; the note adds the median of each turn's ratio
and every turn's figures): 1.0 is no loss. Under each line: the share of samples (taken every
few milliseconds from a third connection) in which a backend of the pair was waiting for a lock.

- `queue send`: the queues surface's `queue_send` of one message (as `send_messages` calls it): the
  queue's counters, the tenant's stored bytes and its month's messages.
- `work publish`: the work surface's `work_publish` of one message: the work queue's counters.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg  # noqa: E402

from bench import common  # noqa: E402

CLIENTS = 2
FULL = {"seconds": 2.0, "turns": 12}  # short turns, many: a drift of the machine's load falls on both
QUICK = {"seconds": 1.0, "turns": 6}


def _pairs(url: str) -> tuple[list[psycopg.Connection], list[psycopg.Connection]]:
    """Two connections with the same pid % 8, and two with different remainders."""
    opened: list[psycopg.Connection] = []
    collide: list[psycopg.Connection] | None = None
    apart: list[psycopg.Connection] | None = None
    by_home: dict[int, psycopg.Connection] = {}
    while collide is None or apart is None:
        conn = psycopg.connect(url, prepare_threshold=None, autocommit=False)
        opened.append(conn)
        home = conn.info.backend_pid % 8
        if home in by_home and collide is None:
            collide = [by_home.pop(home), conn]
        else:
            by_home.setdefault(home, conn)
        if apart is None and len(by_home) >= 2:
            apart = [by_home.pop(h) for h in list(by_home)[:2]]
    for conn in opened:
        if conn not in collide and conn not in apart:
            conn.close()
    return collide, apart


class LockWaits:
    """Samples, every few milliseconds on a connection of its own, whether a backend of the pair is
    waiting for a lock (pg_stat_activity): the share of samples it was is a figure the machine's
    load moves far less than a rate."""

    def __init__(self, url: str) -> None:
        self.conn = psycopg.connect(url, autocommit=True)
        self.samples = self.waiting = 0

    def during(self, pids: list[int], stop: threading.Event) -> threading.Thread:
        def body() -> None:
            while not stop.is_set():
                n = self.conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)"
                                      " AND wait_event_type = 'Lock'", (pids,)).fetchone()[0]
                self.samples += 1
                self.waiting += n > 0
                time.sleep(0.002)

        thread = threading.Thread(target=body)
        thread.start()
        return thread

    def share(self) -> float:
        return self.waiting / max(self.samples, 1)


def _run_pair(conns: list[psycopg.Connection], call: tuple[str, tuple], seconds: float,
              waits: LockWaits | None = None) -> float:
    """Both connections call `call` (one committed transaction each time) for `seconds`: calls per second."""
    sql, args = call
    counts = [0] * len(conns)
    start = threading.Barrier(len(conns) + 1)
    stop = threading.Event()
    sampler = waits.during([c.info.backend_pid for c in conns], stop) if waits else None

    def body(i: int) -> None:
        conn = conns[i]
        start.wait()
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            conn.execute(sql, args).fetchall()
            conn.commit()
            counts[i] += 1

    threads = [threading.Thread(target=body, args=(i,)) for i in range(len(conns))]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    stop.set()
    if sampler:
        sampler.join()
    return sum(counts) / elapsed


def main() -> None:
    def run(args: Any, url: str) -> None:
        from postbox import tenancy
        from postbox.queues import service
        from postbox.work import queues, scopes

        counts = QUICK if args.quick else FULL
        print(f"Counter slots: colliding backends vs backends apart ({'quick' if args.quick else 'full'} run)")
        print(f"clients: {CLIENTS} threads, one connection each, one message per committed call; "
              "ratio = colliding pair / pair apart\n")
        tenant, _, principal = common.bench_tenant(url)
        service.create_queue(principal, "bench", {})
        scope = str(scopes.create_scope(principal, {"slug": "bench"})["id"])
        queue = str(queues.create_queue(principal, scope, {"slug": "fifo"})["id"])
        project = tenancy.project_id(principal)
        calls = {
            "queue send, one per call": (
                "SELECT * FROM queue_send(%s, %s, 'bench', false, ARRAY['{\"to\":\"a@example.com\",\"n\":1}'],"
                " ARRAY[26], 26, 0, NULL)", (tenant, project)),
            "work publish, one per call": (
                "SELECT work_publish(%s, %s, %s, '{\"body\": {\"to\": \"a@example.com\", \"n\": 1}}'::jsonb,"
                " 'bench')", (tenant, scope, queue)),
        }
        collide, apart = _pairs(url)
        print("colliding pids: " + ", ".join(str(c.info.backend_pid) for c in collide)
              + "; apart: " + ", ".join(str(c.info.backend_pid) for c in apart) + "\n")
        table = common.Table()
        table.header()
        for label, call in calls.items():
            common.progress(label)
            for conns in (collide, apart):  # untimed: each connection compiles the functions it calls
                _run_pair(conns, call, 0.5)
            ours: list[float] = []
            ref: list[float] = []
            waits = {id(collide): LockWaits(url), id(apart): LockWaits(url)}
            for turn in range(counts["turns"]):  # taking turns, each side first in every other turn
                common.checkpoint(url)
                sides = [(collide, ours), (apart, ref)]
                for conns, into in sides if turn % 2 == 0 else sides[::-1]:
                    into.append(_run_pair(conns, call, counts["seconds"], waits[id(conns)]))
            o, r = statistics.median(ours), statistics.median(ref)
            paired = statistics.median(a / b for a, b in zip(ours, ref, strict=True))
            table.row(label, round(o * counts["seconds"] * counts["turns"]), f"{o:,.0f}/s", f"{r:,.0f}/s", o / r,
                      f"median of the turns' ratios {paired:.2f}; turns: "
                      + " ".join(f"{a:,.0f}|{b:,.0f}" for a, b in zip(ours, ref, strict=True)))
            print(f"{'':<42}a backend of the pair waiting for a lock: colliding {waits[id(collide)].share():.0%}"
                  f" of {waits[id(collide)].samples:,} samples, apart {waits[id(apart)].share():.0%}"
                  f" of {waits[id(apart)].samples:,}", flush=True)
            for w in waits.values():
                w.conn.close()
        for conn in collide + apart:
            conn.close()

    common.bench_main(__doc__, CLIENTS, run, "shorter turns (about half a minute)")


if __name__ == "__main__":
    main()
