"""One cell's ceiling: how many messages a second each surface carries over HTTP as clients are
added, and what saturates first.

    .venv/bin/python bench/ceiling.py [--quick] [--fast] [--seconds S] [--clients 1,2,4,8]

One `postbox dev` (its default worker processes) on one embedded PostgreSQL is one cell. For each
surface in turn (queues, partitioned queues, work, durable streams), 1, 2, 4 and 8 client processes
each produce a batch of 10 and consume it (the soak's clients: send_batch then read + archive; push
then pop + ack; a batch publish then claim + complete-batch; an append then a read) for `--seconds`.
Printed per step: messages a second (produced and consumed), and the CPU it used by side (the
gateway's processes, PostgreSQL, the clients) in cores, out of the machine's; the step where adding
clients stops adding throughput (under 10% more for twice the clients) is where the cell saturates,
and the CPU columns say on what. The clients run on the same machine, so the cell's own ceiling is
also projected: the machine's cores over the server's CPU per message (gateway + PostgreSQL).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402
from bench.soak import DurableClient, PartitionedClient, QueuesClient, WorkClient, body  # noqa: E402

BATCH = 10
SURFACES = ("queues", "partitioned", "work", "durable")
SATURATED = 1.10  # twice the clients, less than this much more throughput


class BatchWorkClient(WorkClient):
    """The work surface's batch publish: a produce is one request, as on the other surfaces."""

    def produce(self, values: list) -> None:
        self.timed("produce", self._json, "POST", f"{self.queue}/messages/batch",
                   json={"messages": [{"body": v} for v in values]})


def make_client(surface: str, base: str, key: str, scope: str, queue: str, index: int) -> Any:
    if surface == "queues":
        return QueuesClient(base, key, "ceiling")
    if surface == "partitioned":
        return PartitionedClient(base, key, "ceiling")
    if surface == "work":
        return BatchWorkClient(base, key, scope, queue)
    return DurableClient(base, key, f"ceiling-{index}-{time.monotonic_ns()}", 3600)


def cycles_for(client: Any, seconds: float) -> int:
    """Produce a batch and consume it until `seconds` pass; the messages carried."""
    deadline, done = time.perf_counter() + seconds, 0
    while time.perf_counter() < deadline:
        client.produce([body(done + k) for k in range(BATCH)])
        got = 0
        while got < BATCH:
            got += client.consume(BATCH - got)
        done += BATCH
    return done


def run(args, url: str) -> None:
    from postbox.queues import service
    from postbox.work import queues, scopes

    _, key, principal = common.bench_tenant(url)
    service.create_queue(principal, "ceiling", {})
    scope = scopes.create_scope(principal, {"slug": "ceiling"})["id"]
    queue = queues.create_queue(principal, scope, {"slug": "ceiling"})["id"]
    steps = [int(c) for c in args.clients.split(",")]
    seconds = 5.0 if args.quick else args.seconds
    cores = os.cpu_count() or 1
    gateway = common.DevServer(url).start()
    try:
        print(f"\nbatches of {BATCH}, {seconds:g} s a step; CPU in cores of the machine's {cores}")
        print(f"{'surface':12} {'clients':>7} {'msg/s':>9} {'gateway':>8} {'postgres':>9} {'clients':>8}"
              f" {'server ms/msg':>14}")
        summary = []
        for surface in SURFACES:
            rates: list[tuple[int, float, float]] = []
            for n in steps:
                made = [0]

                def client_for(surface=surface, made=made) -> Any:
                    made[0] += 1
                    return make_client(surface, gateway.url, key, scope, queue, made[0])

                common.run_client_processes(min(n, 2), client_for, lambda c, _: cycles_for(c, 1.0))  # warm
                with common.CpuMeter.http(url, gateway) as meter:
                    elapsed, carried = common.run_client_processes(n, client_for, lambda c, _: cycles_for(c, seconds))
                messages = sum(carried)
                rate = messages / elapsed
                used = {k: v / elapsed for k, v in meter.used.items()}
                server_ms = (meter.used["gateway"] + meter.used["PostgreSQL"]) / messages * 1000
                rates.append((n, rate, server_ms))
                print(f"{surface:12} {n:>7} {rate:>9,.0f} {used['gateway']:>8.2f} {used['PostgreSQL']:>9.2f}"
                      f" {used['clients']:>8.2f} {server_ms:>14.3f}")
            best = max(rates, key=lambda r: r[1])
            knee = next((a for a, b in zip(rates, rates[1:], strict=False) if b[1] < a[1] * SATURATED), None)
            summary.append((surface, best, knee))
        print("\nthe ceiling by surface (the best step; where doubling the clients stopped paying; the server alone:"
              " the machine's cores over its CPU per message at the best step)")
        for surface, best, knee in summary:
            where = f"saturated from {knee[0]} clients" if knee else f"still growing at {rates[-1][0]} clients"
            print(f"  {surface:12} {best[1]:>8,.0f} msg/s with {best[0]} clients; {where};"
                  f" server alone {cores / best[2] * 1000:>8,.0f} msg/s")
    finally:
        problems = gateway.errors()
        gateway.stop()
    if problems.strip():
        print(f"\npostbox dev wrote on stderr (its end):\n{problems}")


def main() -> None:
    def more(parser) -> None:
        parser.add_argument("--seconds", type=float, default=15.0, help="seconds each step runs (default 15)")
        parser.add_argument("--clients", default="1,2,4,8", help="client processes of each step (default 1,2,4,8)")

    common.bench_main(__doc__, 2, run, "5-second steps (about two minutes)", more)


if __name__ == "__main__":
    main()
