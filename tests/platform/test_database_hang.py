"""A database that stops answering without going away (its postmaster and backends stopped with
SIGSTOP, as a network partition or a frozen host looks to a client: sockets open, nothing answers)
under a running `postbox dev` with its default settings: every request, on every surface, answers
503 with Retry-After within 5 s (the ones already holding a pooled connection as well as those
needing a new one); within 5 s of the database answering again every surface serves; nothing
acknowledged is lost. A PostgreSQL of the test's own, on loopback only."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import uuid

import httpx
import psutil

from functions.local.embedded import EmbeddedPostgres
from support.dev import Dev

BOUND_S = 5.0  # the bound, both ways
Request = tuple[str, str, str, "dict | None"]  # what, method, path, JSON body
Answer = tuple[str, "int | str", float, "str | None"]  # what, status (or the client's error), seconds, Retry-After


def _requests(names: dict[str, str]) -> list[Request]:
    """(what, method, path, JSON body): one or two of each surface, reads, writes and long polls."""
    q, pq, stream = names["queue"], names["pq"], names["stream"]
    return [
        ("queues send", "POST", f"/api/v1/queues/{q}/send", {"message": {"n": "during"}}),
        ("queues long poll", "POST", f"/api/v1/queues/{names['idle']}/read", {"qty": 1, "wait_seconds": 10}),
        ("queues list", "GET", "/api/v1/queues", None),
        ("partitioned push", "POST", "/api/v1/push", {"items": [{"queue": pq, "payload": "during"}]}),
        ("partitioned long poll", "GET", f"/api/v1/pop/queue/{names['idle']}?wait=true&timeout=10000", None),
        ("partitioned health", "GET", "/health", None),
        ("durable append", "POST", f"/v1/stream/{stream}", {"n": "during"}),
        ("durable read", "GET", f"/v1/stream/{stream}?offset=-1", None),
        ("keyed streams", "GET", "/v1/streams", None),
        ("work", "GET", "/v1/modules/scaiqueue/scopes", None),
        ("flows", "POST", "/streams/v1/state/get", {"query_id": str(uuid.uuid4()), "partition_id": "1"}),
    ]


def _fire(dev: Dev, requests: list[Request]) -> list[Answer]:
    """Every request at once, each on its own connection: (what, status or the client's error,
    seconds, Retry-After)."""
    out: list[Answer] = []
    lock = threading.Lock()

    def one(what: str, method: str, path: str, body: dict | None) -> None:
        started = time.monotonic()
        try:
            with dev.client(timeout=30) as c:
                r = c.request(method, path, json=body)
            answer = (what, r.status_code, time.monotonic() - started, r.headers.get("retry-after"))
        except httpx.HTTPError as e:
            answer = (what, type(e).__name__, time.monotonic() - started, None)
        with lock:
            out.append(answer)

    threads = [threading.Thread(target=one, args=request, daemon=True) for request in requests]
    for t in threads:
        t.start()
    for t in threads:
        t.join(40)
    return sorted(out)


def _signal_all(server: EmbeddedPostgres, sig: int) -> list[psutil.Process]:
    """Send `sig` to the postmaster and every process it started (the postmaster first); after
    SIGSTOP, return once all of them are stopped."""
    postmaster = psutil.Process(server.pid())
    processes = [postmaster, *postmaster.children(recursive=True)]
    for p in processes:
        os.kill(p.pid, sig)
    deadline = time.monotonic() + 10
    while sig == signal.SIGSTOP and any(p.status() != psutil.STATUS_STOPPED for p in processes):
        assert time.monotonic() < deadline, [(p.pid, p.status()) for p in processes]
        time.sleep(0.01)
    return processes


def _serving(c: httpx.Client, requests: list[Request], within_s: float) -> float:
    """Seconds until every request answers below 500 (each tried until `within_s` has passed)."""
    started = time.monotonic()
    for what, method, path, body in requests:
        if "long poll" in what:
            continue
        while True:
            try:
                if c.request(method, path, json=body, timeout=within_s).status_code < 500:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() - started < within_s, (what, "does not serve again")
            time.sleep(0.1)
    return time.monotonic() - started


def test_a_database_that_stops_answering_is_503_within_5_s_and_serving_resumes(tmp_path):
    database = EmbeddedPostgres(tmp_path / "pgdata", keep=False)
    dev = stopped = None
    try:
        dev = Dev(tmp_path / "state", database.ensure_database("postbox_hang"), workers=2)
        names = {"queue": f"hang_{uuid.uuid4().hex[:8]}", "idle": f"idle_{uuid.uuid4().hex[:8]}",
                 "pq": f"hang-{uuid.uuid4().hex[:8]}", "stream": f"hang-{uuid.uuid4().hex[:8]}"}
        requests = _requests(names)
        with dev.client() as c:
            for queue in (names["queue"], names["idle"]):
                assert c.post("/api/v1/queues", json={"name": queue}).status_code == 201
            assert c.put(f"/v1/stream/{names['stream']}",
                         headers={"content-type": "application/json"}).status_code == 201
            sent = {c.post(f"/api/v1/queues/{names['queue']}/send", json={"message": {"n": i}}).json()["msg_id"]
                    for i in range(5)}
            for i in range(5):
                assert c.post("/api/v1/push", json={"items": [{"queue": names["pq"], "payload": i}]}).status_code == 201
                assert c.post(f"/v1/stream/{names['stream']}", json={"n": i}).status_code < 300
            for _ in range(3):  # every worker's pool holds connections that have just served
                assert all(status < 500 for _, status, _, _ in _fire(dev, [r for r in requests
                                                                          if "long poll" not in r[0]]))

        stopped = _signal_all(database, signal.SIGSTOP)
        waves = [_fire(dev, requests), _fire(dev, requests)]  # pooled connections, then new ones
        _signal_all(database, signal.SIGCONT)
        stopped = None
        with dev.client(timeout=BOUND_S) as c:
            back_s = _serving(c, requests, within_s=BOUND_S)
        for n, wave in enumerate(waves, start=1):
            print(f"\nwave {n}: " + ", ".join(f"{what} {status} in {took:.1f} s" for what, status, took, _ in wave))
        print(f"every surface serving {back_s:.1f} s after the database answered again")
        for wave in waves:
            logged = "".join(dev.stderr[-60:])  # what the server logged, to show with a failure
            assert [a for a in wave if a[1] != 503 or not a[3] or int(a[3]) < 1] == [], (wave, logged)
            assert [a for a in wave if a[2] >= BOUND_S] == [], wave

        with dev.client() as c:  # nothing acknowledged was lost
            got = c.post(f"/api/v1/queues/{names['queue']}/read", json={"qty": 100, "vt": 600}).json()["messages"]
            assert sent <= {m["msg_id"] for m in got}
            popped = c.get(f"/api/v1/pop/queue/{names['pq']}", params={"batch": 100}).json()["messages"]
            assert {m["data"] for m in popped} >= set(range(5))
            read = c.get(f"/v1/stream/{names['stream']}", params={"offset": "-1"}).json()
            assert [m["n"] for m in read][:5] == list(range(5))
    finally:
        for p in stopped or ():
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGCONT)
        if dev is not None:
            dev.stop()
        database.stop()
