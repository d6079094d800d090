"""A partitioned queue deleted while producers push to it and consumers pop from it, over HTTP
through the local gateway: no answer is a 5xx. A push that resolved the queue before a deletion
committed is run again (and makes the queue anew), where it failed on the counters' foreign key
(a 500) before."""

from __future__ import annotations

import threading
import time
from collections import Counter
from functools import partial

from support.http import client
from support.interleaved import each_at_once

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


def test_configures_racing_the_queues_deletion_answer_as_one_after_another(gateway, api):
    """Configures and deletions of one queue at once: each configure answers 200 with its options
    (one after a deletion makes the queue anew), each deletion 200 or 404; a configure that found
    the queue before a deletion committed failed on the vanished row (a 500) before."""
    def configure(name: str) -> tuple[str, int]:
        with client(gateway.url, api.tenant.key) as c:
            r = c.post("/api/v1/configure", json={"queue": name, "options": {"leaseTime": 77}})
            assert r.status_code != 200 or r.json()["options"]["leaseTime"] == 77, r.text
            return "configure", r.status_code

    def delete(name: str) -> tuple[str, int]:
        with client(gateway.url, api.tenant.key) as c:
            return "delete", c.delete(f"/api/v1/resources/queues/{name}").status_code

    answers: Counter = Counter()
    for round_ in range(6):
        name = f"raced-{round_}"
        assert api.post("/api/v1/push", json={"items": [{"queue": name, "payload": 1}]}).status_code == 201
        answers.update(each_at_once([partial(configure, name), partial(delete, name)] * 4))
        left = api.get(f"/api/v1/resources/queues/{name}")
        assert left.status_code == 404 or left.json()["options"]["leaseTime"] == 77, left.text
    assert answers[("configure", 200)] == 24 and answers[("delete", 200)] >= 6, answers
    assert sum(answers.values()) == 48 and set(answers) <= {("configure", 200), ("delete", 200), ("delete", 404)}
