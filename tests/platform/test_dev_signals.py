"""`postbox dev` stops its embedded PostgreSQL on SIGTERM (systemd, `docker stop`) as on Ctrl-C."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from support.http import free_port

REPO = Path(__file__).resolve().parents[2]


def _postmaster_pid(pgdata: Path) -> int | None:
    pidfile = pgdata / "postmaster.pid"
    return int(pidfile.read_text().splitlines()[0]) if pidfile.exists() else None


@pytest.fixture
def state_dir():
    """A fresh state folder the server's own user can reach (when we run as root, the embedded server
    runs as another user, and pytest's tmp_path is private to us)."""
    root = Path(tempfile.mkdtemp(prefix="postbox-dev-signal-"))
    root.chmod(0o755)
    yield root / "state"
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_postbox_dev_stops_its_database_on(sig, state_dir):
    state = state_dir
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "TEST_DATABASE_URL")}
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "functions.local.cli", "dev", "--state-dir", str(state), "--port", str(port)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        lines = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if "Postbox is running" in line or (not line and proc.poll() is not None):
                break
        assert "Postbox is running" in "".join(lines), "".join(lines)
        # where the client run from the checkout finds it (the port is not the default one)
        assert (state / "dev-url").read_text() == f"http://127.0.0.1:{port}\n"
        postmaster = _postmaster_pid(state / "pgdata")
        assert postmaster and psutil.pid_exists(postmaster)
        time.sleep(0.5)  # let the gateway finish starting (its own signal handlers)
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, out
        assert "Postbox stopped." in out
        gone = time.monotonic() + 20
        while psutil.pid_exists(postmaster) and psutil.Process(postmaster).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < gone, "the embedded PostgreSQL is still running"
            time.sleep(0.1)
        assert _postmaster_pid(state / "pgdata") is None
    finally:
        if proc.poll() is None:
            proc.kill()
        leftover = _postmaster_pid(state / "pgdata")
        if leftover and psutil.pid_exists(leftover):
            os.kill(leftover, signal.SIGQUIT)
