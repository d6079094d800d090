"""Postbox's queues against pgmq's SQL, measured in one run on one embedded PostgreSQL.

    .venv/bin/python bench/queues.py [--quick] [--fast]

Every measurement runs the same workload (threads, one connection each, same batch sizes) through
Postbox's domain layer and through the reference statements in bench/reference/pgmq.sql, and prints
both figures and their ratio (Postbox / reference). See bench/README.md for what each line means.
"""

from __future__ import annotations

import contextlib
import io
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg  # noqa: E402
from psycopg.types.json import Jsonb  # noqa: E402

from bench import common  # noqa: E402

REFERENCE = Path(__file__).resolve().parent / "reference" / "pgmq.sql"
CLIENTS = 2
BATCH = 100
ROUNDS = 5  # each domain-layer comparison runs this many times; the median is printed
VT = 30  # seconds: longer than any run, so a claimed message never comes back mid-run
QUEUE = "bench"
NEW_QUEUE = "bench_new"  # stays empty until f, so the planner's statistics never see it

TABLES = ("queue_messages", "queue_archive", "pgmq.q_bench", "pgmq.a_bench")

GOAL_SEND = 100_000
GOAL_READ = 70_000
GOAL_FLAT = 1.5


@dataclass(frozen=True)
class Scale:
    batched: int  # sent in batches of BATCH, then drained with read(BATCH)+archive
    http: int  # the same over HTTP
    single: int  # sent one per call, then drained with read(1)+archive
    small: int  # backlog of the small read-latency run
    large: int  # backlog of the large one
    samples: int  # read(1)+archive calls timed at each backlog
    new: int  # drained from a queue the planner's statistics have not seen


FULL = Scale(batched=200_000, http=50_000, single=5_000, small=1_000, large=1_000_000, samples=500, new=5_000)
QUICK = Scale(batched=20_000, http=5_000, single=500, small=1_000, large=100_000, samples=100, new=1_000)


# ---- clients: one per thread, the same four calls each -----------------------------------------


class PostboxClient:
    """Postbox's domain layer, called as a Lambda handler calls it (pool, one transaction per call)."""

    def __init__(self, principal: Any, queue: str) -> None:
        from postbox.queues import service

        self.service, self.principal, self.queue = service, principal, queue

    def send_batch(self, msgs: list) -> list[int]:
        return self.service.send_messages(self.principal, self.queue, msgs)

    def send(self, msg: Any) -> int:
        return self.service.send_messages(self.principal, self.queue, [msg])[0]

    def read(self, qty: int) -> list[int]:
        return [m["msg_id"] for m in self.service.read_messages(self.principal, self.queue, qty, VT)]

    def archive(self, ids: list[int]) -> list[int]:
        return self.service.archive_messages(self.principal, self.queue, ids)

    def close(self) -> None:
        pass


class PgmqClient:
    """pgmq's statements on a connection of its own, set up as Postbox's pool sets up its connections
    and read as Postbox reads (binary results, the same JSON decoder)."""

    def __init__(self, url: str, sql: dict[str, str]) -> None:
        from postbox import jsoncodec

        self.conn = psycopg.connect(url, prepare_threshold=None, autocommit=False)
        jsoncodec.use_on(self.conn)
        self.sql = sql

    def _run(self, name: str, **params: Any) -> list[tuple]:
        rows = self.conn.execute(self.sql[name], params, binary=True).fetchall()
        self.conn.commit()
        return rows

    def send_batch(self, msgs: list) -> list[int]:
        return [r[0] for r in self._run("send_batch", msgs=[Jsonb(m) for m in msgs], headers=None, delay=0)]

    def send(self, msg: Any) -> int:
        return self._run("send", msg=Jsonb(msg), headers=None, delay=0)[0][0]

    def read(self, qty: int) -> list[int]:
        return [r[0] for r in self._run("read", qty=qty, vt=VT)]

    def archive(self, ids: list[int]) -> list[int]:
        return [r[0] for r in self._run("archive", ids=ids)]

    def close(self) -> None:
        self.conn.close()


class HttpClient:
    """The queues API through the local gateway over HTTP, on one keep-alive connection."""

    def __init__(self, base_url: str, key: str, queue: str) -> None:
        from tests.support.http import client

        self.http = client(base_url, key)
        self.path = f"/api/v1/queues/{queue}"

    def _post(self, op: str, body: dict) -> dict:
        response = self.http.post(f"{self.path}/{op}", json=body)
        response.raise_for_status()
        return response.json()

    def send_batch(self, msgs: list) -> list[int]:
        return self._post("send_batch", {"messages": msgs})["msg_ids"]

    def send(self, msg: Any) -> int:
        return self._post("send", {"message": msg})["msg_id"]

    def read(self, qty: int) -> list[int]:
        return [m["msg_id"] for m in self._post("read", {"qty": qty, "vt": VT})["messages"]]

    def archive(self, ids: list[int]) -> list[int]:
        return self._post("archive", {"msg_ids": ids})["archived"]

    def close(self) -> None:
        self.http.close()


# ---- workloads ----------------------------------------------------------------------------------


def send_all(make_client, total: int, per_call: int) -> tuple[float, list[int]]:
    """Send `total` small messages, `per_call` per call, split evenly over CLIENTS threads."""
    share = total // CLIENTS
    calls = [
        [[{"to": "a@example.com", "n": t * share + k} for k in range(j, min(j + per_call, share))]
         for j in range(0, share, per_call)]
        for t in range(CLIENTS)
    ]

    def work(client, i: int) -> list[int]:
        ids: list[int] = []
        for msgs in calls[i]:
            if per_call == 1:
                ids.append(client.send(msgs[0]))
            else:
                ids.extend(client.send_batch(msgs))
        return ids

    seconds, results = common.run_clients(CLIENTS, make_client, work)
    return seconds, [i for r in results for i in r]


def warm_up(client: HttpClient, i: int) -> None:
    """The HTTP workload, a little of it and untimed (see DevServer.warm): what it sends it drains."""
    for _ in range(3):
        client.send([{"warm": i}])
        client.send_batch([{"warm": i, "n": n} for n in range(BATCH)])
        while ids := client.read(BATCH):
            client.archive(ids)


def drain(make_client, qty: int) -> tuple[float, list[int]]:
    """read(qty) then archive those ids, on CLIENTS threads, until a read comes back empty."""

    def work(client, _: int) -> list[int]:
        done: list[int] = []
        while ids := client.read(qty):
            done.extend(client.archive(ids))
        return done

    seconds, results = common.run_clients(CLIENTS, make_client, work)
    return seconds, [i for r in results for i in r]


def read_latencies(clients: dict[str, Any], samples: int) -> dict[str, list[float]]:
    """Seconds for `samples` read(1)+archive calls per client, the clients taking turns call by call."""
    out: dict[str, list[float]] = {name: [] for name in clients}
    for _ in range(samples):
        for name, client in clients.items():
            t0 = time.perf_counter()
            client.archive(client.read(1))
            out[name].append(time.perf_counter() - t0)
    for client in clients.values():
        client.close()
    return out


def exactly_once(sent: list[int], archived: list[int], waiting: int, archive_rows: int) -> str | None:
    """None when every sent id was archived once (by the clients' answers and the archive's rows)."""
    if (len(archived) == len(set(archived)) == len(sent) and set(archived) == set(sent)
            and waiting == 0 and archive_rows == len(sent)):
        return None
    return (f"sent {len(sent):,}, archived {len(archived):,} ({len(set(archived)):,} distinct), "
            f"{archive_rows:,} rows in the archive, {waiting:,} left")


def short(n: int) -> str:
    return f"{n // 1_000_000}M" if n >= 1_000_000 and n % 1_000_000 == 0 else f"{n // 1000}k"


# ---- the run ------------------------------------------------------------------------------------


POSTBOX_COUNTS = """
SELECT (SELECT count(*) FROM queue_messages WHERE queue_id = %(q)s),
       (SELECT count(*) FROM queue_archive WHERE queue_id = %(q)s AND msg_id = ANY(%(ids)s::bigint[]))
"""

# Bulk backlog for the latency runs, with the columns send() writes; the insert trigger counts it.
POSTBOX_FILL = """
INSERT INTO queue_messages (queue_id, vt, message, size)
SELECT %(q)s, clock_timestamp(), m, octet_length(m::text)
FROM (SELECT jsonb_build_object('to', 'a@example.com', 'n', g) AS m FROM generate_series(1, %(n)s) AS g) s
"""


class Bench:
    def __init__(self, url: str, scale: Scale) -> None:
        from postbox import db
        from postbox.queues import service

        self.url, self.scale, self.table = url, scale, common.Table()
        _, self.key, self.principal = common.bench_tenant(url)
        service.create_queue(self.principal, QUEUE, {})
        service.create_queue(self.principal, NEW_QUEUE, {})
        self.sql = common.sql_blocks(REFERENCE)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(self.sql["schema"])
            ids = dict(conn.execute("SELECT name, id FROM queues WHERE name IN (%s, %s)", (QUEUE, NEW_QUEUE)))
        self.queue_id, self.new_queue_id = ids[QUEUE], ids[NEW_QUEUE]
        db.pool().wait()
        self.figures: dict[str, float] = {}

    def postbox(self) -> PostboxClient:
        return PostboxClient(self.principal, QUEUE)

    def pgmq(self) -> PgmqClient:
        return PgmqClient(self.url, self.sql)

    def _sql(self, statement: str, **params: Any) -> tuple:
        with psycopg.connect(self.url, autocommit=True) as conn:
            return conn.execute(statement, params).fetchone()

    def rounds(self, keys: tuple[str, str], labels: tuple[str, str], n: int, per_call: int) -> None:
        """Send n messages then drain them, ROUNDS times, Postbox and the reference taking turns first.

        Prints each side's median rate (and every round's), and checks that each drain archived
        every message it was sent exactly once.
        """
        sides = {"Postbox": (self.postbox, self._postbox_counts), "pgmq": (self.pgmq, self._pgmq_counts)}
        rates: dict[tuple[str, str], list[float]] = {(k, side): [] for k in keys for side in sides}
        failures = []
        for r in range(ROUNDS):
            common.progress(f"round {r + 1} of {ROUNDS}: {n:,} messages each side")
            order = list(sides) if r % 2 == 0 else list(sides)[::-1]
            sent = {}
            for side in order:
                self._settle()
                seconds, sent[side] = send_all(sides[side][0], n, per_call)
                rates[keys[0], side].append(len(sent[side]) / seconds)
            for side in order:
                self._settle()
                seconds, done = drain(sides[side][0], per_call)
                rates[keys[1], side].append(len(done) / seconds)
                if problem := exactly_once(sent[side], done, *sides[side][1](sent[side])):
                    failures.append(f"{side} round {r + 1}: {problem}")
        for key, label in zip(keys, labels, strict=True):
            ours, theirs = (statistics.median(rates[key, side]) for side in sides)
            self.figures[key], self.figures[key + "_ref"] = ours, theirs
            each = " | ".join(" ".join(f"{x / 1000:.1f}k" for x in rates[key, side]) for side in sides)
            self.table.row(label, n, f"{ours:,.0f}/s", f"{theirs:,.0f}/s", ours / theirs, f"rounds: {each}")
        verdict = "OK" if not failures else "FAILED: " + "; ".join(failures)
        print(f"   every message archived exactly once, none left ({ROUNDS} rounds, both): {verdict}", flush=True)

    def _settle(self) -> None:
        """Before a timed run: vacuum both engines' tables (as autovacuum would between bursts) and
        flush dirty pages, so no run pays for the dead rows and writes of the one before it."""
        common.vacuum_analyze(self.url, *TABLES)
        common.checkpoint(self.url)

    def _postbox_counts(self, sent: list[int], queue_id: int | None = None) -> tuple[int, int]:
        return self._sql(POSTBOX_COUNTS, q=queue_id or self.queue_id, ids=sent)

    def _pgmq_counts(self, sent: list[int]) -> tuple[int, int]:
        return self._sql(self.sql["counts"], ids=sent)

    def batched(self) -> None:
        self.rounds(("send", "read"), (f"a. send_batch({BATCH}), domain", f"b. read({BATCH})+archive, domain"),
                    self.scale.batched, BATCH)

    def http(self) -> None:
        """The batched runs through the local gateway; the ratio is against Postbox's domain figures."""
        gateway = common.DevServer(self.url).start()
        n = self.scale.http

        def make() -> HttpClient:
            return HttpClient(gateway.url, self.key, QUEUE)

        try:
            # Powertools prints its metrics every 100 sends even when disabled; keep them off the table.
            with contextlib.redirect_stdout(io.StringIO()):
                gateway.warm(make, warm_up)
                self._settle()
                with common.CpuMeter.http(self.url, gateway) as send_cpu:
                    send_seconds, sent = send_all(make, n, BATCH)
                self._settle()
                with common.CpuMeter.http(self.url, gateway) as read_cpu:
                    read_seconds, done = drain(make, BATCH)
        finally:
            gateway.stop()
        for label, count, seconds, domain, cpu in (
                ("c. send_batch(100), HTTP", len(sent), send_seconds, "send", send_cpu),
                ("c. read(100)+archive, HTTP", len(done), read_seconds, "read", read_cpu)):
            ours, base = count / seconds, self.figures[domain]
            self.table.row(label, n, f"{ours:,.0f}/s", f"{base:,.0f}/s", ours / base,
                           "reference = Postbox's domain layer (a, b above): no pgmq over HTTP")
            print(f"   {cpu.per_call(count // BATCH)} (call: {'send_batch' if domain == 'send' else 'read + archive'})")
        problem = exactly_once(sent, done, *self._postbox_counts(sent))
        print(f"   every message archived exactly once, none left: {problem or 'OK'}", flush=True)

    def single(self) -> None:
        self.rounds(("send1", "read1"), ("d. send, one per call, domain", "d. read(1)+archive, domain"),
                    self.scale.single, 1)

    def latency(self) -> None:
        """p50 of read(1)+archive with a small then a large backlog waiting, for both."""
        s = self.scale
        p50: dict[tuple[str, int], float] = {}
        fills = {"Postbox": (POSTBOX_FILL, {"q": self.queue_id}), "pgmq": (self.sql["fill"], {})}
        waiting = 0
        for size in (s.small, s.large):
            with psycopg.connect(self.url, autocommit=True) as conn:
                for statement, params in fills.values():
                    conn.execute(statement, {**params, "n": size - waiting})
            self._settle()
            times = read_latencies({"Postbox": self.postbox(), "pgmq": self.pgmq()}, s.samples)
            waiting = size - s.samples
            for side in fills:
                p50[side, size] = common.p50_ms(times[side])
            ours, theirs = p50["Postbox", size], p50["pgmq", size]
            p90 = " | ".join(f"{common.quantile_ms(times[side], 0.9):.2f}" for side in fills)
            self.table.row(f"e. read(1)+archive p50, {short(size)} waiting", s.samples,
                           f"{ours:.2f} ms", f"{theirs:.2f} ms", ours / theirs, f"p90 ms: {p90}")
        for side, key in (("Postbox", "flat"), ("pgmq", "flat_ref")):
            self.figures[key] = p50[side, s.large] / p50[side, s.small]
            print(f"   {side}: p50 at {short(s.large)} / p50 at {short(s.small)} = {self.figures[key]:.2f}")

    def new_queue(self) -> None:
        """read(100)+archive on a queue the planner's statistics have not seen, as a new queue is.

        After e, ANALYZE sees only `bench`'s backlog; `bench_new` then gets its messages, and 2
        clients drain it. The ratio is against Postbox's own b figure (no pgmq analogue: pgmq has a
        table per queue).
        """
        n = self.scale.new
        common.vacuum_analyze(self.url, "queue_messages")
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(POSTBOX_FILL, {"q": self.new_queue_id, "n": n})
            sent = [r[0] for r in conn.execute("SELECT msg_id FROM queue_messages WHERE queue_id = %s",
                                               (self.new_queue_id,))]
        common.checkpoint(self.url)
        seconds, done = drain(lambda: PostboxClient(self.principal, NEW_QUEUE), BATCH)
        ours, base = len(done) / seconds, self.figures["read"]
        self.table.row(f"f. read({BATCH})+archive, new queue", n, f"{ours:,.0f}/s", f"{base:,.0f}/s", ours / base,
                       "reference = Postbox's b: the same on a queue the statistics know")
        problem = exactly_once(sent, done, *self._postbox_counts(sent, self.new_queue_id))
        print(f"   every message archived exactly once, none left: {problem or 'OK'}", flush=True)

    def summary(self) -> None:
        f = self.figures
        print("\nGoals (domain layer, 2 clients, batches of 100; informational):")
        goals = (
            (f"send_batch >= {GOAL_SEND:,} msg/s", f["send"] >= GOAL_SEND,
             f"{f['send']:,.0f} msg/s (reference {f['send_ref']:,.0f})"),
            (f"read+archive >= {GOAL_READ:,} msg/s", f["read"] >= GOAL_READ,
             f"{f['read']:,.0f} msg/s (reference {f['read_ref']:,.0f})"),
            (f"read cost flat, large/small p50 <= {GOAL_FLAT}", f["flat"] <= GOAL_FLAT,
             f"{f['flat']:.2f} (reference {f['flat_ref']:.2f})"),
        )
        for goal, ok, got in goals:
            print(f"  {'PASS' if ok else 'MISS'}  {goal:<40} {got}")


def main() -> None:
    def run(args, url: str) -> None:
        print(f"Postbox queues vs pgmq's SQL ({'quick' if args.quick else 'full'} run)")
        print(f"clients: {CLIENTS} threads, one connection each; ratio = Postbox / reference "
              "(for latency: Postbox p50 / reference p50)\n")
        bench = Bench(url, QUICK if args.quick else FULL)
        bench.table.header()
        common.steps(("a, b: send_batch and read+archive rounds, domain layer", bench.batched),
                     ("c: the same over HTTP (postbox dev)", bench.http),
                     ("d: one message per call, domain layer", bench.single),
                     ("e: read latency with a small then a large backlog", bench.latency),
                     ("f: drain a queue the statistics have not seen", bench.new_queue))
        bench.summary()

    common.bench_main(__doc__, CLIENTS, run, "every count ~10x smaller (under a minute)")


if __name__ == "__main__":
    main()
