"""Partitioned queues (log engine) against the message engine on the same server, and Queen's figures.

    .venv/bin/python bench/partitioned.py [--quick] [--fast]

One run, one embedded PostgreSQL, 2 client threads (one connection each):
  a. push in batches of 100 (8 partitions, each batch to one), domain layer
  b. pop(100)+ack with 2 consumers until drained (exactly-once checked), domain layer
     reference for a/b: the message engine (postbox.queues.service send_batch/read(100)/archive)
  c. the same over HTTP through the local gateway (reference: our own domain-layer figure)
  d. pop(1)+ack p50 with 10k and with 1M messages in the log (reference: message engine
     read(1)+archive with the same backlog), samples interleaved; large/small says whether pop
     cost is flat as the log grows.
Queen's published push figure (100k-170k msg/s on 32 vCPUs, batches of 100) is printed as a
second reference, raw and per core.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg  # noqa: E402

from bench import common  # noqa: E402

CLIENTS = 2
BATCH = 100
PARTITIONS = 8
ROUNDS = 3
VT = 30
QUEEN_PUSH = (100_000, 170_000)  # msg/s, 32 vCPUs, batches of 100 (notes/flows.md)
QUEEN_VCPUS = 32
GOAL_PUSH, GOAL_POP, GOAL_FLAT = 100_000, 70_000, 1.5


@dataclass(frozen=True)
class Scale:
    batched: int
    http: int
    small: int
    large: int
    samples: int


FULL = Scale(batched=200_000, http=20_000, small=10_000, large=1_000_000, samples=300)
QUICK = Scale(batched=20_000, http=4_000, small=10_000, large=100_000, samples=100)


# ---- clients ------------------------------------------------------------------------------------


class LogClient:
    """Partitioned queues' domain layer, called as the Lambda handler calls it."""

    def __init__(self, principal: Any, queue: str) -> None:
        from postbox.partitioned import service
        from postbox.partitioned.consume import Ack
        from postbox.partitioned.produce import Item
        from postbox.partitioned.service import PopRequest

        self.service, self.Ack, self.Item, self.PopRequest = service, Ack, Item, PopRequest
        self.principal, self.queue = principal, queue

    def push(self, partition: str, values: list) -> int:
        return len(self.service.push(self.principal, [self.Item(self.queue, v, partition) for v in values]))

    def pop_ack(self, batch: int) -> list:
        got = self.service.pop(self.principal, self.PopRequest(self.queue, batch=batch))
        if got:
            last = got[-1]
            self.service.ack(self.principal, [self.Ack(last["leaseId"], "completed", last["transactionId"],
                                                       last["partitionId"])])
        return [m["data"]["n"] for m in got]

    def close(self) -> None:
        pass


class MessageClient:
    """The message engine (queues surface domain): send_batch, read(n)+archive."""

    def __init__(self, principal: Any, queue: str) -> None:
        from postbox.queues import service

        self.service, self.principal, self.queue = service, principal, queue

    def push(self, _partition: str, values: list) -> int:
        return len(self.service.send_messages(self.principal, self.queue, values))

    def pop_ack(self, batch: int) -> list:
        got = self.service.read_messages(self.principal, self.queue, batch, VT)
        if got:
            self.service.archive_messages(self.principal, self.queue, [m["msg_id"] for m in got])
        return [m["message"]["n"] for m in got]

    def close(self) -> None:
        pass


class HttpLogClient:
    """Partitioned queues over HTTP through the local gateway, one keep-alive connection."""

    def __init__(self, url: str, key: str, queue: str) -> None:
        from tests.support.http import client

        self.http, self.queue = client(url, key), queue

    def push(self, partition: str, values: list) -> int:
        r = self.http.post("/api/v1/push", json={"items": [
            {"queue": self.queue, "partition": partition, "payload": v} for v in values]})
        r.raise_for_status()
        return len(r.json())

    def pop_ack(self, batch: int) -> list:
        r = self.http.get(f"/api/v1/pop/queue/{self.queue}", params={"batch": batch})
        r.raise_for_status()
        if r.status_code == 204:
            return []
        got = r.json()["messages"]
        last = got[-1]
        self.http.post("/api/v1/ack", json={"transactionId": last["transactionId"], "leaseId": last["leaseId"],
                                            "partitionId": last["partitionId"]}).raise_for_status()
        return [m["data"]["n"] for m in got]

    def close(self) -> None:
        self.http.close()


# ---- workloads ----------------------------------------------------------------------------------


def warm_up(client: HttpLogClient, i: int) -> None:
    """The HTTP workload on a queue of its own, a little of it and untimed (see DevServer.warm)."""
    for _ in range(3):
        client.push(f"w{i}", [{"to": "a@example.com", "n": n} for n in range(100)])
        while client.pop_ack(100):
            pass


def push_all(make_client, total: int) -> float:
    """`total` messages in batches of BATCH over CLIENTS threads; batch j goes to partition j % 8."""
    share = total // CLIENTS

    def work(client, i: int) -> int:
        n = 0
        for j, start in enumerate(range(0, share, BATCH)):
            values = [{"to": "a@example.com", "n": i * share + k} for k in range(start, min(start + BATCH, share))]
            n += client.push(f"P{(j * CLIENTS + i) % PARTITIONS}", values)
        return n

    seconds, counts = common.run_clients(CLIENTS, make_client, work)
    assert sum(counts) == total
    return seconds


def drain(make_client) -> tuple[float, list[int]]:
    """pop(BATCH)+ack on CLIENTS threads until two empty pops in a row."""

    def work(client, _: int) -> list[int]:
        done: list[int] = []
        empty = 0
        while empty < 2:
            got = client.pop_ack(BATCH)
            empty = 0 if got else empty + 1
            done.extend(got)
        return done

    seconds, results = common.run_clients(CLIENTS, make_client, work)
    return seconds, [n for r in results for n in r]


def exactly_once(total: int, done: list[int]) -> str:
    counts = Counter(done)
    if len(done) == total and set(counts) == set(range(total)):
        return "OK"
    twice = sorted(n for n, c in counts.items() if c > 1)
    missing = sorted(set(range(total)) - set(counts))
    return (f"FAILED: {len(done):,} consumed, {len(counts):,} distinct of {total:,}; "
            f"repeated {twice[:3]}..{twice[-3:]} missing {missing[:3]}..{missing[-3:]}")


def latencies(client, samples: int) -> list[float]:
    out = []
    for _ in range(samples):
        t0 = time.perf_counter()
        assert client.pop_ack(1)
        out.append(time.perf_counter() - t0)
    return out


# ---- the run ------------------------------------------------------------------------------------


class Bench:
    def __init__(self, url: str, scale: Scale) -> None:
        from postbox import db
        from postbox.queues import service as message_queues

        self.url, self.scale, self.table = url, scale, common.Table()
        _, self.key, self.principal = common.bench_tenant(url)
        self.round = 0
        self.message_queues = message_queues
        db.pool().wait()
        self.figures: dict[str, float] = {}

    def _queues(self) -> tuple[str, str]:
        """A fresh log queue and message queue per round, so no round reads another's backlog."""
        self.round += 1
        name = f"bench{self.round}"
        self.message_queues.create_queue(self.principal, name, {})
        return name, name

    def batched(self) -> None:
        n = self.scale.batched
        rates: dict[str, list[float]] = {k: [] for k in ("push", "push_ref", "pop", "pop_ref")}
        verdicts = []
        for r in range(ROUNDS):
            log_q, msg_q = self._queues()
            runs = [("", lambda q=log_q: LogClient(self.principal, q)),
                    ("_ref", lambda q=msg_q: MessageClient(self.principal, q))]
            order = runs if r % 2 == 0 else runs[::-1]
            for suffix, make in order:
                common.checkpoint(self.url)
                rates["push" + suffix].append(n / push_all(make, n))
            for suffix, make in order:
                common.checkpoint(self.url)
                seconds, done = drain(make)
                rates["pop" + suffix].append(len(done) / seconds)
                verdicts.append(("log" if not suffix else "message", exactly_once(n, done)))
        for op, label in (("push", f"a. push, batches of {BATCH}, domain"),
                          ("pop", f"b. pop({BATCH})+ack, domain")):
            ours, theirs = statistics.median(rates[op]), statistics.median(rates[op + "_ref"])
            self.figures[op], self.figures[op + "_ref"] = ours, theirs
            spread = " ".join(f"{x / 1000:.1f}k" for x in rates[op]), " ".join(
                f"{x / 1000:.1f}k" for x in rates[op + "_ref"])
            self.table.row(label, n, f"{ours:,.0f}/s", f"{theirs:,.0f}/s", ours / theirs,
                           f"rounds: {spread[0]} | {spread[1]}")
        bad = [f"{name}: {v}" for name, v in verdicts if v != "OK"]
        print(f"   exactly once ({ROUNDS} rounds, both engines): {'OK' if not bad else '; '.join(bad)}")
        low, high = QUEEN_PUSH
        push = self.figures["push"]
        print(f"   vs Queen's published push ({low // 1000}k-{high // 1000}k msg/s on {QUEEN_VCPUS} vCPUs): "
              f"{push / low:.2f}-{push / high:.2f} raw; per core {push / CLIENTS:,.0f} vs "
              f"{low / QUEEN_VCPUS:,.0f}-{high / QUEEN_VCPUS:,.0f} msg/s/core = "
              f"{(push / CLIENTS) / (low / QUEEN_VCPUS):.1f}x-{(push / CLIENTS) / (high / QUEEN_VCPUS):.1f}x")

    def http(self) -> None:
        gateway = common.DevServer(self.url).start()
        try:
            n = self.scale.http
            queue = "bench_http"

            def make() -> HttpLogClient:
                return HttpLogClient(gateway.url, self.key, queue)

            gateway.warm(lambda: HttpLogClient(gateway.url, self.key, "bench_warm"), warm_up)
            common.checkpoint(self.url)
            with common.CpuMeter.http(self.url, gateway) as cpu:
                rate = n / push_all(make, n)
            self.table.row("c. push, batches of 100, HTTP", n, f"{rate:,.0f}/s", f"{self.figures['push']:,.0f}/s",
                           rate / self.figures["push"], "<- reference = our domain layer")
            print(f"   {cpu.per_call(n // 100)} (call: push of 100)")
            common.checkpoint(self.url)
            with common.CpuMeter.http(self.url, gateway) as cpu:
                seconds, done = drain(make)
            rate = len(done) / seconds
            self.table.row("c. pop(100)+ack, HTTP", n, f"{rate:,.0f}/s", f"{self.figures['pop']:,.0f}/s",
                           rate / self.figures["pop"], "<- reference = our domain layer")
            print(f"   {cpu.per_call(len(done) // 100)} (call: pop + ack)")
            print(f"   HTTP exactly once: {exactly_once(n, done)}")
        finally:
            gateway.stop()

    def _fill(self, name: str, n: int) -> None:
        """A log queue and a message queue called `name`, each with n messages waiting: the log
        through push (one partition, batches of 1000), the message engine with the bulk insert
        bench/queues.py uses."""
        from bench.queues import POSTBOX_FILL

        self.message_queues.create_queue(self.principal, name, {})
        log = LogClient(self.principal, name)
        for start in range(0, n, 1000):
            log.push("Default", [{"to": "a@example.com", "n": k} for k in range(start, min(start + 1000, n))])
        with psycopg.connect(self.url, autocommit=True) as conn:
            qid = conn.execute("SELECT id FROM queues WHERE name = %s", (name,)).fetchone()[0]
            conn.execute(POSTBOX_FILL, {"q": qid, "n": n})

    def latency(self) -> None:
        """pop(1)+ack with a small and a large log waiting, samples interleaved round-robin so both
        sizes (and both engines) see the same machine state; the same for the message engine."""
        s = self.scale
        sizes = {s.small: "lat_small", s.large: "lat_large"}
        for size, name in sizes.items():
            self._fill(name, size)
        common.vacuum_analyze(self.url, "log_segments", "log_cursors", "log_partitions", "queue_messages",
                              "queue_archive")
        common.checkpoint(self.url)
        clients = {(engine, size): make(self.principal, name) for size, name in sizes.items()
                   for engine, make in (("log", LogClient), ("message", MessageClient))}
        samples: dict[tuple[str, int], list[float]] = {k: [] for k in clients}
        for _ in range(s.samples):
            for key, client in clients.items():
                samples[key].extend(latencies(client, 1))
        p50 = {k: common.p50_ms(v) for k, v in samples.items()}
        for size in sizes:
            self.table.row(f"d. pop(1)+ack p50, {size:,} in the log", s.samples, f"{p50['log', size]:.2f} ms",
                           f"{p50['message', size]:.2f} ms", p50["log", size] / p50["message", size])
        for engine, label in (("log", "Postbox log"), ("message", "message engine")):
            growth = p50[engine, s.large] / p50[engine, s.small]
            self.figures["flat" if engine == "log" else "flat_ref"] = growth
            print(f"   {label}: p50 at {s.large:,} / p50 at {s.small:,} = {growth:.2f}")

    def summary(self) -> None:
        f = self.figures
        print("\nGoals (domain layer, 2 clients, batches of 100; informational):")
        for goal, ok, got in (
            (f"push >= {GOAL_PUSH:,} msg/s", f["push"] >= GOAL_PUSH,
             f"{f['push']:,.0f} msg/s (message engine {f['push_ref']:,.0f})"),
            (f"pop+ack >= {GOAL_POP:,} msg/s", f["pop"] >= GOAL_POP,
             f"{f['pop']:,.0f} msg/s (message engine {f['pop_ref']:,.0f})"),
            (f"pop cost flat, large/small p50 <= {GOAL_FLAT}", f["flat"] <= GOAL_FLAT,
             f"{f['flat']:.2f} (message engine {f['flat_ref']:.2f})"),
        ):
            print(f"  {'PASS' if ok else 'MISS'}  {goal:<44} {got}")


def main() -> None:
    def run(args, url: str) -> None:
        run_kind = "quick" if args.quick else "full"
        print(f"Postbox partitioned queues (log engine) vs the message engine ({run_kind} run)")
        print(f"clients: {CLIENTS} threads, one connection each; ratio = log / reference "
              "(for latency: log p50 / reference p50)\n")
        bench = Bench(url, QUICK if args.quick else FULL)
        bench.table.header()
        common.steps(("a, b: push and pop+ack, domain layer", bench.batched),
                     ("c: the same over HTTP (postbox dev)", bench.http),
                     ("d: pop latency as the log grows", bench.latency))
        bench.summary()

    common.bench_main(__doc__, CLIENTS, run)


if __name__ == "__main__":
    main()
