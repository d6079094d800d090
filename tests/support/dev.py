"""A `postbox dev` process started by a test, on a database the test gives it (or its own embedded
one), with its stderr lines collected."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from support.http import free_port

REPO = Path(__file__).resolve().parents[2]


class Dev:
    """`postbox dev --quiet` on a free port; `env` adds to (or overrides) the test's environment."""

    def __init__(self, state: Path, database_url: str | None, *, workers: int = 1, long_poll_ms: int | None = None,
                 env: dict[str, str] | None = None, args: tuple[str, ...] = ()) -> None:
        environ = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "POSTBOX_CELLS")}
        if database_url:
            environ["DATABASE_URL"] = database_url
        environ.update(env or {}, POSTBOX_STATE_DIR=str(state))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.stderr: list[str] = []
        self.stdout: list[str] = []  # the start banner's lines, up to "Postbox is running" and on
        command = [sys.executable, "-m", "functions.local.cli", "dev", "--state-dir", str(state), "--port",
                   str(self.port), "--workers", str(workers), "--quiet", *args]
        if long_poll_ms is not None:
            command += ["--long-poll-ms", str(long_poll_ms)]
        self.proc = subprocess.Popen(command, cwd=REPO, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        lines = self.stdout
        while True:
            line = self.proc.stdout.readline()
            lines.append(line)
            if "Postbox is running" in line or (not line and self.proc.poll() is not None):
                break
        assert "Postbox is running" in "".join(lines), "".join(lines) + "".join(self.stderr)
        threading.Thread(target=self._drain_stdout, daemon=True).start()
        self.key = (state / "dev-key").read_text().strip()
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(self.url + "/api/v1/queues", timeout=2)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "postbox dev did not answer"
                time.sleep(0.1)

    def client(self, timeout: float = 30) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"apikey": self.key}, timeout=timeout)

    def _drain_stdout(self) -> None:
        for line in self.proc.stdout:
            self.stdout.append(line)

    def _drain_stderr(self) -> None:
        for line in self.proc.stderr:
            self.stderr.append(line)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
