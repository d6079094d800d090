"""`postbox dev --workers N` serves from N processes sharing one database: every request answered,
every message sent by concurrent clients stored exactly once, and each worker a process of its own,
all sealing with the one key ring of the state directory (an SQS receipt handle one worker gave out
is taken by any other)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import boto3
import httpx
import psutil
import psycopg

from support.http import free_port

REPO = Path(__file__).resolve().parents[2]


def _start(database_url: str, state: Path, workers: int) -> tuple[subprocess.Popen, str]:
    port = free_port()
    # Pools small enough for the PostgreSQL this test worker shares: the session's POSTBOX_POOL_MAX of
    # 16, inherited, let each of the server's processes take 16 beside the worker's own connections
    # ("too many clients" in a clean clone's CI run).
    env = {**os.environ, "DATABASE_URL": database_url, "POSTBOX_POOL_MAX": "6"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "functions.local.cli", "dev", "--state-dir", str(state), "--port", str(port),
         "--workers", str(workers)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    lines = []
    while True:
        line = proc.stdout.readline()
        lines.append(line)
        if "Postbox is running" in line or (not line and proc.poll() is not None):
            break
    assert "Postbox is running" in "".join(lines), "".join(lines)
    threading.Thread(target=proc.stdout.read, daemon=True).start()  # keep draining its output
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(url + "/api/v1/queues", timeout=2)
            return proc, url
        except httpx.HTTPError:
            assert time.monotonic() < deadline, "postbox dev did not answer"
            time.sleep(0.1)


def _workers(proc: subprocess.Popen) -> list[psutil.Process]:
    return [c for c in psutil.Process(proc.pid).children() if "functions.local.server" in " ".join(c.cmdline())]


def test_workers_share_the_database_and_store_every_message_once(database_url, tmp_path):
    proc, url = _start(database_url, tmp_path / "state", workers=2)
    try:
        assert len(_workers(proc)) == 2
        key = (tmp_path / "state" / "dev-key").read_text().strip()
        headers = {"apikey": key}
        queue = f"w{os.getpid()}_{int(time.time())}"
        assert httpx.post(url + "/api/v1/queues", json={"name": queue}, headers=headers).status_code == 201
        sent: list[int] = []
        failures: list[int] = []

        def client(i: int) -> None:
            with httpx.Client(base_url=url, headers=headers, timeout=60) as c:
                for n in range(25):
                    r = c.post(f"/api/v1/queues/{queue}/send", json={"message": {"client": i, "n": n}})
                    if r.status_code == 201:
                        sent.append(r.json()["msg_id"])
                    else:
                        failures.append(r.status_code)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert failures == []
        assert len(sent) == len(set(sent)) == 200
        with psycopg.connect(database_url) as conn:
            stored = conn.execute(
                "SELECT m.message->>'client', m.message->>'n' FROM queue_messages m JOIN queues q ON q.id = m.queue_id"
                " WHERE q.name = %s", (queue,)).fetchall()
        assert sorted(stored) == sorted((str(i), str(n)) for i in range(8) for n in range(25))

        assert (tmp_path / "state" / "encryption-keys.json").exists()
        pair = json.loads((tmp_path / "state" / "dev-sqs-credential.json").read_text())
        sqs = boto3.client("sqs", endpoint_url=url + "/sqs", region_name="us-east-1",
                           aws_access_key_id=pair["access_key_id"], aws_secret_access_key=pair["secret_access_key"])
        queue_url = sqs.create_queue(QueueName=queue + "-sqs")["QueueUrl"]
        for n in range(12):  # each call lands on either worker: handles cross between them
            sqs.send_message(QueueUrl=queue_url, MessageBody=str(n))
            (m,) = sqs.receive_message(QueueUrl=queue_url, VisibilityTimeout=60)["Messages"]
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=m["ReceiptHandle"])
        assert "Messages" not in sqs.receive_message(QueueUrl=queue_url)
    finally:
        proc.terminate()
        out = proc.wait(timeout=60)
    assert out == 0
