"""Cost model: what a million messages costs on each surface at batch sizes 1, 10 and 100, the idle
floor of a stack, and the comparison with SQS and a self-hosted pgmq. docs/cost.md shows a run.

Durations are measured, not guessed: each request type of a produce-consume cycle is sent through
its surface's real handler (the event API Gateway would build; the handler resolves the key) on an
embedded PostgreSQL, and timed by wall clock and by this thread's CPU time. A Lambda duration is
estimated from them: the CPU part scaled to the function's CPU share (Lambda gives 1 vCPU per
1,769 MB), the waiting part (the database) as measured, plus the RDS Proxy hop; then rounded up to
the billed millisecond. The database's work is the measured waiting time, in ACU-seconds (1 ACU
taken as 0.25 vCPU), and its writes are the WAL bytes the cycle produced (Aurora Standard bills
write I/Os of up to 4 KB). Prices are us-east-1 list prices (PRICES in bench/cost_model.py).

    .venv/bin/python bench/cost.py            # ~2 minutes
    .venv/bin/python bench/cost.py --quick    # fewer repetitions
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import bench_tenant, configure, start_server  # noqa: E402
from bench.cost_model import (  # noqa: E402
    BATCHES,
    DOORS,
    HOURS_PER_MONTH,
    MILLION,
    PRICES,
    choose_mb,
    idle_floor,
    init_ms,
    invocation_usd,
    lambda_ms,
    per_million,
    sqs_per_million,
)
from functions import sizes  # noqa: E402

CLOUDWATCH_EVENT_BYTES = 26  # what CloudWatch Logs counts per line on top of its bytes


class Timer:
    """Calls handlers as API Gateway would and records (wall, cpu, log bytes) per request label.

    The handlers run with metrics on, as on Lambda, and what each call writes on stdout is what
    CloudWatch would ingest from it (each line's bytes and 26 per event). The timed calls run with no
    access line sampled (so each writes what every such request writes: the EMF record of its counts);
    with `access_lines` on, every call writes its access line, whose bytes `line_bytes` keeps per label,
    so that the model adds them at the stack's sampling rate."""

    def __init__(self, key: str) -> None:
        from functions import routes
        from functions.local.invoke import entry_point

        self.key = key
        self.handlers = {name: entry_point(dotted) for name, dotted in routes.FUNCTIONS.items()}
        self.samples: dict[tuple[str, str], list[tuple[float, float, int]]] = defaultdict(list)
        self.line_bytes: dict[tuple[str, str], list[int]] = defaultdict(list)
        self.access_lines = False

    def call(self, surface: str, label: str, method: str, path: str, body=None, query: str = "",
             raw_body: str | None = None, headers: dict | None = None):
        from functions import request_record
        from functions.local.lambda_context import LocalContext
        from support.events import api_event

        event = api_event(method, path, key=self.key, body=body, query=query, raw_body=raw_body, headers=headers)
        request_record.SAMPLE_RATE = 1.0 if self.access_lines else 0.0
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            wall, cpu = time.perf_counter(), time.thread_time()
            result = self.handlers[surface](event, LocalContext(surface))
            cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
        if result["statusCode"] >= 400:
            raise RuntimeError(f"{method} {path}: {result['statusCode']} {result.get('body', '')[:300]}")
        logged = sum(len(line.encode()) + CLOUDWATCH_EVENT_BYTES for line in out.getvalue().splitlines() if line)
        if self.access_lines:
            self.line_bytes[(surface, label)].append(logged)
        self.samples[(surface, label)].append((wall, cpu, logged))
        return result

    def key_lookup(self, n: int) -> tuple[float, float]:
        """The key's resolution each handler does first, warm (its per-container cache holds the key,
        as it does on AWS): already inside every request's figures, shown on its own."""
        from functions.keys import resolve

        headers = {"apikey": self.key}
        resolve(headers, "/api/v1/queues", "127.0.0.1")
        runs = []
        for _ in range(n):
            wall, cpu = time.perf_counter(), time.thread_time()
            resolve(headers, "/api/v1/queues", "127.0.0.1")
            runs.append((time.perf_counter() - wall, time.thread_time() - cpu))
        return _median(runs)


def _median(samples: list[tuple]) -> tuple[float, float]:
    return statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)


def _log_bytes(t: Timer, surface: str, label: str, samples: list[tuple]) -> float:
    """The bytes a request of this label writes on average: what every one writes (its EMF record)
    and, at the stack's default sampling rate, its access line in that record's place."""
    from functions import request_record

    quiet = statistics.mean(s[2] for s in samples)
    full = t.line_bytes.get((surface, label))
    line = statistics.mean(full) if full else quiet
    return quiet + request_record.DEFAULT_SAMPLE_RATE * (line - quiet)


def _json(r) -> dict:
    import json

    return json.loads(r["body"])


# ---- one produce-consume cycle of n messages per surface --------------------------------------------


def cycle_queues(t: Timer, n: int, q: str) -> None:
    if n == 1:
        ids = [_json(t.call("queues", "send", "POST", f"/api/v1/queues/{q}/send", {"message": {"n": 1}}))["msg_id"]]
    else:
        ids = _json(t.call("queues", "send_batch", "POST", f"/api/v1/queues/{q}/send_batch",
                           {"messages": [{"n": i} for i in range(n)]}))["msg_ids"]
    read = _json(t.call("queues", "read", "POST", f"/api/v1/queues/{q}/read", {"qty": n, "vt": 30}))["messages"]
    t.call("queues", "archive", "POST", f"/api/v1/queues/{q}/archive", {"msg_ids": [m["msg_id"] for m in read]})
    assert len(read) == len(ids) == n


def cycle_queues_delete(t: Timer, n: int, q: str) -> None:
    """Informational, not the goal's workload: read and delete (SQS's DeleteMessage) instead of archive."""
    ids = _json(t.call("queues", "send_batch", "POST", f"/api/v1/queues/{q}/send_batch",
                       {"messages": [{"n": i} for i in range(n)]}))["msg_ids"]
    read = _json(t.call("queues", "read", "POST", f"/api/v1/queues/{q}/read", {"qty": n, "vt": 30}))["messages"]
    t.call("queues", "delete", "POST", f"/api/v1/queues/{q}/delete", {"msg_ids": [m["msg_id"] for m in read]})
    assert len(read) == len(ids) == n


def cycle_partitioned(t: Timer, n: int, q: str) -> None:
    t.call("partitioned", "push", "POST", "/api/v1/push", {"items": [{"queue": q, "payload": {"n": i}}
                                                                     for i in range(n)]})
    got = _json(t.call("partitioned", "pop", "GET", f"/api/v1/pop/queue/{q}", query=f"batch={n}"))["messages"]
    t.call("partitioned", "ack", "POST", "/api/v1/ack", {"transactionId": got[-1]["transactionId"],
                                                         "leaseId": got[0]["leaseId"],
                                                         "partitionId": got[0]["partitionId"], "status": "completed"})
    assert len(got) == n


def cycle_keyed_streams(t: Timer, n: int, s: str) -> None:
    if n == 1:
        t.call("keyed-streams", "publish", "POST", f"/v1/streams/{s}/messages", {"key": "k0", "payload": {"n": 0}})
    else:  # one batch publish per n messages, each with its own key
        t.call("keyed-streams", "publish_batch", "POST", f"/v1/streams/{s}/messages/batch",
               {"messages": [{"key": f"k{i}", "payload": {"n": i}} for i in range(n)]})
    got = _json(t.call("keyed-streams", "consume", "POST", f"/v1/streams/{s}/subscriptions/w/consume",
                       {"max_messages": n}))["messages"]
    t.call("keyed-streams", "ack", "POST", f"/v1/streams/{s}/subscriptions/w/ack",
           {"receipts": [m["receipt"] for m in got]})
    assert len(got) == n


def cycle_durable(t: Timer, n: int, s: str, state: dict) -> None:
    import json

    t.call("durable", "append", "POST", f"/v1/stream/{s}", raw_body=json.dumps([{"n": i} for i in range(n)]),
           headers={"content-type": "application/json"})
    r = t.call("durable", "read", "GET", f"/v1/stream/{s}", query=f"offset={state.get(s, '-1')}")
    headers = {k.lower(): v for k, v in (r.get("headers") or {}).items()}
    state[s] = headers.get("stream-next-offset", state.get(s, "-1"))


def setup(t: Timer, run: str) -> dict:
    """One resource per surface and batch size."""
    names = {}
    for n in BATCHES:
        names[("queues", n)] = q = f"cq{n}{run}"
        t.call("queues", "setup", "POST", "/api/v1/queues", {"name": q})
        names[("partitioned", n)] = f"cp{n}{run}"
        names[("keyed-streams", n)] = s = f"cs{n}{run}"
        t.call("keyed-streams", "setup", "POST", "/v1/streams", {"name": s})
        t.call("keyed-streams", "setup", "POST", f"/v1/streams/{s}/subscriptions", {"name": "w"})
        names[("durable", n)] = d = f"cd{n}{run}"
        t.call("durable", "setup", "PUT", f"/v1/stream/{d}", raw_body="[]",
               headers={"content-type": "application/json"})
    return names


CYCLES = {"queues": cycle_queues, "partitioned": cycle_partitioned, "keyed-streams": cycle_keyed_streams,
          "durable": cycle_durable}


def wal_lsn(url: str) -> int:
    import psycopg

    with psycopg.connect(url) as conn:
        return int(conn.execute("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint").fetchone()[0])


def server_cpu_s(url: str) -> float:
    """CPU seconds every process of the server has used so far (backends, WAL writer, checkpointer)."""
    import psutil
    import psycopg

    with psycopg.connect(url) as conn:
        data_dir = conn.execute("SHOW data_directory").fetchone()[0]
    postmaster = psutil.Process(int((Path(data_dir) / "postmaster.pid").read_text().splitlines()[0]))
    total = 0.0
    for proc in [postmaster, *postmaster.children(recursive=True)]:
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


def measure(url: str, key: str, reps: int) -> tuple[dict, dict, tuple[float, float], dict]:
    """{(surface, n): {label: (wall, cpu, calls per cycle)}}, {(surface, n): (WAL bytes, server CPU s)
    per message}, the warm key lookup's (wall, cpu), and the informational read + delete cycle of
    the queues at batch 10 as {"queues": requests} and {"wal": (WAL bytes, server CPU s)}."""
    t = Timer(key)
    names = setup(t, uuid.uuid4().hex[:6])
    state: dict = {}
    per_request: dict = {}
    wal: dict = {}
    for (surface, n), name in names.items():
        args = (state,) if surface == "durable" else ()
        per_request[(surface, n)], wal[(surface, n)] = measure_cycle(t, url, surface, CYCLES[surface], n, name,
                                                                     args, reps)
    q = f"cx10{uuid.uuid4().hex[:6]}"
    t.call("queues", "setup", "POST", "/api/v1/queues", {"name": q})
    requests, db_per_msg = measure_cycle(t, url, "queues", cycle_queues_delete, 10, q, (), reps)
    return per_request, wal, t.key_lookup(reps), {"queues": requests, "wal": db_per_msg}


def measure_cycle(t: Timer, url: str, surface: str, cycle, n: int, name: str, args: tuple,
                  reps: int) -> tuple[dict, tuple[float, float]]:
    """One surface's cycle at batch n, warmed, then timed: {label: (wall, cpu, calls per cycle, log
    bytes)} and (WAL bytes, server CPU s) per message."""
    t.access_lines = True  # warm the path, and measure each request's access line
    for _ in range(3):
        cycle(t, n, name, *args)
    t.access_lines = False
    t.samples.clear()
    count = max(10, reps // n)
    before, cpu_before = wal_lsn(url), server_cpu_s(url)
    for _ in range(count):
        cycle(t, n, name, *args)
    db_per_msg = ((wal_lsn(url) - before) / (count * n), (server_cpu_s(url) - cpu_before) / (count * n))
    requests = {label: (*_median(s), len(s) / count, _log_bytes(t, sf, label, s))
                for (sf, label), s in t.samples.items() if sf == surface}
    t.line_bytes.clear()
    t.samples.clear()
    return requests, db_per_msg


# ---- memory sizing: every function's CPU and wait split, priced at each size ----------------------


def sizing_samples(t: Timer, principal, reps: int) -> dict[str, tuple[float, float]]:
    """(wall, cpu) per invocation of the functions the cycles above do not time: the work surface's
    publish, claim and complete-batch, the console's page, a flows cycle, the SQS face's batch of 10
    sent, received and deleted, every agent's scheduled run (on this run's
    database, after the cycles) and the migrate function on a database already up to date."""
    from functions import schedules
    from functions.local.invoke import invoke
    from postbox.work import queues as work_queues
    from postbox.work import scopes

    scope = scopes.create_scope(principal, {"slug": f"cost{uuid.uuid4().hex[:6]}"})["id"]
    queue = work_queues.create_queue(principal, scope, {"slug": "q"})["id"]
    base = f"/v1/modules/scaiqueue/scopes/{scope}"
    for i in range(3 + max(10, reps // 10)):
        if i == 3:
            t.samples.clear()
        t.call("work", "publish", "POST", f"{base}/queues/{queue}/messages", {"body": {"n": i}})
        got = _json(t.call("work", "claim", "POST", f"{base}/queues/{queue}/messages/claim",
                           {"batch_size": 1, "visibility_timeout_s": 30}))["data"]
        t.call("work", "complete", "POST", f"{base}/messages/complete-batch",
               {"items": [{"id": m["id"], "claim_token": m["claim_token"]} for m in got]})
        t.call("console", "page", "GET", "/console")
    flows_cycles(t, principal, reps)
    sqs_cycles(t, principal, reps)
    out = {name: _median([x for (sf, _), runs in t.samples.items() if sf == name for x in runs])
           for name in ("work", "console", "flows", "sqs")}
    for agent in schedules.AGENTS:
        event = {"source": "aws.scheduler", "detail-type": "Scheduled Event", "detail": {"agent": agent.name}}
        runs = []
        for i in range(6):
            wall, cpu = time.perf_counter(), time.thread_time()
            invoke(agent.handler, event, agent.name, timeout_s=60)
            if i:  # the first run compiles its statements
                runs.append((time.perf_counter() - wall, time.thread_time() - cpu))
        out[agent.name] = _median(runs)
    runs = []
    for _ in range(4):
        wall, cpu = time.perf_counter(), time.thread_time()
        invoke("functions.migrate.handler", {}, "migrate", timeout_s=300)
        runs.append((time.perf_counter() - wall, time.thread_time() - cpu))
    out["migrate"] = _median(runs)
    return out


def flows_cycles(t: Timer, principal, reps: int) -> None:
    """A streaming query's cycle as its runner makes it: ten messages popped from its source, then
    one cycle request (a state upsert, a push to the sink and the ack); the cycle is what is timed."""
    from postbox.flows import quotas

    quotas.grant(principal.tenant_id)
    run = uuid.uuid4().hex[:6]
    src = f"fsrc{run}"
    qid = _json(t.call("flows", "setup", "POST", "/streams/v1/queries",
                       {"name": f"f{run}", "source_queue": src, "sink_queue": f"fout{run}", "config_hash": "h"}))
    qid = qid["query_id"]
    for i in range(3 + max(10, reps // 10)):
        if i == 3:
            t.samples.pop(("flows", "cycle"), None)
        t.call("partitioned", "setup", "POST", "/api/v1/push",
               {"items": [{"queue": src, "payload": {"n": j}} for j in range(10)]})
        got = _json(t.call("partitioned", "setup", "GET", f"/api/v1/pop/queue/{src}",
                           query="batch=10&consumerGroup=g"))["messages"]
        t.call("flows", "cycle", "POST", "/streams/v1/cycle", {
            "query_id": qid, "partition_id": got[0]["partitionId"], "consumer_group": "g",
            "state_ops": [{"type": "upsert", "key": "k", "value": {"n": i}}],
            "push_items": [{"queue": f"fout{run}", "payload": {"n": i}}],
            "ack": {"transactionId": got[-1]["transactionId"], "leaseId": got[0]["leaseId"],
                    "status": "completed", "count": len(got)}})
    t.samples.pop(("flows", "setup"), None)


def sqs_cycles(t: Timer, principal, reps: int) -> None:
    """The SQS face's cycle at batch 10, signed as boto3 signs it: SendMessageBatch, ReceiveMessage
    and DeleteMessageBatch."""
    import json

    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    from postbox.sqs import credentials

    minted = credentials.mint(principal.tenant_id, "manage")
    signer = SigV4Auth(Credentials(minted["access_key_id"], minted["secret_access_key"]), "sqs", "us-east-1")

    def call(label: str, action: str, params: dict) -> dict:
        body = json.dumps(params)
        request = AWSRequest("POST", "https://api.example.com/sqs", data=body.encode(), headers={
            "X-Amz-Target": f"AmazonSQS.{action}", "Content-Type": "application/x-amz-json-1.0",
            "Host": "api.example.com"})
        signer.add_auth(request)
        signed = {k.lower(): v for k, v in request.headers.items()}
        return _json(t.call("sqs", label, "POST", "/sqs", raw_body=body, headers=signed))

    url = call("setup", "CreateQueue", {"QueueName": f"cost{uuid.uuid4().hex[:6]}"})["QueueUrl"]
    for i in range(3 + max(10, reps // 10)):
        if i == 3:
            for label in ("send_batch", "receive", "delete_batch"):
                t.samples.pop(("sqs", label), None)
        call("send_batch", "SendMessageBatch", {"QueueUrl": url, "Entries": [
            {"Id": str(j), "MessageBody": json.dumps({"n": j})} for j in range(10)]})
        got = call("receive", "ReceiveMessage", {"QueueUrl": url, "MaxNumberOfMessages": 10})["Messages"]
        call("delete_batch", "DeleteMessageBatch", {"QueueUrl": url, "Entries": [
            {"Id": str(j), "ReceiptHandle": m["ReceiptHandle"]} for j, m in enumerate(got)]})
    t.samples.pop(("sqs", "setup"), None)


def import_cpu(dotted: str) -> float:
    """CPU seconds a fresh interpreter spends importing a function's handler module (its cold init's
    own work on a full core), the best of three."""
    import subprocess

    module = dotted.rpartition(".")[0]
    code = ("import time; t = time.process_time(); import importlib; "
            f"importlib.import_module({module!r}); print(time.process_time() - t)")
    root = Path(__file__).resolve().parents[1]
    best = []
    for _ in range(3):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=True)
        best.append(float(done.stdout.strip().splitlines()[-1]))
    return min(best)


def surface_mix(per_request: dict, surface: str) -> tuple[float, float] | None:
    """A surface's (wall, cpu) per invocation over its cycles at batch 1 and 10, each request weighted
    by how often a cycle makes it."""
    rows = [(wall, cpu, calls) for (sf, n), requests in per_request.items() if sf == surface and n in (1, 10)
            for wall, cpu, calls, _ in requests.values()]
    if not rows:
        return None
    total = sum(c for _, _, c in rows)
    return sum(w * c for w, _, c in rows) / total, sum(p * c for _, p, c in rows) / total


def sizing_rows(per_request: dict, samples: dict[str, tuple[float, float]]) -> list[tuple]:
    """(function, kind, wall, cpu, import cpu, chosen, recommended) for every function deployed."""
    from functions import routes, schedules

    out = []
    for name, dotted in routes.FUNCTIONS.items():
        split = surface_mix(per_request, name) or samples.get(name)
        out.append((name, "surface", split, import_cpu(dotted), sizes.surface_mb(name)))
    for agent in schedules.AGENTS:
        out.append((agent.name, "agent", samples[agent.name], import_cpu(agent.handler), sizes.agent_mb(agent.name)))
    out.append(("migrate", "migrate", samples["migrate"], import_cpu("functions.migrate.handler"), sizes.MIGRATE_MB))
    return [(*row, choose_mb(*row[2], row[3], sizes.SIZES_MB, row[1] != "agent") if row[2] else None)
            for row in out]


def report_sizing(rows: list[tuple]) -> None:
    print("\n### Memory sizing: each function's measured split, priced at each size\n")
    head = " | ".join(f"{mb} MB: billed ms, $/M, init ms" for mb in sizes.SIZES_MB)
    print(f"| function | kind | wall ms | CPU ms | import CPU ms | {head} | size | the rule's size |")
    print("| --- | --- | ---: | ---: | ---: | " + " | ".join("---:" for _ in sizes.SIZES_MB) + " | ---: | ---: |")
    for name, kind, split, imp, chosen, rule in rows:
        if split is None:
            cells = " | ".join("not measured" for _ in sizes.SIZES_MB)
            print(f"| {name} | {kind} | | | {imp * 1000:.0f} | {cells} | {chosen} | |")
            continue
        wall, cpu = split
        cells = " | ".join(f"{lambda_ms(wall, cpu, mb)}, {invocation_usd(wall, cpu, mb) * MILLION:.2f}, "
                           f"{init_ms(imp, mb)}" for mb in sizes.SIZES_MB)
        print(f"| {name} | {kind} | {wall * 1000:.2f} | {cpu * 1000:.2f} | {imp * 1000:.0f} | {cells} | "
              f"{chosen} | {rule} |")


def report(per_request: dict, wal: dict, key_lookup: tuple[float, float], deleting: dict) -> None:
    print("\n### Measured request durations (median) and the Lambda estimate (arm64, at each surface's size)\n")
    print("| surface | batch | request | wall ms | CPU ms | billed ms | log bytes |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: |")
    for (surface, n), requests in per_request.items():
        for label, (wall, cpu, calls, logged) in requests.items():
            times = f" (x{calls:g})" if calls != 1 else ""
            print(f"| {surface} | {n} | {label}{times} | {wall * 1000:.2f} | {cpu * 1000:.2f} | "
                  f"{lambda_ms(wall, cpu, sizes.surface_mb(surface))} | {logged:.0f} |")
    print(f"| key resolution (inside every request above) | | warm key cache | {key_lookup[0] * 1000:.2f} | "
          f"{key_lookup[1] * 1000:.2f} | | |")
    print("\n### What the database did per message (measured on the embedded server)\n")
    print("| surface | batch | WAL bytes | server CPU µs |")
    print("| --- | ---: | ---: | ---: |")
    for (surface, n), (wal_bytes, cpu_s) in wal.items():
        print(f"| {surface} | {n} | {wal_bytes:,.0f} | {cpu_s * 1e6:,.0f} |")

    print("\n### One million messages (produced and consumed), USD, through each front door\n")
    print("| surface | batch | door | requests | API Gateway | Lambda requests | Lambda GB-s | Aurora ACU"
          " | RDS Proxy | Aurora I/O | log bytes per request | CloudWatch Logs | **total** | SQS |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for door in DOORS:
        for (surface, n), requests in per_request.items():
            c = per_million(requests, n, wal[(surface, n)], sizes.surface_mb(surface), door)
            print(f"| {surface} | {n} | {door} | {c['requests']:,.0f} | {c['api']:.2f} | {c['lambda_req']:.2f} | "
                  f"{c['lambda_gb_s']:.2f} | {c['aurora_acu']:.2f} | {c['proxy']:.3f} | {c['aurora_io']:.3f} | "
                  f"{c['log_bytes_per_request']:.0f} | {c['logs']:.3f} | "
                  f"**{c['total']:.2f}** | {sqs_per_million(n):.2f} |")

    print("\n### Database load: ACU above the floor for a steady 1,000 messages per second\n")
    print("| surface | batch 1 | batch 10 | batch 100 |")
    print("| --- | ---: | ---: | ---: |")
    for surface in CYCLES:
        cells = []
        for n in BATCHES:
            c = per_million(per_request[(surface, n)], n, wal[(surface, n)], sizes.surface_mb(surface))
            cells.append(f"{c['acu_hours'] * 3600 / MILLION * 1000:.2f}")  # ACU-seconds per second at 1,000 msg/s
        print(f"| {surface} | {' | '.join(cells)} |")

    floor = idle_floor()
    print("\n### The idle floor of a stack (per month, defaults: 2 AZs, 0.5 ACU minimum, one instance)\n")
    print("| item | USD |")
    print("| --- | ---: |")
    for item, usd in floor.items():
        print(f"| {item} | {usd:.2f} |")
    total_floor = sum(floor.values())
    print(f"| **total** | **{total_floor:.2f}** |")
    pgmq = PRICES["ec2_m7g_large_hour"] * HOURS_PER_MONTH + 100 * PRICES["ebs_gp3_gb_month"]
    print(f"\nself-hosted pgmq (one m7g.large, 100 GB gp3, no proxy, no HA): {pgmq:.2f} USD/month, about nothing"
          " per message until the instance is full")
    print(f"SQS: {sqs_per_million(1):.2f} USD per million messages at batch 1, {sqs_per_million(10):.2f} at batch 10")
    for door in DOORS:
        for n in (1, 10):
            c = per_million(per_request[("queues", n)], n, wal[("queues", n)], sizes.surface_mb("queues"), door)
            print(f"queues at batch {n} via {door}: {c['total']:.2f} USD per million")
    c = per_million(deleting["queues"], 10, deleting["wal"], sizes.surface_mb("queues"), "function-url")
    print(f"informational, not a goal: queues at batch 10 via function-url, read + delete instead of archive"
          f" (SQS's DeleteMessage; {deleting['wal'][0]:,.0f} WAL bytes per message, Aurora I/O"
          f" {c['aurora_io']:.3f}): {c['total']:.2f} USD per million")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    reps = 30 if args.quick else 400
    os.environ["POWERTOOLS_METRICS_DISABLED"] = "false"  # as on Lambda: each request writes what it writes there
    configure(1)
    server, url = start_server(fast=False)
    try:
        _, key, principal = bench_tenant(url)

        per_request, wal, key_lookup, deleting = measure(url, key, reps)
        report(per_request, wal, key_lookup, deleting)
        report_sizing(sizing_rows(per_request, sizing_samples(Timer(key), principal, reps)))
    finally:
        from postbox import db

        db.close_pool()
        server.stop()


if __name__ == "__main__":
    main()
