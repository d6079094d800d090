"""What the benchmarks share: environment, the embedded server, client threads, timing, output."""

from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg


def configure(clients: int) -> None:
    """Environment the domain layer and the gateway read; call before they are first used."""
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    os.environ["POSTBOX_POOL_MIN"] = str(clients)
    os.environ["POSTBOX_POOL_MAX"] = str(max(clients * 2, 4))
    warnings.filterwarnings("ignore", category=UserWarning, module="aws_lambda_powertools.*")
    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")


def start_server(fast: bool) -> tuple[Any, str]:
    """A throwaway embedded PostgreSQL and a fresh `bench` database on it."""
    from functions.local.embedded import EmbeddedPostgres

    root = Path(tempfile.mkdtemp(prefix="postbox-bench-"))
    root.chmod(0o755)  # the server runs as another user when we are root
    server = EmbeddedPostgres(root / "pgdata", keep=False, fast=fast)
    return server, server.ensure_database("bench", fresh=True)


def server_description(url: str) -> str:
    """PostgreSQL's version and the durability settings in force, for the report's header."""
    with psycopg.connect(url) as conn:
        version = conn.execute("SHOW server_version").fetchone()[0]
        names = ("fsync", "synchronous_commit", "full_page_writes", "shared_buffers")
        values = [f"{n}={conn.execute(f'SHOW {n}').fetchone()[0]}" for n in names]
    return f"PostgreSQL {version} ({', '.join(values)})"


def sql_blocks(path: Path) -> dict[str, str]:
    """The `-- name: x` blocks of a SQL file, by name."""
    blocks: dict[str, str] = {}
    for part in re.split(r"^-- name: *", path.read_text(), flags=re.M)[1:]:
        name, _, body = part.partition("\n")
        blocks[name.strip()] = body.strip()
    return blocks


def run_clients(n: int, make_client: Callable[[], Any], work: Callable[[Any, int], Any]) -> tuple[float, list]:
    """Run `work(client, i)` on n threads, each with its own client made before the clock starts.

    Returns the wall time from the common start to the last thread's end, and each thread's result.
    """
    clients = [make_client() for _ in range(n)]
    results: list[Any] = [None] * n
    errors: list[BaseException] = []
    start = threading.Barrier(n + 1)

    def body(i: int) -> None:
        start.wait()
        try:
            results[i] = work(clients[i], i)
        except BaseException as error:  # reported by the caller below
            errors.append(error)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    for c in clients:
        c.close()
    if errors:
        raise errors[0]
    return elapsed, results


def run_client_processes(n: int, make_client: Callable[[], Any], work: Callable[[Any, int], Any]) -> tuple[float, list]:
    """`run_clients` with each client in a process of its own (forked, so closures carry over): no
    client waits on another's share of one interpreter's lock, as separate consumers do not."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    start, results = ctx.Barrier(n + 1), ctx.Queue()

    def body(i: int) -> None:
        client = make_client()
        start.wait()
        try:
            results.put((i, work(client, i), None))
        except BaseException as error:  # reported by the parent below
            results.put((i, None, repr(error)))
        finally:
            client.close()

    procs = [ctx.Process(target=body, args=(i,)) for i in range(n)]
    for p in procs:
        p.start()
    start.wait()
    t0 = time.perf_counter()
    got = [results.get() for _ in procs]
    elapsed = time.perf_counter() - t0
    for p in procs:
        p.join()
    failed = [e for _, _, e in got if e]
    if failed:
        raise RuntimeError(f"a client process failed: {failed[0]}")
    return elapsed, [r for _, r, _ in sorted(got, key=lambda g: g[0])]


def p50_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def quantile_ms(samples: list[float], q: float) -> float:
    return statistics.quantiles(samples, n=100)[round(q * 100) - 1] * 1000


def load() -> str:
    """The 1- and 5-minute load averages: other work on the machine skews every figure."""
    one, five, _ = os.getloadavg()
    return f"{one:.1f} / {five:.1f}"


def checkpoint(url: str) -> None:
    """Flush dirty pages before a timed run so no run pays for the one before it."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")


def vacuum_analyze(url: str, *tables: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for table in tables:
            conn.execute(f"VACUUM ANALYZE {table}")


def postmaster_pid(url: str) -> int:
    """The PostgreSQL server's main process (its first line of postmaster.pid)."""
    with psycopg.connect(url) as conn:
        data_dir = conn.execute("SHOW data_directory").fetchone()[0]
    return int((Path(data_dir) / "postmaster.pid").read_text().split()[0])


def _cpu_seconds(pid: int, tree: bool) -> float:
    """User + system CPU of a process and of its children that ended (and, with `tree`, of those
    still running)."""
    import psutil

    root = psutil.Process(pid)
    procs = [root, *root.children(recursive=True)] if tree else [root]
    total = 0.0
    for proc in procs:
        try:
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.NoSuchProcess:
            pass
    return total


class CpuMeter:
    """Where a run's CPU went, per call: the benchmark's clients (this process and the load
    generators it ran) and each named server process with its children. They share the machine's
    cores, so this is what a ratio against the domain layer (whose client is the domain layer
    itself) is made of. `CpuMeter.http(url, gateway)` meters postbox dev and its database."""

    def __init__(self, **servers: int) -> None:
        self.sides = {"clients": (os.getpid(), False), **{k: (pid, True) for k, pid in servers.items()}}
        self.used: dict[str, float] = {}

    @classmethod
    def http(cls, url: str, gateway: DevServer) -> CpuMeter:
        return cls(gateway=gateway.proc.pid, PostgreSQL=postmaster_pid(url))

    def _now(self) -> dict[str, float]:
        return {name: _cpu_seconds(pid, tree) for name, (pid, tree) in self.sides.items()}

    def __enter__(self) -> CpuMeter:
        self.started = self._now()
        return self

    def __exit__(self, *_: Any) -> None:
        # A backend whose client just closed its connection is still exiting: until the server has
        # reaped it, its CPU is in neither the living processes nor the children's totals.
        time.sleep(0.3)
        self.used = {k: v - self.started[k] for k, v in self._now().items()}

    def per_call(self, calls: int, what: str = "call") -> str:
        return f"CPU per {what}: " + ", ".join(f"{k} {v / calls * 1000:.2f} ms" for k, v in self.used.items())


class Table:
    """Rows printed as they are measured, in fixed columns."""

    WIDTHS = (40, 10, 12, 12, 6)

    def _line(self, cells: tuple[str, ...]) -> str:
        first, *rest = zip(cells, self.WIDTHS, strict=True)
        return "  ".join([f"{first[0]:<{first[1]}}", *(f"{c:>{w}}" for c, w in rest)])

    def header(self) -> None:
        print(self._line(("measurement", "messages", "Postbox", "reference", "ratio")))
        print(self._line(tuple("-" * w for w in self.WIDTHS)), flush=True)

    def row(self, label: str, count: int, ours: str, theirs: str, ratio: float, note: str = "") -> None:
        line = self._line((label, f"{count:,}", ours, theirs, f"{ratio:.2f}"))
        print(line + (f"  {note}" if note else ""), flush=True)


def rate(n: int, seconds: float) -> str:
    return f"{n / seconds:,.0f}/s"


def bench_main(doc: str, clients: int, run: Callable[[argparse.Namespace, str], None],
               quick_help: str = "every count ~10x smaller",
               more_args: Callable[[argparse.ArgumentParser], None] | None = None) -> None:
    """What every benchmark's `main` does: parse --quick/--fast, start a throwaway server, print the
    server and load, run, stop the server, print the total time."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--fast", action="store_true", help="fsync and synchronous_commit off (default: on)")
    if more_args is not None:
        more_args(parser)
    args = parser.parse_args()
    configure(clients)
    started = time.perf_counter()
    server, url = start_server(fast=args.fast)
    try:
        print(f"server: embedded {server_description(url)}")
        print(f"machine: {os.cpu_count()} cores, load average {load()} before the run")
        run(args, url)
    finally:
        from postbox import db

        db.close_pool()
        server.stop()
    print(f"\ntotal {time.perf_counter() - started:.0f} s; load average {load()} at the end")


class DevServer:
    """`postbox dev` on `url`'s database in a subprocess, with its gateway worker processes: the
    serving path a user runs, on its own processes rather than the benchmark clients' GIL. The
    same `url`/`start`/`stop` as the tests' in-process GatewayServer."""

    def __init__(self, database_url: str, workers: int | None = None, args: tuple[str, ...] = (), **env: str) -> None:
        from functions.local.cli import default_workers

        self.database_url, self.workers, self.env = database_url, workers or default_workers(), env
        self.args = args  # more of `postbox dev`'s options (`--cells 2`)
        self.proc: subprocess.Popen | None = None
        self.state = Path(tempfile.mkdtemp(prefix="postbox-bench-dev-"))
        self.log = self.state / "stderr.log"  # what went wrong, when something did (see `errors`)

    def start(self) -> DevServer:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        root = Path(__file__).resolve().parents[1]
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("POSTBOX_POOL_")}  # the bench's own
        env = {**inherited, "DATABASE_URL": self.database_url, "POWERTOOLS_LOG_LEVEL": "ERROR",
               "PYTHONWARNINGS": "ignore::UserWarning", **self.env}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "functions.local.cli", "dev", "--port", str(self.port), "--state-dir",
             str(self.state), "--workers", str(self.workers), "--quiet", *self.args],  # --quiet: no request log
            cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=self.log.open("wb"))
        deadline = time.monotonic() + 120
        while True:
            try:
                import httpx

                httpx.get(self.url + "/api/v1/queues", timeout=2)
                return self
            except Exception:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("postbox dev did not start") from None
                time.sleep(0.2)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def warm(self, make_client: Callable[[], Any], work: Callable[[Any, int], Any], connections: int = 8) -> None:
        """Run `work` untimed on several connections at once before a timed run: the kernel spreads
        them over the worker processes, so each worker has served the workload's routes (built their
        request models, opened its connections) before the clock starts, as a warm server has."""
        run_clients(connections, make_client, work)

    def errors(self) -> str:
        """The end of what `postbox dev` wrote on stderr (its errors: the request log is off)."""
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def steps(*named: tuple[str, Callable[[], Any]]) -> None:
    """Run a benchmark's parts in order, each announced by a progress line as it starts."""
    for label, part in named:
        progress(label)
        part()


def progress(text: str) -> None:
    """A progress line (on stderr, so the table on stdout stays clean): a long run says what it does."""
    print(f"  [{time.strftime('%H:%M:%S')}] {text} ...", file=sys.stderr, flush=True)


def bench_tenant(url: str) -> tuple[str, str, Any]:
    """Point the domain layer at `url` and create the run's tenant on the unlimited plan:
    (tenant id, a manage key, its principal)."""
    from functions.local.runtime import use_database
    from postbox import tenancy

    use_database(url)
    tenant = tenancy.create_tenant("bench", plan="unlimited")
    key = tenancy.create_key(tenant, "manage").key
    return tenant, key, tenancy.resolve_key(key)
