"""A long run stays flat: messages through queues, partitioned queues, work and durable streams over
HTTP, with `postbox dev`'s agents running, measured at every tenth of the run.

    .venv/bin/python bench/soak.py [--messages N] [--window S] [--rate R] [--quick] [--fast]

The four surfaces run at once, each from client processes of its own that send a batch and consume
it (read + archive, pop + ack, claim + complete, an append read back), paced to `--rate` messages a
second per surface. Retention is shortened so that it cycles within the run: every surface holds
about `--window` seconds of messages. At the end of each decile (a tenth of the messages consumed)
the run records each surface's request latencies, the server's RSS (`postbox dev` and its worker
processes), PostgreSQL's table and index sizes by group, the messages each surface still holds, and
what the decile's cost is made of (WAL, checkpoints, writes, autovacuum runs, shared buffers, the
server's CPU by kind of process: bench/soak_causes.py). It prints the deciles, the last/first ratios
(PASS within 1.2x) and each surface's holdings against the bound its retention implies. See
bench/README.md and docs/soak.md.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg  # noqa: E402

from bench import common, soak_causes  # noqa: E402

DECILES = 10
FLAT = 1.2  # the last decile within this of the first
PAGES_NOISE = 32 * 8192  # a table group's size may move this much whatever its ratio: a few pages of a small table
IDLE_S = 5  # the server's CPU at rest is measured this long before the first decile
MARGIN_S = 10  # on top of a surface's hold: a sweep's own time and the scheduler's jitter
VT = 30
SURFACES = ("queues", "partitioned", "work", "durable")
PARTITIONS = 4  # the partitioned queue's pushes go round these
BODY_PAD = "x" * 64  # a message is ~100 bytes of JSON


@dataclass(frozen=True)
class Plan:
    """What the run does: its sizes, its pace and the retention each surface is given."""

    messages: int  # in all, over the four surfaces
    batch: int  # messages a produce call carries (work: published one per call, consumed in batches)
    rate: float  # messages a second per surface (0: as fast as it goes)
    window: int  # seconds of messages each surface holds
    work_clients: int  # the work surface's publishes are one request each: more client processes

    @property
    def per_surface_decile(self) -> int:
        share = self.messages / len(SURFACES) / DECILES
        return max(self.batch, round(share / self.batch) * self.batch)

    @property
    def total(self) -> int:
        return self.per_surface_decile * len(SURFACES) * DECILES

    @property
    def rotate_s(self) -> float:
        """A durable stream is appended to for this long, then left to its Stream-TTL (the same)."""
        return self.window / 2

    def hold_s(self, surface: str) -> float:
        """How long a consumed message can stay in its surface's tables: retention + the agent's period."""
        return {
            "queues": self.window,  # retention 0 days: the next queue-retention run (every window) deletes it
            "work": self.window,  # retention 0 days: the next work-archiver run (every window) deletes it
            "partitioned": self.window + local_period("partitioned-maintenance"),  # retentionSeconds = window
            "durable": self.window + local_period("durable-expiry"),  # rotate_s + Stream-TTL + the sweep
        }[surface]

    def agent_periods(self) -> str:
        return f"queue-retention={self.window},work-archiver={self.window}"


def local_period(agent: str) -> int:
    """How often `postbox dev` runs an agent the run leaves on the schedule table's period."""
    from functions.schedules import AGENTS

    return next(a.local_period for a in AGENTS if a.name == agent)


def body(n: int) -> dict:
    return {"to": "a@example.com", "n": n, "pad": BODY_PAD}


# ---- clients: one per process; each times its own requests --------------------------------------


class Client:
    """A surface's client over HTTP: `produce` sends a batch, `consume` takes up to n and acks them.
    Each request's (or take + ack pair's) seconds go to `times['produce']` or `times['consume']`."""

    def __init__(self, base_url: str, key: str) -> None:
        from tests.support.http import client

        self.http = client(base_url, key)
        self.times: dict[str, list[float]] = {"produce": [], "consume": []}

    def _json(self, method: str, path: str, **kw: Any) -> Any:
        r = self.http.request(method, path, **kw)
        r.raise_for_status()
        return r.json() if r.content else None

    def timed(self, kind: str, call, *args: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        out = call(*args, **kw)
        self.times[kind].append(time.perf_counter() - t0)
        return out

    def produce(self, values: list) -> None:
        self.timed("produce", self._produce, values)

    def consume(self, n: int) -> int:
        return self.timed("consume", self._consume, n)

    def close(self) -> None:
        self.http.close()


class QueuesClient(Client):
    def __init__(self, base_url: str, key: str, queue: str) -> None:
        super().__init__(base_url, key)
        self.path = f"/api/v1/queues/{queue}"

    def _produce(self, values: list) -> None:
        self._json("POST", f"{self.path}/send_batch", json={"messages": values})

    def _consume(self, n: int) -> int:
        ids = [m["msg_id"] for m in self._json("POST", f"{self.path}/read", json={"qty": n, "vt": VT})["messages"]]
        return len(self._json("POST", f"{self.path}/archive", json={"msg_ids": ids})["archived"]) if ids else 0


class PartitionedClient(Client):
    def __init__(self, base_url: str, key: str, queue: str) -> None:
        super().__init__(base_url, key)
        self.queue, self.pushes = queue, 0

    def _produce(self, values: list) -> None:
        partition = f"p{self.pushes % PARTITIONS}"
        self.pushes += 1
        self._json("POST", "/api/v1/push", json={"items": [
            {"queue": self.queue, "partition": partition, "payload": v} for v in values]})

    def _consume(self, n: int) -> int:
        r = self.http.get(f"/api/v1/pop/queue/{self.queue}", params={"batch": n})
        r.raise_for_status()
        if r.status_code == 204:
            return 0
        got = r.json()["messages"]
        last = got[-1]
        self._json("POST", "/api/v1/ack", json={"transactionId": last["transactionId"], "leaseId": last["leaseId"],
                                                 "partitionId": last["partitionId"]})
        return len(got)


class WorkClient(Client):
    def __init__(self, base_url: str, key: str, scope: str, queue: str) -> None:
        super().__init__(base_url, key)
        self.scope = f"/v1/modules/scaiqueue/scopes/{scope}"
        self.queue = f"{self.scope}/queues/{queue}"

    def produce(self, values: list) -> None:
        for v in values:  # the work surface publishes one message a request
            self.timed("produce", self._json, "POST", f"{self.queue}/messages", json={"body": v})

    def _consume(self, n: int) -> int:
        claimed = self._json("POST", f"{self.queue}/messages/claim",
                             json={"batch_size": n, "visibility_timeout_s": VT})["data"]
        if not claimed:
            return 0
        items = [{"id": m["id"], "claim_token": m["claim_token"]} for m in claimed]
        done = self._json("POST", f"{self.scope}/messages/complete-batch", json={"items": items})["data"]
        return sum(1 for d in done if d["ok"])


class DurableClient(Client):
    """Appends a batch (a JSON array: one message each) and reads it back from where it last read.
    Every `rotate_s` it moves to a new stream, created with a sliding Stream-TTL of `rotate_s`: the
    one it leaves expires that long after its last read, and the durable-expiry agent removes it."""

    JSON = {"content-type": "application/json"}

    def __init__(self, base_url: str, key: str, prefix: str, rotate_s: float) -> None:
        super().__init__(base_url, key)
        self.prefix, self.rotate_s, self.streams = prefix, rotate_s, 0
        self._new_stream()

    def _new_stream(self) -> None:
        self.streams += 1
        self.path = f"/v1/stream/{self.prefix}-{self.streams}"
        r = self.http.put(self.path, headers={**self.JSON, "Stream-TTL": str(max(1, round(self.rotate_s)))})
        r.raise_for_status()
        self.offset, self.since = "-1", time.monotonic()

    def produce(self, values: list) -> None:
        if time.monotonic() - self.since >= self.rotate_s:
            self._new_stream()  # untimed: a create is not an append
        super().produce(values)

    def _produce(self, values: list) -> None:
        self.http.post(self.path, json=values, headers=self.JSON).raise_for_status()

    def _consume(self, n: int) -> int:
        r = self.http.get(self.path, params={"offset": self.offset})
        r.raise_for_status()
        self.offset = r.headers["stream-next-offset"]
        return len(r.json()) if r.content else 0


# ---- the client processes ---------------------------------------------------------------------------


@dataclass
class Role:
    """One client process: its surface, how to make its client, its share of each decile."""

    surface: str
    make: Any
    share: int  # messages each decile
    rate: float  # messages a second (0: unpaced)


def run_share(client: Client, share: int, batch: int, rate: float, first: int) -> float:
    """Produce `share` messages a batch at a time, consuming each batch before the next, paced to
    `rate`; the seconds it took."""
    t0 = time.perf_counter()
    done = 0
    while done < share:
        n = min(batch, share - done)
        if rate:
            ahead = t0 + done / rate - time.perf_counter()
            if ahead > 0:
                time.sleep(ahead)
        client.produce([body(first + done + k) for k in range(n)])
        got, idle_since = 0, time.monotonic()
        while got < n:
            took = client.consume(n - got)
            got += took
            if took:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > 30:
                raise RuntimeError(f"{type(client).__name__}: {n - got} of a batch not consumable after 30 s")
        done += n
    return time.perf_counter() - t0


def role_process(role: Role, index: int, batch: int, warm: int, start, phase, results) -> None:
    """A client process: each time the parent starts a round, a warm-up share (phase 0) or a decile's
    (phase 1-10); phase -1 ends it."""
    client = role.make()
    try:
        sent = 0
        while True:
            start.wait()
            decile = phase.value
            if decile < 0:
                break
            share = warm if decile == 0 else role.share
            client.times = {"produce": [], "consume": []}
            seconds = run_share(client, share, batch, role.rate, index * 10**9 + sent)
            sent += share
            results.put((index, decile, share, seconds, client.times, None))
    except BaseException as error:  # the parent reports it and stops the run
        results.put((index, -1, 0, 0.0, {}, repr(error)))
    finally:
        client.close()


# ---- what the parent measures between deciles -----------------------------------------------------

GROUPS = (  # table-name prefixes, first match wins; the rest is `other`
    ("queues", ("queue_", "queues", "consumer_")),
    ("partitioned", ("pq_",)),
    ("log engine", ("log_",)),
    ("work journal", ("work_journal",)),
    ("work", ("work_",)),
    ("durable", ("durable_",)),
)
GROUP_NAMES = tuple(g for g, _ in GROUPS) + ("other",)

SIZES = """
SELECT c.relname, pg_table_size(c.oid), pg_indexes_size(c.oid)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname !~ '^pg_toast'
"""
HELD = """
SELECT (SELECT count(*) FROM queue_messages WHERE queue_id = %(q)s)
         + (SELECT count(*) FROM queue_archive WHERE queue_id = %(q)s),
       (SELECT coalesce(sum(s.end_offset - s.first_offset), 0) FROM log_segments s
          JOIN log_partitions p ON p.id = s.partition_id WHERE p.owner_kind = 'pq'),
       (SELECT count(*) FROM work_messages WHERE scope_id = %(scope)s),
       (SELECT coalesce(sum(s.end_offset - s.first_offset), 0) FROM log_segments s
          JOIN log_partitions p ON p.id = s.partition_id WHERE p.owner_kind = 'durable'),
       (SELECT count(*) FROM durable_streams)
"""
AGENT_RUNS = "SELECT agent, total_runs, total_processed, total_errors FROM agent_runs"
VACUUMS = "SELECT relname, n_live_tup, n_dead_tup, autovacuum_count + vacuum_count FROM pg_stat_user_tables"


def group_of(table: str) -> str:
    return next((g for g, prefixes in GROUPS if table.startswith(prefixes)), "other")


def server_rss(pid: int) -> int:
    """Resident bytes of `postbox dev` and its worker processes."""
    import psutil

    root = psutil.Process(pid)
    total = 0
    for proc in (root, *root.children(recursive=True)):
        with contextlib.suppress(psutil.NoSuchProcess):
            total += proc.memory_info().rss
    return total


@dataclass
class Snapshot:
    """The state at a decile's end (decile 0: after the warm-up, before the run)."""

    decile: int
    at: float  # seconds since the run started
    messages: int  # consumed so far
    rss: int
    tables: dict[str, tuple[int, int]]  # name -> (table bytes, index bytes)
    held: dict[str, int]  # surface -> messages still in its tables
    streams: int  # durable streams that exist
    vacuums: dict[str, tuple[int, int, int]]  # name -> (live rows, dead rows, vacuums so far), as estimated
    counters: soak_causes.Counters  # PostgreSQL's WAL, checkpoints, writes, autovacuums so far; buffers in use
    seconds: float = 0.0  # the decile's wall time
    cpu: float = 0.0  # CPU seconds the server (postbox dev with its workers and agents, PostgreSQL) used in it,
    # less what it uses at rest in that time
    cpu_by_kind: dict[str, float] = field(default_factory=dict)  # the server's CPU seconds in it by kind of
    # process (postbox dev, PostgreSQL's backends, each of its background processes), not less its CPU at rest
    load: float = 0.0  # the machine's 1-minute load average at its end
    machine: soak_causes.MachineSpeed | None = None  # the machine's own speed in it
    active: dict[str, float] = field(default_factory=dict)  # surface -> its clients' busiest time
    times: dict[tuple[str, str], list[float]] = field(default_factory=dict)  # (surface, kind) -> seconds

    def group(self, name: str, index: int) -> int:
        return sum(v[index] for t, v in self.tables.items() if group_of(t) == name)


# ---- the run ---------------------------------------------------------------------------------------


class Soak:
    def __init__(self, url: str, plan: Plan) -> None:
        from postbox.queues import service
        from postbox.work import queues, scopes

        self.url, self.plan = url, plan
        self.tenant, self.key, principal = common.bench_tenant(url)
        service.create_queue(principal, "soak", {})
        self.scope = scopes.create_scope(principal, {"slug": "soak"})["id"]
        self.work_queues = [queues.create_queue(principal, self.scope, {"slug": f"soak{i}"})["id"]
                            for i in range(plan.work_clients)]
        with psycopg.connect(url, autocommit=True) as conn:
            # Below what the API accepts (a day at least): everything ended or archived goes at the
            # agent's next run, so retention cycles every `window` seconds instead of every day.
            conn.execute("UPDATE queues SET retention_days = 0 WHERE name = 'soak'")
            conn.execute("UPDATE work_scopes SET retention_days = 0 WHERE id = %s", (self.scope,))
            self.queue_pk = conn.execute("SELECT id FROM queues WHERE name = 'soak'").fetchone()[0]
            naptime = conn.execute("SELECT setting::int, unit FROM pg_settings WHERE name = 'autovacuum_naptime'")
            value, unit = naptime.fetchone()
            self.naptime = value * (60 if unit == "min" else 1)
        # The warm-up lasts until every surface's retention has run and a vacuum followed: the first
        # decile then starts from the steady state the last one is compared with.
        self.warm_s = max(plan.hold_s(x) for x in SURFACES) + MARGIN_S + self.naptime
        self.buffercache = soak_causes.enable_buffercache(url)
        self.snapshots: list[Snapshot] = []

    def roles(self, base: str) -> list[Role]:
        p, share = self.plan, self.plan.per_surface_decile
        key, work = self.key, p.work_clients
        roles = [
            Role("queues", lambda: QueuesClient(base, key, "soak"), share, p.rate),
            Role("partitioned", lambda: PartitionedClient(base, key, "soak"), share, p.rate),
            Role("durable", lambda: DurableClient(base, key, "soak", p.rotate_s), share, p.rate),
        ]
        for i, queue in enumerate(self.work_queues):  # the share split over the work clients, one queue each
            part = share // work + (share % work if i == 0 else 0)
            roles.append(Role("work", lambda q=queue: WorkClient(base, key, self.scope, q), part, p.rate / work))
        return roles

    def configure_partitioned(self, base: str) -> None:
        from tests.support.http import client

        with client(base, self.key) as c:
            c.post("/api/v1/configure", json={"queue": "soak", "options": {
                "retentionSeconds": self.plan.window}}).raise_for_status()

    def measure(self, decile: int, started: float, messages: int, gateway_pid: int) -> Snapshot:
        with psycopg.connect(self.url, autocommit=True) as conn:
            counters = soak_causes.read_counters(conn, group_of, self.buffercache)
            tables = {name: (t, i) for name, t, i in conn.execute(SIZES)}
            q, p, w, d, streams = conn.execute(HELD, {"q": self.queue_pk, "scope": self.scope}).fetchone()
            vacuums = {name: (live, dead, n) for name, live, dead, n in conn.execute(VACUUMS)}
        return Snapshot(decile, time.perf_counter() - started, messages, server_rss(gateway_pid), tables,
                        {"queues": q, "partitioned": p, "work": w, "durable": d}, streams, vacuums, counters)

    def server_cpu_at_rest(self, gateway: common.DevServer) -> float:
        """CPU seconds a second the server uses with no client: its agents' rounds. Subtracted from each
        decile's CPU, so a slower decile's CPU per message does not grow by the agents' share alone.
        The same by kind of process goes to `idle_by_kind`."""
        with self.cpu_by_kind(gateway) as by_kind, self.cpu_meter(gateway) as idle:
            time.sleep(IDLE_S)
        self.idle_by_kind = {k: v / (IDLE_S + 0.3) for k, v in by_kind.used.items()}
        return (idle.used["gateway"] + idle.used["PostgreSQL"]) / (IDLE_S + 0.3)  # the meter waits 0.3 s more

    def cpu_meter(self, gateway: common.DevServer) -> common.CpuMeter:
        return common.CpuMeter(gateway=gateway.proc.pid, PostgreSQL=common.postmaster_pid(self.url))

    def cpu_by_kind(self, gateway: common.DevServer) -> soak_causes.CpuByKind:
        return soak_causes.CpuByKind(gateway.proc.pid, common.postmaster_pid(self.url))

    def agent_runs(self) -> dict[str, tuple[int, int, int]]:
        with psycopg.connect(self.url, autocommit=True) as conn:
            return {a: (r, p, e) for a, r, p, e in conn.execute(AGENT_RUNS)}

    def run(self) -> None:
        import multiprocessing

        env = {"POSTBOX_AGENT_EVERY": self.plan.agent_periods()}
        gateway = common.DevServer(self.url, **env).start()
        try:
            self.configure_partitioned(gateway.url)
            roles = self.roles(gateway.url)
            ctx = multiprocessing.get_context("fork")
            start, phase, results = ctx.Barrier(len(roles) + 1), ctx.Value("i", 0), ctx.Queue()
            warm = max(self.plan.batch * 20, self.plan.per_surface_decile // 5)  # a warm-up round's share
            procs = [ctx.Process(target=role_process, args=(r, i, self.plan.batch, warm, start, phase, results))
                     for i, r in enumerate(roles)]
            for proc in procs:
                proc.start()
            try:
                self._deciles(roles, start, phase, results, gateway)
                phase.value = -1
                start.wait(timeout=30)
            finally:
                for proc in procs:
                    proc.join(timeout=10)
                    if proc.is_alive():
                        proc.terminate()
        finally:
            problems = gateway.errors()
            gateway.stop()
        if problems.strip():
            print(f"\npostbox dev wrote on stderr (its end):\n{problems}")

    def _round(self, decile: int, roles: list[Role], start, phase, results, gateway: common.DevServer) -> tuple:
        """Start a round on every client process and wait for all of them: (their results, the wall
        seconds, the server's CPU meter, its CPU by kind of process, the machine's speed)."""
        with (self.cpu_by_kind(gateway) as by_kind, self.cpu_meter(gateway) as cpu,
              soak_causes.MachineSpeed() as machine):
            phase.value = decile
            start.wait()
            t0 = time.perf_counter()
            got = [results.get() for _ in roles]
            seconds = time.perf_counter() - t0
        failed = [e for *_, e in got if e]
        if failed:
            raise RuntimeError(f"a client process failed: {failed[0]}")
        return got, seconds, cpu, by_kind.used, machine

    def _deciles(self, roles: list[Role], start, phase, results, gateway: common.DevServer) -> None:
        common.progress(f"warm-up: {self.warm_s:.0f} s at the run's pace")
        t0, self.warm_messages = time.perf_counter(), 0
        while not self.warm_messages or time.perf_counter() - t0 < self.warm_s:
            got, *_ = self._round(0, roles, start, phase, results, gateway)
            self.warm_messages += sum(g[2] for g in got)
        self.warm_seconds = time.perf_counter() - t0
        self.idle_cpu = self.server_cpu_at_rest(gateway)
        self.runs_before = self.agent_runs()
        started, consumed = time.perf_counter(), 0
        self.snapshots.append(self.measure(0, started, 0, gateway.proc.pid))
        for decile in range(1, DECILES + 1):
            common.progress(f"decile {decile} of {DECILES}")
            got, seconds, cpu, snap_by_kind, machine = self._round(decile, roles, start, phase, results, gateway)
            consumed += sum(g[2] for g in got)
            snap = self.measure(decile, started, consumed, gateway.proc.pid)
            snap.seconds, snap.load, snap.cpu_by_kind, snap.machine = seconds, os.getloadavg()[0], snap_by_kind, machine
            snap.cpu = max(0.0, cpu.used["gateway"] + cpu.used["PostgreSQL"] - self.idle_cpu * (seconds + 0.3))
            for index, _, _, busy, times, _ in got:
                surface = roles[index].surface
                snap.active[surface] = max(snap.active.get(surface, 0.0), busy)
                for kind, samples in times.items():
                    snap.times.setdefault((surface, kind), []).extend(samples)
            self.snapshots.append(snap)
        self.runs_after = self.agent_runs()

    # ---- the report ----

    def report(self) -> None:
        snaps, plan = self.snapshots, self.plan
        runs = snaps[1:]
        first, last = runs[0], runs[-1]
        share = plan.per_surface_decile
        mb = 1 << 20

        print(f"\nwarm-up: {self.warm_messages:,} messages in {self.warm_seconds:.0f} s (a retention cycle and a"
              " vacuum), not counted below")
        print("\n1. The run by decile (the row 0: after the warm-up, before the first decile); CPU: the server's"
              f" (postbox dev and PostgreSQL) per message, less its {self.idle_cpu * 1000:.0f} ms a second at rest")
        heads = ("decile", "messages", "at s", "msg/s", "CPU ms/msg", "load", "RSS MB", "tables MB", "index MB",
                 *(f"held {s[:5]}" for s in SURFACES), "streams")
        print("  ".join(f"{h:>11}" for h in heads))
        for s in snaps:
            table_b = sum(t for t, _ in s.tables.values())
            index_b = sum(i for _, i in s.tables.values())
            per = plan.total // DECILES
            rate, cpu = (f"{per / s.seconds:,.0f}", f"{s.cpu / per * 1000:.3f}") if s.seconds else ("-", "-")
            load = f"{s.load:.1f}" if s.seconds else "-"
            cells = (s.decile, f"{s.messages:,}", f"{s.at:,.0f}", rate, cpu, load, f"{s.rss / mb:,.1f}",
                     f"{table_b / mb:,.1f}",
                     f"{index_b / mb:,.1f}", *(f"{s.held[x]:,}" for x in SURFACES), s.streams)
            print("  ".join(f"{c:>11}" for c in cells))

        soak_causes.report(2, snaps, plan.total // DECILES, self.idle_by_kind, GROUP_NAMES)

        print("\n3. Latency by surface and decile, ms (produce: one request; consume: take + ack;"
              " msg/s: the surface's clients' own time)")
        for surface in SURFACES:
            op = {"queues": "send_batch | read+archive", "partitioned": "push | pop+ack",
                  "work": "publish (one message) | claim+complete-batch", "durable": "append | read"}[surface]
            print(f"  {surface}: {op}")
            print("  " + "  ".join(f"{h:>10}" for h in ("decile", "msg/s", "prod p50", "prod p99", "cons p50",
                                                          "cons p99", "calls")))
            for s in runs:
                prod, cons = s.times[surface, "produce"], s.times[surface, "consume"]
                cells = (s.decile, f"{share / s.active[surface]:,.0f}", *_p50_p99(prod), *_p50_p99(cons),
                         f"{len(prod) + len(cons):,}")
                print("  " + "  ".join(f"{c:>10}" for c in cells))

        print("\n4. Table and index sizes by group, MB (table = heap + TOAST; index = all its indexes)")
        print("  " + "  ".join(f"{h:>14}" for h in ("decile", *GROUP_NAMES)))
        for s in snaps:
            cells = (s.decile, *(f"{s.group(g, 0) / mb:.2f}+{s.group(g, 1) / mb:.2f}" for g in GROUP_NAMES))
            print("  " + "  ".join(f"{c:>14}" for c in cells))
        print("  the largest tables at the end, MB (after decile 1), with PostgreSQL's estimates of their live and"
              " dead rows and the vacuums they had during the run:")
        for t in sorted(last.tables, key=lambda t: -sum(last.tables[t]))[:8]:
            live, dead, vacuums = last.vacuums.get(t, (0, 0, 0))
            before = snaps[0].vacuums.get(t, (0, 0, 0))[2]
            print(f"    {t:<24} {sum(last.tables[t]) / mb:>7.2f} ({sum(first.tables.get(t, (0, 0))) / mb:.2f})"
                  f"  {live:>9,} live  {dead:>9,} dead  {vacuums - before:>3} vacuums")

        self._checks(runs)

    def _checks(self, runs: list[Snapshot]) -> None:
        plan, first, last = self.plan, runs[0], runs[-1]
        share = plan.per_surface_decile
        print(f"\n5. Last decile / first (PASS within {FLAT}x)")
        per = plan.total // DECILES
        lines = [("server RSS", first.rss, last.rss, "MB"),
                 ("server CPU per message", first.cpu / per * 1000, last.cpu / per * 1000, "ms")]
        for surface in SURFACES:
            for kind in ("produce", "consume"):
                a, b = _p50_p99(first.times[surface, kind], raw=True), _p50_p99(last.times[surface, kind], raw=True)
                lines += [(f"{surface} {kind} p50", a[0], b[0], "ms"), (f"{surface} {kind} p99", a[1], b[1], "ms")]
        slowed = (last.machine.probe_ms / first.machine.probe_ms
                  if first.machine and last.machine and first.machine.probe_ms else 1.0)
        print(f"  (the machine itself: a fixed piece of work took {slowed:.2f}x the CPU time in the last decile"
              " that it took in the first; `on its speed` divides each time's ratio by that)")
        for label, a, b, unit in lines:
            scale = (1 << 20) if unit == "MB" else 1
            on_speed = b / a / slowed
            adjusted = "" if unit == "MB" else f"   on its speed {on_speed:.2f} {_verdict(on_speed <= FLAT)}"
            print(f"  {_verdict(b / a <= FLAT)}  {label:<28} {a / scale:>9.2f} -> {b / scale:>9.2f} {unit}"
                  f"   ratio {b / a:.2f}{adjusted}")
        for label, a, b, unit in soak_causes.last_over_first(self.snapshots, per):
            form, ratio = ",.0f" if unit == "B" else ".2f", f"{b / a:.2f}" if a else "-"
            print(f"  ....  {label:<28} {a:>9{form}} -> {b:>9{form}} {unit:<2}   ratio {ratio}   (section 2)")
        print(f"  ....  {'throughput, all four':<28} {per / first.seconds:>9,.0f} -> {per / last.seconds:>9,.0f} msg/s"
              f" ratio {first.seconds / last.seconds:.2f}")
        print(f"  ....  {'machine load average':<28} {first.load:>9.1f} -> {last.load:>9.1f}"
              "       (other work on the machine moves latency, not the server's CPU per message)")

        print(f"\n6. Messages held against the bound retention implies: rate x (hold + {MARGIN_S} s), rate = the"
              " surface's fastest decile (its clients' own time)")
        bounds = {}
        for surface in SURFACES:
            rate = max(share / s.active[surface] for s in runs)
            hold = plan.hold_s(surface)
            bounds[surface] = bound = rate * (hold + MARGIN_S)
            most = max(s.held[surface] for s in runs)
            print(f"  {_verdict(most <= bound)}  {surface:<12} hold {hold:>4.0f} s, bound {bound:>9,.0f}; held at"
                  f" most {most:,} (per decile: {' '.join(f'{s.held[surface]:,}' for s in runs)})")

        half = DECILES // 2
        print(f"\n7. Table + index bytes by group: the largest at the end of deciles {half + 1}-{DECILES} within"
              f" {FLAT}x (or {PAGES_NOISE >> 10} KB) of the largest at the end of deciles 1-{half} (a deleted row's"
              " space is reused once vacuumed: a bounded table's size goes up and down with where the sweeps and"
              " vacuums stood, a growing one keeps setting new highs)")
        for group in GROUP_NAMES:
            sizes = [s.group(group, 0) + s.group(group, 1) for s in runs]
            if group == "work journal":
                per = (sizes[-1] - sizes[0]) / (share * (len(runs) - 1)) if len(runs) > 1 else 0
                print(f"  ....  {group:<12} {sizes[-1] / (1 << 20):>8.2f} MB at the end; kept 90 days whatever the"
                      f" scope's retention: grows ~{per:,.0f} bytes a work message (not bounded within this run)")
                continue
            early, late = max(sizes[:half]), max(sizes[half:])
            ok = late <= FLAT * early or late - early < PAGES_NOISE
            print(f"  {_verdict(ok)}  {group:<12} {early / (1 << 20):>8.2f} MB ->"
                  f" {late / (1 << 20):>8.2f} MB   ratio {late / early:.2f}")

        print("\n8. Agents during the run (runs, rows processed, errors)")
        for agent, (r, p, e) in sorted(self.runs_after.items()):
            r0, p0, e0 = self.runs_before.get(agent, (0, 0, 0))
            if agent in ("queue-retention", "work-archiver", "partitioned-maintenance", "durable-expiry",
                         "flows-hosted", "work-visibility-timeout", "work-expiry") or e - e0:
                print(f"  {agent:<26} {r - r0:>5} runs  {p - p0:>10,} processed  {e - e0:>3} errors")

def _p50_p99(samples: list[float], raw: bool = False) -> tuple:
    if len(samples) < 2:
        values = (samples[0] * 1000,) * 2 if samples else (float("nan"),) * 2
    else:
        values = (statistics.median(samples) * 1000, common.quantile_ms(samples, 0.99))
    return values if raw else tuple(f"{v:.2f}" for v in values)


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def main() -> None:
    def more(parser) -> None:
        parser.add_argument("--messages", type=int, default=1_000_000,
                            help="messages in all, over the four surfaces (default 1,000,000)")
        parser.add_argument("--window", type=int, default=60,
                            help="seconds of messages each surface holds: its retention and agent periods (default 60)")
        parser.add_argument("--rate", type=float, default=100,
                            help="messages a second per surface; 0 runs as fast as the clients go (default 100)")
        parser.add_argument("--batch", type=int, default=10, help="messages a produce call carries (default 10)")
        parser.add_argument("--work-clients", type=int, default=2,
                            help="client processes of the work surface, whose publishes are one a request (default 2)")

    def run(args, url: str) -> None:
        from functions.local.cli import default_workers

        messages = 20_000 if args.quick else args.messages
        window = min(args.window, 10) if args.quick else args.window
        plan = Plan(messages, args.batch, args.rate, window, args.work_clients)
        print(f"Postbox soak: {plan.total:,} messages, a quarter through each of queues, partitioned queues, work"
              f" and durable streams over HTTP (postbox dev, {default_workers()} worker processes), all at once")
        print(f"pace: {'as fast as the clients go' if not plan.rate else f'{plan.rate:,.0f} msg/s per surface'};"
              f" batches of {plan.batch}; {plan.per_surface_decile:,} messages per surface per decile")
        print(f"retention: queues and work 0 days (agents every {plan.window} s: {plan.agent_periods()}),"
              f" partitioned retentionSeconds={plan.window}, durable streams rotated every {plan.rotate_s:g} s"
              f" with Stream-TTL {plan.rotate_s:g} s")
        soak = Soak(url, plan)
        soak.run()
        soak.report()

    common.bench_main(__doc__, 2, run, "20,000 messages, a 10-second window (about three minutes)", more)


if __name__ == "__main__":
    main()
