"""Celery with kombu's SQS transport against the local runtime: a real worker process consumes tasks
a real producer publishes, every task runs once, and a worker killed mid-task has its task run again
by the next worker once the visibility timeout has passed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest

pytest.importorskip("celery")
pytest.importorskip("pycurl")  # kombu's SQS transport polls through pycurl

HERE = Path(__file__).resolve().parent


@pytest.fixture
def celery_env(gateway, mint, tmp_path):
    credential = mint("manage")
    url = urlsplit(gateway.url)
    return {**os.environ, "PB_SQS_KEY": credential["access_key_id"], "PB_SQS_SECRET": credential["secret_access_key"],
            "PB_SQS_HOSTPORT": url.netloc, "PB_SQS_RECORD": str(tmp_path / "runs.txt"),
            "PB_SQS_QUEUE": f"celery-{uuid.uuid4().hex[:8]}", "PYTHONPATH": str(HERE),
            "AWS_CONFIG_FILE": str(tmp_path / "config"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "creds")}


def worker(env: dict, name: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "celery_tasks", "worker", "--pool=solo", "--loglevel=WARNING",
         "--without-gossip", "--without-mingle", "--without-heartbeat", "-n", f"{name}@%h"],
        env=env, cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


def produce(env: dict, code: str) -> None:
    done = subprocess.run([sys.executable, "-c", "import celery_tasks as t\n" + code], env=env, cwd=HERE,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def lines(env: dict) -> list[str]:
    path = Path(env["PB_SQS_RECORD"])
    return path.read_text().splitlines() if path.exists() else []


def wait_for(check, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return check()


def stop(process: subprocess.Popen, sig: int = signal.SIGTERM) -> str:
    if process.poll() is None:
        os.killpg(process.pid, sig)
    try:
        out, _ = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, _ = process.communicate()
    return out.decode(errors="replace")


def test_a_worker_runs_every_task_a_producer_sends_once(celery_env):
    total = 40
    produce(celery_env, f"for i in range({total}):\n    t.record.delay(i)\n")
    w = worker(celery_env, "one")
    try:
        finished = wait_for(lambda: len(lines(celery_env)) >= total, 90)
        time.sleep(2)  # anything run twice would show by now
    finally:
        out = stop(w)
    assert finished, out[-3000:]
    assert sorted(lines(celery_env)) == sorted(f"ran {i}" for i in range(total)), out[-3000:]


def test_a_worker_killed_mid_task_has_it_run_again_after_the_visibility_timeout(celery_env):
    env = {**celery_env, "PB_SQS_VISIBILITY": "4"}
    produce(env, "t.slow.delay(7, 60)\n")
    first = worker(env, "doomed")
    try:
        assert wait_for(lambda: "started 7" in lines(env), 60), stop(first)[-3000:]
    finally:
        stop(first, signal.SIGKILL)  # no ack: the message stays in flight until its timeout
    killed_at = time.monotonic()
    second = worker(env, "heir")
    try:
        finished = wait_for(lambda: "done 7" in lines(env), 60)
    finally:
        out = stop(second)
    assert finished, out[-3000:]
    assert lines(env) == ["started 7", "started 7", "done 7"]
    assert time.monotonic() - killed_at >= 3  # not before the visibility timeout ran out
