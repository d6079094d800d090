"""A partitioned queue deleted while producers push to it and consumers pop from it, over HTTP
through the local gateway: no answer is a 5xx. A push that resolved the queue before a deletion
committed is run again (and makes the queue anew), where it failed on the counters' foreign key
(a 500) before."""

from __future__ import annotations

import threading
import time
from collections import Counter

from support.http import client

RUN_S = 8.0


def test_pushes_and_pops_racing_a_queue_deletion_get_no_5xx(api):
    stop = threading.Event()
    statuses: Counter = Counter()
    failures: list[str] = []
    lock = threading.Lock()

    def record(what: str, r) -> None:
        with lock:
            statuses[(what, r.status_code)] += 1
            if r.status_code >= 500:
                failures.append(f"{what}: {r.status_code} {r.text[:200]}")

    def pusher() -> None:
        with client(api.base_url, api.tenant.key) as c:
            while not stop.is_set():
                items = [{"queue": "doomed", "partition": f"p{i}", "payload": {"i": i}} for i in range(3)]
                record("push", c.post("/api/v1/push", json={"items": items}))

    def popper() -> None:
        with client(api.base_url, api.tenant.key) as c:
            while not stop.is_set():
                record("pop", c.get("/api/v1/pop/queue/doomed", params={"batch": 5, "autoAck": "true"}))

    def deleter() -> None:
        with client(api.base_url, api.tenant.key) as c:
            while not stop.is_set():
                record("delete", c.delete("/api/v1/resources/queues/doomed"))

    threads = [threading.Thread(target=f) for f in (pusher, pusher, pusher, popper, deleter, deleter)]
    for t in threads:
        t.start()
    time.sleep(RUN_S)
    stop.set()
    for t in threads:
        t.join()
    assert failures == [], failures[:3]
    assert statuses[("push", 201)] > 0 and statuses[("delete", 200)] > 0, statuses
