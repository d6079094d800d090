"""What routing a request through the directory costs: the same warm requests on a one-cell and on
a two-cell `postbox dev`, in alternating rounds of the same run.

    .venv/bin/python bench/cells.py [--quick] [--fast] [--clients N]

Two servers run on one embedded PostgreSQL: `postbox dev` (one cell, no directory) and
`postbox dev --cells 2` with the tenant placed on its second cell, so every request of it looks its
key up on both cells when cold and its cell up in the directory, then from the caches once warm.
Each server's tenant has one queue; each round runs the same workload on each server in turn
(`--clients` threads, one HTTP connection each: a single `send`, then a `read` of one message and
its `archive`), and the figures are the medians over the rounds: requests a second, and each request
type's p50. The goal (issue 42): the two-cell server within 1.05x of the one-cell server.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402

from bench import common  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GOAL = 1.05
CLIENTS = 4


def admin(server: common.DevServer, *args: str) -> dict:
    """`postbox admin` against the server's state directory (and so its cells)."""
    env = {**os.environ, "DATABASE_URL": server.database_url, "POSTBOX_STATE_DIR": str(server.state)}
    done = subprocess.run([sys.executable, "-m", "functions.local.cli", "admin", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def tenant_key(server: common.DevServer, name: str, cell: str | None) -> str:
    admin(server, "tenant-create", name, "--plan", "unlimited", *(["--cell", cell] if cell else []))
    return admin(server, "key-create", name, "--role", "manage")["key"]


class Client:
    """One connection of one server, as the tenant its key belongs to."""

    def __init__(self, base: str, key: str) -> None:
        self.http = httpx.Client(base_url=base + "/api/v1/queues/routed", headers={"apikey": key}, timeout=30)

    def cycle(self) -> dict[str, float]:
        """A send, a read of one message and its archive; each request's seconds."""
        times = {}
        t0 = time.perf_counter()
        self.http.post("/send", json={"message": {"n": 1}}).raise_for_status()
        t1 = time.perf_counter()
        got = self.http.post("/read", json={"qty": 1, "vt": 30})
        got.raise_for_status()
        t2 = time.perf_counter()
        for message in got.json()["messages"]:
            self.http.post("/archive", json={"msg_ids": [message["msg_id"]]}).raise_for_status()
        t3 = time.perf_counter()
        times["send"], times["read"], times["archive"] = t1 - t0, t2 - t1, t3 - t2
        return times

    def close(self) -> None:
        self.http.close()


def one_round(base: str, key: str, clients: int, cycles: int) -> tuple[float, dict[str, list[float]]]:
    """Requests a second over `clients` threads, and every request's seconds by type."""

    def work(client: Client, _: int) -> list[dict[str, float]]:
        return [client.cycle() for _ in range(cycles)]

    elapsed, results = common.run_clients(clients, lambda: Client(base, key), work)
    samples: dict[str, list[float]] = {"send": [], "read": [], "archive": []}
    for per_client in results:
        for cycle in per_client:
            for kind, seconds in cycle.items():
                samples[kind].append(seconds)
    return clients * cycles * 3 / elapsed, samples


def run(args, url: str) -> None:
    import psycopg

    second = psycopg.conninfo.make_conninfo(url, dbname="cells_bench")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE DATABASE cells_bench")
    servers = {"one cell": common.DevServer(url), "two cells": common.DevServer(second, args=("--cells", "2"))}
    try:
        keys = {}
        for label, server in servers.items():
            server.start()
            keys[label] = tenant_key(server, "routed-bench", "cell-2" if label == "two cells" else None)
            held = {c["name"]: c["tenants"] for c in admin(server, "cells")}
            print(f"{label}: " + "; ".join(f"{name} holds {', '.join(t) or 'nothing'}" for name, t in held.items()))
            httpx.post(server.url + "/api/v1/queues", headers={"apikey": keys[label]}, json={"name": "routed"},
                       timeout=30).raise_for_status()
        rounds, cycles = (3, 100) if args.quick else (8, 250)
        for label, server in servers.items():  # warm: every worker has served the routes, the caches are full
            one_round(server.url, keys[label], args.clients * 2, 20)
        rates: dict[str, list[float]] = {label: [] for label in servers}
        p50s: dict[str, dict[str, list[float]]] = {label: {"send": [], "read": [], "archive": []} for label in servers}
        for r in range(rounds):
            order = list(servers) if r % 2 == 0 else list(reversed(servers))
            for label in order:
                rate, samples = one_round(servers[label].url, keys[label], args.clients, cycles)
                rates[label].append(rate)
                for kind, seconds in samples.items():
                    p50s[label][kind].append(common.p50_ms(seconds))
            common.progress(f"round {r + 1} of {rounds}")
        print(f"\n{args.clients} clients, {rounds} rounds of {cycles} send + read + archive cycles each, per server"
              " (medians over the rounds)")
        print(f"{'':12} {'requests/s':>12} {'send p50 ms':>12} {'read p50 ms':>12} {'archive p50':>12}")
        for label in servers:
            row = [statistics.median(rates[label])] + [statistics.median(p50s[label][k]) for k in
                                                        ("send", "read", "archive")]
            print(f"{label:12} {row[0]:>12,.0f} {row[1]:>12.2f} {row[2]:>12.2f} {row[3]:>12.2f}")
        one, two = (statistics.median(rates[label]) for label in servers)
        ratio = one / two
        print(f"\ntwo cells against one: {ratio:.3f}x the time per request"
              f" ({'PASS' if ratio <= GOAL else 'FAIL'}: goal within {GOAL}x)")
        for kind in ("send", "read", "archive"):
            k_ratio = statistics.median(p50s["two cells"][kind]) / statistics.median(p50s["one cell"][kind])
            print(f"  {kind} p50: {k_ratio:.3f}x")
    finally:
        for server in servers.values():
            if server.errors().strip():
                print(f"\n{server.errors()}", file=sys.stderr)
            server.stop()


def main() -> None:
    def more(parser) -> None:
        parser.add_argument("--clients", type=int, default=CLIENTS, help=f"client threads (default {CLIENTS})")

    common.bench_main(__doc__, CLIENTS, run, quick_help="3 rounds of 100 cycles (a minute)", more_args=more)


if __name__ == "__main__":
    main()
