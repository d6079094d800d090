"""The work surface against the queues surface, measured in one run on one embedded PostgreSQL.

    .venv/bin/python bench/work.py [--quick] [--fast]

Both surfaces run on the message engine; the queues surface is the reference. Every line runs the
same workload (2 threads, one connection each, small JSON messages) through both domain layers
(and over HTTP through the local gateway) and prints both figures and their ratio (work / queues,
above 1 is better). See bench/README.md for what each line means.
"""

from __future__ import annotations

import contextlib
import functools
import io
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg  # noqa: E402

from bench import common  # noqa: E402

CLIENTS = 2
BATCH = 100
ROUNDS = 4  # turns each side takes in the publish line
VT = 60
GOAL_FLAT = 1.5


@dataclass(frozen=True)
class Scale:
    single: int  # published one per call
    batched: int  # drained with claim(100) + one batch complete
    http: int  # the same two over HTTP
    small: int  # pending messages of the small priority-claim latency run
    large: int  # and of the large one
    samples: int  # claim(1)+complete calls timed at each backlog


FULL = Scale(single=5_000, batched=100_000, http=5_000, small=1_000, large=1_000_000, samples=500)
QUICK = Scale(single=1_000, batched=10_000, http=1_000, small=1_000, large=100_000, samples=200)

# A backlog written straight into the tables in one statement (what publish would write, without its
# call per message), in the claim order `ordering` names (fifo, priority or deadline).
WORK_FILL = """
WITH made AS (
    INSERT INTO work_messages (queue_id, scope_id, tenant_id, rank, visible_at, tier, score, deadline, body,
                               max_retries, visibility_timeout_s)
    SELECT %(q)s, %(s)s, %(t)s,
           CASE %(ordering)s WHEN 'priority' THEN (g %% 5) * 1024 + (1000 - g %% 1001)
                             WHEN 'deadline' THEN floor(extract(epoch FROM now())) + 3600 + g %% 86400
                             ELSE 0 END,
           clock_timestamp(), g %% 5, g %% 1001,
           CASE WHEN %(ordering)s = 'deadline' THEN to_timestamp(floor(extract(epoch FROM now())) + 3600 + g %% 86400)
           END,
           jsonb_build_object('to', 'a@example.com', 'n', g), 3, 30
    FROM generate_series(1, %(n)s) AS g
    RETURNING 1
)
SELECT work_count(%(q)s, count(*), 0, count(*), 0, 0) FROM made
"""
QUEUES_FILL = """
INSERT INTO queue_messages (queue_id, vt, message, size)
SELECT %(q)s, clock_timestamp(), m, octet_length(m::text)
FROM (SELECT jsonb_build_object('to', 'a@example.com', 'n', g) AS m FROM generate_series(1, %(n)s) AS g) s
"""
TABLES = ("work_messages", "work_queue_counters", "queue_messages", "queue_archive")

# The floor of a claim and a completion on the work surface's table: the two statements neither can
# do without, bare (no function, scope, ACL, counters, journal, events or claim documents: a claim
# answers ids and claim tokens only, less than the spec's full representations). Each client walks
# from its own head, as a fifo queue's claims do; the claim's commit is not waited for, as work_claim's.
FLOOR_CLAIM = """
WITH taken AS (
    SELECT x.ctid FROM work_messages x CROSS JOIN (SELECT set_config('synchronous_commit', 'off', true)) _
    WHERE x.queue_id = %(q)s AND x.ended_at IS NULL AND x.state = 'pending' AND (x.rank, x.seq) > (0, %(head)s)
      AND x.visible_at <= clock_timestamp()
    ORDER BY x.rank, x.seq LIMIT %(n)s FOR UPDATE OF x SKIP LOCKED
), claimed AS (
    UPDATE work_messages w SET state = 'claimed', attempts = w.attempts + 1, claimed_by = 'floor',
           claim_token = gen_random_uuid(), claimed_at = clock_timestamp(), updated_at = clock_timestamp(),
           visible_at = clock_timestamp() + %(vt)s * interval '1 second'
    FROM taken t WHERE w.ctid = t.ctid
    RETURNING w.id, w.claim_token, w.seq
)
SELECT array_agg(c.id ORDER BY c.seq), array_agg(c.claim_token ORDER BY c.seq), max(c.seq) FROM claimed c
"""
FLOOR_COMPLETE = """
WITH done AS (
    UPDATE work_messages w SET state = 'completed', claim_token = NULL, ended_at = clock_timestamp(),
           updated_at = clock_timestamp()
    FROM unnest(%(ids)s::uuid[], %(tokens)s::uuid[]) u(id, token)
    WHERE w.id = u.id AND w.scope_id = %(s)s AND w.state = 'claimed' AND w.claim_token = u.token
    RETURNING w.id
)
SELECT array_agg(d.id) FROM done d
"""


class WorkClient:
    """The work surface's domain layer, called as its handler calls it (with `attributes`, its claims
    ask for lean answers: those fields besides id and claim_token)."""

    def __init__(self, principal: Any, scope: str, queue: str, attributes: list[str] | None = None) -> None:
        from postbox.work import messages

        self.messages, self.principal, self.scope, self.queue = messages, principal, scope, queue
        self.lean = {} if attributes is None else {"attributes": attributes}

    def send(self, msg: Any) -> str:
        return self.messages.publish(self.principal, self.scope, self.queue, {"body": msg})[0]["id"]

    def send_batch(self, msgs: list[Any]) -> list[str]:
        """The batch publish: every message in one call."""
        answers = self.messages.publish_batch(self.principal, self.scope, self.queue, [{"body": m} for m in msgs])
        return [a["id"] for a in answers]

    def take(self, qty: int) -> list[str]:
        claimed = self.messages.claim(self.principal, self.scope, self.queue, qty, VT, **self.lean)
        if not claimed:
            return []
        items = [{"id": m["id"], "claim_token": m["claim_token"]} for m in claimed]
        return [d["id"] for d in self.messages.finish_batch(self.principal, self.scope, "complete", items) if d["ok"]]

    def close(self) -> None:
        pass


class FloorClient:
    """The floor's two bare statements (FLOOR_CLAIM, FLOOR_COMPLETE) on a connection of its own."""

    def __init__(self, url: str, scope: str, queue_pk: int) -> None:
        self.conn = psycopg.connect(url, autocommit=True, prepare_threshold=None)  # as the domain layer's
        self.scope, self.queue_pk, self.head = scope, queue_pk, 0

    def take(self, qty: int) -> list:
        ids, tokens, last = self.conn.execute(FLOOR_CLAIM, {"q": self.queue_pk, "head": self.head, "n": qty,
                                                            "vt": VT}).fetchone()
        if not ids:
            return []
        self.head = last
        return self.conn.execute(FLOOR_COMPLETE, {"ids": ids, "tokens": tokens, "s": self.scope}).fetchone()[0]

    def close(self) -> None:
        self.conn.close()


class QueuesClient:
    """The queues surface's domain layer: send, and read + archive."""

    def __init__(self, principal: Any, queue: str) -> None:
        from postbox.queues import service

        self.service, self.principal, self.queue = service, principal, queue

    def send(self, msg: Any) -> int:
        return self.service.send_messages(self.principal, self.queue, [msg])[0]

    def take(self, qty: int) -> list[int]:
        ids = [m["msg_id"] for m in self.service.read_messages(self.principal, self.queue, qty, VT)]
        return self.service.archive_messages(self.principal, self.queue, ids) if ids else []

    def close(self) -> None:
        pass


class HttpWork:
    def __init__(self, base_url: str, key: str, scope: str, queue: str) -> None:
        from tests.support.http import client

        self.http = client(base_url, key)
        self.scope = f"/v1/modules/scaiqueue/scopes/{scope}"
        self.queue = f"{self.scope}/queues/{queue}"

    def _post(self, path: str, body: dict) -> Any:
        response = self.http.post(path, json=body)
        response.raise_for_status()
        return response.json()["data"]

    def send(self, msg: Any) -> str:
        return self._post(f"{self.queue}/messages", {"body": msg})["id"]

    def take(self, qty: int) -> list[str]:
        claimed = self._post(f"{self.queue}/messages/claim", {"batch_size": qty, "visibility_timeout_s": VT})
        if not claimed:
            return []
        items = [{"id": m["id"], "claim_token": m["claim_token"]} for m in claimed]
        return [d["id"] for d in self._post(f"{self.scope}/messages/complete-batch", {"items": items}) if d["ok"]]

    def close(self) -> None:
        self.http.close()


class HttpQueues:
    def __init__(self, base_url: str, key: str, queue: str) -> None:
        from tests.support.http import client

        self.http = client(base_url, key)
        self.path = f"/api/v1/queues/{queue}"

    def _post(self, op: str, body: dict) -> dict:
        response = self.http.post(f"{self.path}/{op}", json=body)
        response.raise_for_status()
        return response.json()

    def send(self, msg: Any) -> int:
        return self._post("send", {"message": msg})["msg_id"]

    def take(self, qty: int) -> list[int]:
        ids = [m["msg_id"] for m in self._post("read", {"qty": qty, "vt": VT})["messages"]]
        return self._post("archive", {"msg_ids": ids})["archived"] if ids else []

    def close(self) -> None:
        self.http.close()


def _once(done: list, n: int) -> str:
    """Whether a drain of n messages completed each exactly once (by the ids its calls answered)."""
    return "OK" if len(set(done)) == len(done) == n else f"FAILED: {len(done):,} answers, {len(set(done)):,} distinct"


def _add(total: tuple[float, int], run: tuple[float, int]) -> tuple[float, int]:
    """(seconds, messages) summed over turns."""
    return total[0] + run[0], total[1] + run[1]


def send_all(make_client, total: int) -> tuple[float, int]:
    share = total // CLIENTS

    def work(client, i: int) -> int:
        for k in range(share):
            client.send({"to": "a@example.com", "n": i * share + k})
        return share

    seconds, results = common.run_clients(CLIENTS, make_client, work)
    return seconds, sum(results)


def warm_up(client: HttpWork | HttpQueues, i: int) -> None:
    """A surface's HTTP workload, a little of it and untimed (see DevServer.warm): what it sends it drains."""
    for k in range(3):
        client.send({"warm": i, "n": k})
        while client.take(BATCH):
            pass


def drain(make_client, qty: int) -> tuple[float, list]:
    def work(client, _: int) -> list:
        done: list = []
        while ids := client.take(qty):
            done.extend(ids)
        return done

    seconds, results = common.run_clients(CLIENTS, make_client, work)
    return seconds, [i for r in results for i in r]


class Bench:
    def __init__(self, url: str, scale: Scale) -> None:
        from postbox import db
        from postbox.queues import service
        from postbox.work import queues, scopes

        self.url, self.scale, self.table = url, scale, common.Table()
        self.tenant, self.key, self.principal = common.bench_tenant(url)
        service.create_queue(self.principal, "bench", {})
        self.queues_id = self._sql("SELECT id FROM queues WHERE name = 'bench'")[0]
        self.scope = scopes.create_scope(self.principal, {"slug": "bench"})["id"]
        self.loud = scopes.create_scope(self.principal, {"slug": "loud", "emit_events": ["published", "claimed"]})["id"]
        self.fifo = queues.create_queue(self.principal, self.scope, {"slug": "fifo"})["id"]
        self.loud_fifo = queues.create_queue(self.principal, self.loud, {"slug": "fifo"})["id"]
        self.prio = queues.create_queue(self.principal, self.scope, {"slug": "prio", "ordering": "priority"})["id"]
        db.pool().wait()
        self.figures: dict[str, float] = {}

    def _sql(self, statement: str, **params: Any) -> tuple | None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            cur = conn.execute(statement, params)
            return cur.fetchone() if cur.description else None

    def _queue_pk(self, queue: str) -> int:
        return self._sql("SELECT id FROM work_queues WHERE queue_id = %(q)s", q=queue)[0]

    def _fill_work(self, scope: str, queue: str, n: int, priority: bool = False) -> None:
        self._sql(WORK_FILL, q=self._queue_pk(queue), s=scope, t=self.tenant, n=n,
                  ordering="priority" if priority else "fifo")

    def _settle(self) -> None:
        common.vacuum_analyze(self.url, *TABLES)
        common.checkpoint(self.url)

    def _pair(self, label: str, n: int, ours: tuple[float, int], theirs: tuple[float, int], note: str = "") -> float:
        ours_rate, theirs_rate = ours[1] / ours[0], theirs[1] / theirs[0]
        self.table.row(label, n, f"{ours_rate:,.0f}/s", f"{theirs_rate:,.0f}/s", ours_rate / theirs_rate, note)
        return ours_rate / theirs_rate

    def single_publish(self) -> None:
        n = self.scale.single
        # Untimed first: each of the pool's connections plans and compiles its functions on first use
        # (the work surface's publish calls more of them than a send), as a warm Lambda has.
        send_all(lambda: WorkClient(self.principal, self.scope, self.fifo), 200)
        send_all(lambda: QueuesClient(self.principal, "bench"), 200)
        self._drain_both()
        # Each publish waits for its WAL flush, whose time drifts over a run: the two sides take turns,
        # a quarter of the messages at a time, and each side's rate is over its four turns.
        ours, theirs = (0.0, 0), (0.0, 0)
        for _ in range(ROUNDS):
            self._settle()
            ours = _add(ours, send_all(lambda: WorkClient(self.principal, self.scope, self.fifo), n // ROUNDS))
            self._settle()
            theirs = _add(theirs, send_all(lambda: QueuesClient(self.principal, "bench"), n // ROUNDS))
        self.figures["publish"] = self._pair("a. publish, one per call, domain", n, ours, theirs,
                                             f"reference = queues send; {ROUNDS} turns each")
        self._drain_both()

    def _drain_both(self) -> None:
        drain(lambda: WorkClient(self.principal, self.scope, self.fifo), BATCH)
        drain(lambda: QueuesClient(self.principal, "bench"), BATCH)

    def _metered_drain(self, make_client) -> tuple[float, list, str]:
        """A drain of a full backlog with the CPU it cost per call pair of BATCH, by side."""
        self._settle()
        with common.CpuMeter(PostgreSQL=common.postmaster_pid(self.url)) as meter:
            seconds, done = drain(make_client, BATCH)
        return seconds, done, meter.per_call(max(len(done) // BATCH, 1), f"pair of {BATCH}")

    def claim_complete(self) -> None:
        n = self.scale.batched
        fill_work = functools.partial(self._fill_work, self.scope, self.fifo, n)
        sides = {
            "work surface": (fill_work, lambda: WorkClient(self.principal, self.scope, self.fifo)),
            "floor": (fill_work, lambda: FloorClient(self.url, self.scope, self._queue_pk(self.fifo))),
            "queues surface": (lambda: self._sql(QUEUES_FILL, q=self.queues_id, n=n),
                               lambda: QueuesClient(self.principal, "bench")),
        }
        results = {}
        for side, (fill, make_client) in sides.items():
            fill()
            results[side] = self._metered_drain(make_client)
        (seconds, done, _), (f_seconds, f_done, _), (q_seconds, q_done, _) = results.values()
        self.figures["claim"] = self._pair(f"b. claim({BATCH})+complete batch, domain", n, (seconds, len(done)),
                                           (q_seconds, len(q_done)), "reference = queues read(100)+archive")
        print(f"   every message completed exactly once: {_once(done, n)}", flush=True)
        self.figures["floor"] = self._pair(f"b. floor: bare claim({BATCH})+complete", n, (f_seconds, len(f_done)),
                                           (q_seconds, len(q_done)),
                                           "the table's two statements alone; reference = read+archive")
        print(f"   every message completed exactly once: {_once(f_done, n)}", flush=True)
        for side, (_, _, cpu) in results.items():
            print(f"   {side}: {cpu}", flush=True)

    def http(self) -> None:
        n = self.scale.http
        gateway = common.DevServer(self.url).start()
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # Powertools prints disabled metrics
                gateway.warm(lambda: HttpWork(gateway.url, self.key, self.scope, self.fifo), warm_up)
                gateway.warm(lambda: HttpQueues(gateway.url, self.key, "bench"), warm_up)
                self._settle()
                ours = send_all(lambda: HttpWork(gateway.url, self.key, self.scope, self.fifo), n)
                self._settle()
                theirs = send_all(lambda: HttpQueues(gateway.url, self.key, "bench"), n)
                self._settle()
                ours_take = drain(lambda: HttpWork(gateway.url, self.key, self.scope, self.fifo), BATCH)
                self._settle()
                theirs_take = drain(lambda: HttpQueues(gateway.url, self.key, "bench"), BATCH)
        finally:
            gateway.stop()
        self.figures["publish_http"] = self._pair("c. publish, one per call, HTTP", n, ours, theirs,
                                                  "reference = queues send over HTTP")
        self.figures["claim_http"] = self._pair(
            f"c. claim({BATCH})+complete batch, HTTP", n, (ours_take[0], len(ours_take[1])),
            (theirs_take[0], len(theirs_take[1])), "reference = queues read(100)+archive over HTTP")

    def events(self) -> None:
        """What the optional published and claimed events cost: the same work in a scope that asks."""
        n = self.scale.single
        self._settle()
        loud = send_all(lambda: WorkClient(self.principal, self.loud, self.loud_fifo), n)
        self._settle()
        quiet = send_all(lambda: WorkClient(self.principal, self.scope, self.fifo), n)
        self._pair("d. publish with published events", n, loud, quiet, "reference = the same without events")
        self._settle()
        loud_take = drain(lambda: WorkClient(self.principal, self.loud, self.loud_fifo), BATCH)
        self._settle()
        quiet_take = drain(lambda: WorkClient(self.principal, self.scope, self.fifo), BATCH)
        self._pair(f"d. claim({BATCH})+complete with claimed events", n, (loud_take[0], len(loud_take[1])),
                   (quiet_take[0], len(quiet_take[1])), "reference = the same without")

    def priority_latency(self) -> None:
        s = self.scale
        p50: dict[int, float] = {}
        waiting = 0
        for size in (s.small, s.large):
            self._fill_work(self.scope, self.prio, size - waiting, priority=True)
            self._settle()
            client = WorkClient(self.principal, self.scope, self.prio)
            times = []
            for _ in range(s.samples):
                t0 = time.perf_counter()
                client.take(1)
                times.append(time.perf_counter() - t0)
            waiting = size - s.samples
            p50[size] = common.p50_ms(times)
            self.table.row(f"e. priority claim(1)+complete p50, {size:,}", s.samples, f"{p50[size]:.2f} ms",
                           f"{p50[s.small]:.2f} ms", p50[size] / p50[s.small],
                           f"p90 {common.quantile_ms(times, 0.9):.2f} ms; reference = the {s.small:,} backlog")
        self.figures["flat"] = p50[s.large] / p50[s.small]

    def summary(self) -> None:
        f = self.figures
        print("\nGoals (informational):")
        for goal, ok, got in (
            ("publish >= 1.0x queues send (domain)", f["publish"] >= 1.0, f"{f['publish']:.2f}x"),
            ("claim+complete >= 1.0x read+archive (domain)", f["claim"] >= 1.0, f"{f['claim']:.2f}x"),
            (f"priority claim flat, large/small p50 <= {GOAL_FLAT}", f["flat"] <= GOAL_FLAT, f"{f['flat']:.2f}"),
        ):
            print(f"  {'PASS' if ok else 'MISS'}  {goal:<48} {got}")
        print(f"  (HTTP: publish {f['publish_http']:.2f}x, claim+complete {f['claim_http']:.2f}x;"
              f" the table's bare claim+complete: {f['floor']:.2f}x)")


def main() -> None:
    def run(args, url: str) -> None:
        print(f"Postbox work surface vs the queues surface ({'quick' if args.quick else 'full'} run)")
        print(f"clients: {CLIENTS} threads, one connection each; ratio = work / reference\n")
        bench = Bench(url, QUICK if args.quick else FULL)
        bench.table.header()
        common.steps(("publish, one per call", bench.single_publish),
                     ("claim(100) + batch complete", bench.claim_complete),
                     ("over HTTP (postbox dev)", bench.http),
                     ("event cost", bench.events),
                     ("priority-claim latency as the backlog grows", bench.priority_latency))
        bench.summary()

    common.bench_main(__doc__, CLIENTS, run, "every count ~5-10x smaller (a minute or two)")


if __name__ == "__main__":
    main()
