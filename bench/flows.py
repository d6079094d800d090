"""Flows: events folded per second by a tumbling-window count through the runner (batches of 200),
and the cost of one cycle, measured in one run on one embedded PostgreSQL.

    .venv/bin/python bench/flows.py [--quick] [--fast]

Reference (same run, same database, same events, same batches): the partitioned queue consumed
without a query, pop(200) + ack per batch, and for the cycle, the same sink pushes and ack in one
`transaction` call. The ratio says what folding and keeping state cost on top of consuming.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402

BATCH = 200
PARTITIONS = 4
ROUNDS = 3


class TimedClient:
    """The in-process client, with every cycle call timed."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.cycle_s: list[float] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def cycle(self, body: dict[str, Any]) -> dict[str, Any]:
        t0 = time.perf_counter()
        try:
            return self.inner.cycle(body)
        finally:
            self.cycle_s.append(time.perf_counter() - t0)


class Bench:
    def __init__(self, url: str, events: int) -> None:
        from postbox import db
        from postbox.flows import quotas

        tenant, _, self.principal = common.bench_tenant(url)
        quotas.grant(tenant)
        self.events = events
        self.table = common.Table()
        db.pool().wait()

    def _fill(self, queue: str) -> None:
        from postbox.partitioned import service
        from postbox.partitioned.produce import Item

        per = self.events // PARTITIONS
        for p in range(PARTITIONS):
            for start in range(0, per, 1000):
                service.push(self.principal, [Item(queue, {"ts": (start + i) * 100, "v": 1}, f"P{p}")
                                              for i in range(min(1000, per - start))])

    def runner_round(self, n: int) -> tuple[float, list[float]]:
        from postbox.flows import LocalClient
        from postbox_client.flows import Query, Runner, count

        source = f"events{n}"
        self._fill(source)
        query = (Query(f"count{n}", source).tumbling(10, event_time=lambda e: e["ts"])
                 .aggregate(n=count()).to(f"counts{n}"))
        client = TimedClient(LocalClient(self.principal))
        runner = Runner(query, client, batch=BATCH, partitions=PARTITIONS, wait_ms=0)
        runner.start()
        t0 = time.perf_counter()
        while runner.stats["messages"] < self.events:
            runner.run_once(wait_ms=0)
        elapsed = time.perf_counter() - t0
        assert runner.stats["failed_cycles"] == 0
        return elapsed, client.cycle_s

    def reference_round(self, n: int) -> tuple[float, list[float]]:
        """Pop(200) + one transaction per batch: the ack and as many pushes as the runner emitted."""
        from postbox.partitioned import service
        from postbox.partitioned.consume import Ack
        from postbox.partitioned.produce import Item

        source = f"plain{n}"
        self._fill(source)
        done, spent = 0, []
        per_batch = max(1, BATCH * 100 // 10_000)  # windows closed per batch by the runner (10 s of 0.1 s)
        t0 = time.perf_counter()
        while done < self.events:
            for _ in range(PARTITIONS):
                got = service.pop(self.principal, service.PopRequest(source, batch=BATCH))
                if not got:
                    break
                c0 = time.perf_counter()
                service.transaction(self.principal, [
                    Ack(got[0]["leaseId"], "completed", None, got[0]["partitionId"]),
                    [Item(f"plainout{n}", {"n": 100}) for _ in range(per_batch)],
                ])
                spent.append(time.perf_counter() - c0)
                done += len(got)
        return time.perf_counter() - t0, spent

    def run(self) -> None:
        ours, theirs, cycles, acks = [], [], [], []
        for n in range(ROUNDS):
            common.progress(f"round {n + 1} of {ROUNDS}: {self.events:,} events folded, then popped and acked")
            elapsed, cycle_s = self.runner_round(n)
            ours.append(elapsed)
            cycles += cycle_s
            elapsed, ack_s = self.reference_round(n)
            theirs.append(elapsed)
            acks += ack_s
        ours_s, theirs_s = statistics.median(ours), statistics.median(theirs)
        self.table.header()
        self.table.row("events folded/s (tumbling count, runner)", self.events, common.rate(self.events, ours_s),
                       common.rate(self.events, theirs_s), theirs_s / ours_s, "reference: pop+ack, no fold")
        self.table.row("one cycle, p50 (ms)", len(cycles), f"{common.p50_ms(cycles):.2f}",
                       f"{common.p50_ms(acks):.2f}", common.p50_ms(cycles) / common.p50_ms(acks),
                       "reference: ack + pushes in one transaction")
        self.table.row("one cycle, p95 (ms)", len(cycles), f"{common.quantile_ms(cycles, 0.95):.2f}",
                       f"{common.quantile_ms(acks, 0.95):.2f}",
                       common.quantile_ms(cycles, 0.95) / common.quantile_ms(acks, 0.95))
        print(f"\nmedian of {ROUNDS} rounds; {PARTITIONS} source partitions, batches of {BATCH}, "
              f"one runner thread in process; ratio for throughput = Postbox / reference")


def main() -> None:
    def run(args, url: str) -> None:
        print(f"Postbox flows: runner throughput and cycle cost ({'quick' if args.quick else 'full'} run)\n")
        Bench(url, 4_000 if args.quick else 20_000).run()

    common.bench_main(__doc__, 1, run, "5x fewer events")


if __name__ == "__main__":
    main()
