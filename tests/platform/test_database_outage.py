"""When the database goes away under a running `postbox dev`: requests answer 503 with Retry-After
within the pool's bound (never a 500, never the old 30 s wait), every surface serves again once the
database is back without restarting anything, nothing acknowledged is lost; and `postbox dev`
starts its own embedded PostgreSQL again after a kill -9, saying so on stderr.

Each test runs a PostgreSQL of its own (never the session's), on loopback only."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from pathlib import Path

import httpx
import psutil

from functions.local.embedded import EmbeddedPostgres
from support.dev import Dev

POOL_TIMEOUT_S = 2.0
LONG_POLL_S = 1.0
BOUND_S = POOL_TIMEOUT_S + LONG_POLL_S + 3.0  # the longest a refused request may take


def _surfaces() -> list[tuple[str, str, dict | None]]:
    return [
        ("GET", "/api/v1/queues", None),
        ("GET", "/v1/modules/scaiqueue/scopes", None),
        ("POST", "/streams/v1/state/get", {"query_id": str(uuid.uuid4()), "partition_id": "p"}),
        ("GET", "/v1/streams", None),
        ("GET", "/api/v1/resources/overview", None),
        ("PUT", f"/v1/stream/back-{uuid.uuid4().hex[:8]}", None),
    ]


def _all_serve(c: httpx.Client, within_s: float) -> float:
    """Seconds until every surface answers below 500 (each tried until `within_s` has passed)."""
    started = time.monotonic()
    for method, path, body in _surfaces():
        while True:
            try:
                r = c.request(method, path, json=body)
                if r.status_code < 500:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() - started < within_s, (method, path, "does not serve again")
            time.sleep(0.2)
    return time.monotonic() - started


def _kill_postmaster(server: EmbeddedPostgres) -> int:
    pid = server.pid()
    assert pid is not None and server.running()
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while server.running():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return pid


def _read_queue(c: httpx.Client, queue: str) -> set[int]:
    seen: set[int] = set()
    while True:
        r = c.post(f"/api/v1/queues/{queue}/read", json={"qty": 100, "vt": 600})
        assert r.status_code == 200, r.text
        if not r.json()["messages"]:
            return seen
        seen.update(m["msg_id"] for m in r.json()["messages"])


def _read_durable(c: httpx.Client, stream: str) -> list[dict]:
    out: list[dict] = []
    offset = "-1"
    while True:
        r = c.get(f"/v1/stream/{stream}", params={"offset": offset})
        assert r.status_code == 200, r.text
        if not r.json():
            return out
        out.extend(r.json())
        offset = r.headers["stream-next-offset"]


def test_requests_answer_503_during_an_outage_and_everything_serves_again(tmp_path):
    # durability on (not the session's fast settings): with synchronous_commit off a kill -9 loses
    # commits already acknowledged, which is the setting's bargain, not what this test looks for
    database = EmbeddedPostgres(tmp_path / "pgdata", keep=False)
    dev = None
    try:
        dev = Dev(tmp_path / "state", database.ensure_database("postbox_outage"), workers=2,
                  long_poll_ms=int(LONG_POLL_S * 1000), env={"POSTBOX_POOL_TIMEOUT_S": str(POOL_TIMEOUT_S)})
        c = httpx.Client(base_url=dev.url, headers={"apikey": dev.key}, timeout=30)
        queue, idle, stream = (f"outage_{uuid.uuid4().hex[:8]}", f"idle_{uuid.uuid4().hex[:8]}",
                               f"outage-{uuid.uuid4().hex[:8]}")
        for name in (queue, idle):
            assert c.post("/api/v1/queues", json={"name": name}).status_code == 201
        assert c.put(f"/v1/stream/{stream}", headers={"content-type": "application/json"}).status_code == 201

        stop = threading.Event()
        lock = threading.Lock()
        answers: list[tuple[str, int, float, str | None]] = []  # (what, status, seconds, Retry-After)
        gave_up: list[str] = []
        sent: set[int] = set()
        appended: list[str] = []

        def load(what: str, i: int) -> None:
            with httpx.Client(base_url=dev.url, headers={"apikey": dev.key}, timeout=BOUND_S + 10) as h:
                n = 0
                while not stop.is_set():
                    n += 1
                    tag = f"{what}-{i}-{n}"
                    started = time.monotonic()
                    try:
                        if what == "send":
                            r = h.post(f"/api/v1/queues/{queue}/send", json={"message": {"tag": tag}})
                        elif what == "append":
                            r = h.post(f"/v1/stream/{stream}", json={"tag": tag})
                        else:  # a long poll on a queue nothing is sent to
                            r = h.post(f"/api/v1/queues/{idle}/read", json={"qty": 1, "wait_seconds": 1})
                    except httpx.HTTPError as e:
                        with lock:
                            gave_up.append(f"{what}: {type(e).__name__}")
                        continue
                    took = time.monotonic() - started
                    with lock:
                        answers.append((what, r.status_code, took, r.headers.get("retry-after")))
                        if r.status_code < 300 and what == "send":
                            sent.add(r.json()["msg_id"])
                        if r.status_code < 300 and what == "append":
                            appended.append(tag)
                    if r.status_code >= 500:
                        time.sleep(0.05)

        threads = [threading.Thread(target=load, args=(what, i), daemon=True)
                   for what, count in (("send", 3), ("append", 2), ("poll", 2)) for i in range(count)]
        for t in threads:
            t.start()
        time.sleep(1.5)
        before = len(answers)
        _kill_postmaster(database)  # the server gone, every connection with it
        time.sleep(4.0)  # longer than the pool's bound: requests wait for it and are refused
        database.restart()
        back_at = time.monotonic()
        recovered_s = _all_serve(c, within_s=30)
        time.sleep(1.5)  # and the load is served again too
        stop.set()
        for t in threads:
            t.join(timeout=BOUND_S + 15)

        refused = [a for a in answers if a[1] == 503]
        failed = [a for a in answers if a[1] >= 500 and a[1] != 503]
        ok_after = [a for a in answers[before:] if a[1] < 300]
        print(f"\noutage: {len(answers)} answers, {len(refused)} 503s, {len(failed)} other 5xx,"
              f" {len(gave_up)} client timeouts, {len(sent)} sends and {len(appended)} appends acknowledged,"
              f" every surface serving {recovered_s:.1f} s after the database was back,"
              f" slowest 503 {max((a[2] for a in refused), default=0):.2f} s")
        assert failed == [], failed[:5]
        assert gave_up == [], gave_up[:5]
        assert refused, "no request was refused during the outage"
        assert all(a[3] and int(a[3]) >= 1 for a in refused), refused[:5]
        assert max(a[2] for a in refused) < BOUND_S, sorted(a[2] for a in refused)[-5:]
        assert ok_after and time.monotonic() - back_at < 60

        # nothing acknowledged was lost
        stored_ids = _read_queue(c, queue)
        assert sent <= stored_ids, sorted(sent - stored_ids)[:10]
        stored = {m["tag"] for m in _read_durable(c, stream)}
        assert set(appended) <= stored, sorted(set(appended) - stored)[:10]
        assert dev.proc.poll() is None  # the same postbox dev throughout
    finally:
        if dev is not None:
            dev.stop()
        database.stop()


def test_postbox_dev_starts_its_embedded_database_again_after_kill_9(tmp_path):
    state = tmp_path / "state"
    dev = Dev(state, None, workers=1, long_poll_ms=int(LONG_POLL_S * 1000),
              env={"POSTBOX_POOL_TIMEOUT_S": str(POOL_TIMEOUT_S)})
    try:
        with httpx.Client(base_url=dev.url, headers={"apikey": dev.key}, timeout=30) as c:
            queue = f"k_{uuid.uuid4().hex[:8]}"
            assert c.post("/api/v1/queues", json={"name": queue}).status_code == 201
            sent = c.post(f"/api/v1/queues/{queue}/send", json={"message": {"n": 1}}).json()["msg_id"]
            postmaster = _postmaster_of(state / "pgdata")
            os.kill(postmaster, signal.SIGKILL)
            deadline = time.monotonic() + 60
            while not any("running again" in line for line in dev.stderr):
                assert time.monotonic() < deadline, "".join(dev.stderr)
                assert dev.proc.poll() is None, "".join(dev.stderr)
                time.sleep(0.2)
            said = "".join(dev.stderr)
            print("\n" + "".join(line for line in dev.stderr if "PostgreSQL" in line), end="")
            assert f"the embedded PostgreSQL (pid {postmaster}) stopped; starting it again" in said, said
            assert _postmaster_of(state / "pgdata") != postmaster
            _all_serve(c, within_s=30)
            assert sent in _read_queue(c, queue)
    finally:
        dev.stop()
    assert dev.proc.returncode == 0
    left = _postmaster_pid_file(state / "pgdata")  # `postbox dev` stopped the server it started again
    assert left == -1 or not psutil.pid_exists(left)


def _postmaster_pid_file(pgdata: Path) -> int:
    path = pgdata / "postmaster.pid"
    return int(path.read_text().splitlines()[0]) if path.exists() else -1


def _postmaster_of(pgdata: Path) -> int:
    pid = _postmaster_pid_file(pgdata)
    assert pid > 0 and psutil.pid_exists(pid)
    return pid
