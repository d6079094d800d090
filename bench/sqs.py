"""SQS's face against Postbox's own queues API, the same workload over HTTP in one run.

    .venv/bin/python bench/sqs.py [--quick] [--fast] [--threads] [--queues-client-cpu MS] [--server-cpu-only]

Every side runs through `postbox dev` (its gateway worker processes) on one embedded PostgreSQL:
boto3's send_message_batch(10), then receive_message(10) + delete_message_batch, against the queues
API's send_batch of 10, then read(10) + delete, with the same clients, bodies and counts. What
differs is SQS's: SigV4 (signed by boto3, verified by Postbox), the JSON protocol and its shapes,
and boto3 itself. A third side sends SQS's requests through the queues API side's HTTP client
(httpx), signed by botocore's SigV4 signer and with boto3's MD5 checks, so that against the queues
API only SigV4 and the JSON protocol differ. The ratio is SQS / queues API; the goal is 0.8 or more.

Each client runs in a process of its own, as separate consumers do (a Celery worker's pool, Lambda
functions, services): with `--threads` the four share this interpreter, and boto3, which spends
more Python per call than httpx does (it validates, serializes, signs and parses), then waits on
the other clients' share of its lock far more than httpx does. Clients and server share the
machine's cores, so a rate is also bounded by the clients' own CPU. Each phase's CPU is metered
too, per 10 messages: the clients (their processes), the server
(`postbox dev`'s processes and PostgreSQL's). Last, the server's CPU per message with one client at
a time (`server_cpu_alone`), so that no client takes the server's cores: SQS / queues API there is
what SigV4, the JSON protocol and SQS's actions cost Postbox itself (the goal: 1.1 or less).
"""

from __future__ import annotations

import contextlib
import io
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402

CLIENTS = 4
BATCH = 10
VT = 300  # longer than any run: a received message never comes back mid-run
GOAL = 0.8
CPU_GOAL = 1.1  # the server's CPU per message, SQS / queues API
FULL, QUICK = 40_000, 4_000
ALONE_FULL, ALONE_QUICK = 100, 50  # batches one client sends alone, per side and round
ALONE_ROUNDS = 10
BODY = '{"order": %d, "item": "widget", "qty": 3, "note": "a body of about a hundred bytes, as a job is"}'


class SqsClient:
    def __init__(self, base: str, credential: dict, url: str) -> None:
        import boto3
        from botocore.config import Config

        self.sqs = boto3.session.Session().client(
            "sqs", endpoint_url=f"{base}/sqs", region_name="us-east-1",
            aws_access_key_id=credential["access_key_id"], aws_secret_access_key=credential["secret_access_key"],
            config=Config(retries={"total_max_attempts": 1}, max_pool_connections=1))
        self.url = url

    def send(self, first: int) -> int:
        answer = self.sqs.send_message_batch(QueueUrl=self.url, Entries=[
            {"Id": str(i), "MessageBody": BODY % (first + i)} for i in range(BATCH)])
        assert not answer.get("Failed"), answer["Failed"]
        return len(answer["Successful"])

    def drain(self) -> int:
        got = self.sqs.receive_message(QueueUrl=self.url, MaxNumberOfMessages=BATCH,
                                       VisibilityTimeout=VT).get("Messages", [])
        if got:
            answer = self.sqs.delete_message_batch(QueueUrl=self.url, Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)])
            assert not answer.get("Failed"), answer["Failed"]
        return len(got)

    def close(self) -> None:
        self.sqs.close()


class SignedJsonClient:
    """The SQS face through the queues API side's HTTP client (httpx): the JSON protocol's requests as
    boto3 sends them, signed by botocore's own SigV4 signer, and the MD5s boto3 checks checked the
    same way. Against the queues API, what differs is then only what the issue names: SigV4 and the
    JSON protocol (boto3's own Python per call is not in it)."""

    def __init__(self, base: str, credential: dict, url: str) -> None:
        import httpx
        from botocore.auth import SigV4Auth
        from botocore.credentials import Credentials

        self.endpoint = f"{base}/sqs"
        self.http = httpx.Client(timeout=60)
        self.signer = SigV4Auth(Credentials(credential["access_key_id"], credential["secret_access_key"]),
                                "sqs", "us-east-1")
        self.url = url

    def _call(self, action: str, params: dict) -> dict:
        import json

        from botocore.awsrequest import AWSRequest

        body = json.dumps(params).encode()
        request = AWSRequest("POST", self.endpoint, data=body, headers={
            "X-Amz-Target": f"AmazonSQS.{action}", "Content-Type": "application/x-amz-json-1.0"})
        self.signer.add_auth(request)
        response = self.http.post(self.endpoint, content=body, headers=dict(request.headers.items()))
        response.raise_for_status()
        return response.json()

    def send(self, first: int) -> int:
        bodies = [BODY % (first + i) for i in range(BATCH)]
        answer = self._call("SendMessageBatch", {"QueueUrl": self.url, "Entries": [
            {"Id": str(i), "MessageBody": b} for i, b in enumerate(bodies)]})
        assert not answer.get("Failed"), answer["Failed"]
        for entry in answer["Successful"]:
            assert entry["MD5OfMessageBody"] == _md5(bodies[int(entry["Id"])])
        return len(answer["Successful"])

    def drain(self) -> int:
        got = self._call("ReceiveMessage", {"QueueUrl": self.url, "MaxNumberOfMessages": BATCH,
                                            "VisibilityTimeout": VT}).get("Messages", [])
        for m in got:
            assert m["MD5OfBody"] == _md5(m["Body"])
        if got:
            answer = self._call("DeleteMessageBatch", {"QueueUrl": self.url, "Entries": [
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)]})
            assert not answer.get("Failed"), answer["Failed"]
        return len(got)

    def close(self) -> None:
        self.http.close()


def _md5(text: str) -> str:
    import hashlib

    return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()


class QueuesClient:
    def __init__(self, base: str, key: str, name: str, extra_cpu_s: float = 0.0) -> None:
        import httpx

        self.http = httpx.Client(base_url=base, headers={"apikey": key}, timeout=60)
        self.path = f"/api/v1/queues/{name}"
        self.extra_cpu_s = extra_cpu_s

    def _post(self, op: str, body: dict) -> Any:
        if self.extra_cpu_s:  # --queues-client-cpu: a client as heavy as boto3, to see what that costs the server
            spin_until = time.thread_time() + self.extra_cpu_s
            while time.thread_time() < spin_until:
                pass
        response = self.http.post(f"{self.path}/{op}", json=body)
        response.raise_for_status()
        return response.json()

    def send(self, first: int) -> int:
        return len(self._post("send_batch", {"messages": [BODY % (first + i) for i in range(BATCH)]})["msg_ids"])

    def drain(self) -> int:
        got = self._post("read", {"qty": BATCH, "vt": VT})["messages"]
        if got:
            self._post("delete", {"msg_ids": [m["msg_id"] for m in got]})
        return len(got)

    def close(self) -> None:
        self.http.close()


RUN_CLIENTS = common.run_client_processes  # or common.run_clients, with --threads


def send_all(make, total: int) -> tuple[float, int]:
    per_client = total // CLIENTS

    def work(client, i: int) -> int:
        sent = 0
        for first in range(i * per_client, (i + 1) * per_client, BATCH):
            sent += client.send(first)
        return sent

    seconds, counts = RUN_CLIENTS(CLIENTS, make, work)
    return seconds, sum(counts)


def drain_all(make) -> tuple[float, int]:
    def work(client, _: int) -> int:
        done = 0
        while n := client.drain():
            done += n
        return done

    seconds, counts = RUN_CLIENTS(CLIENTS, make, work)
    return seconds, sum(counts)


def idle_cpu_rate(url: str, gateway, seconds: float = 3.0) -> float:
    """The server's CPU seconds per second with no client: its agents' sweeps and its threads' waits."""
    started = time.perf_counter()
    with common.CpuMeter.http(url, gateway) as meter:
        time.sleep(seconds)
    return sum(v for k, v in meter.used.items() if k != "clients") / (time.perf_counter() - started)


def server_cpu_alone(url: str, gateway, sides: dict, batches: int, rounds: int) -> dict[tuple[str, str], list]:
    """The server's CPU per message with one client at a time: postbox dev (its gateway workers:
    request parse, signature, the action) and PostgreSQL (the SQL), the client's own CPU excluded, and
    less what the idle server spends meanwhile (measured before and after, times the phase's wall
    time: a slower client would otherwise be charged more of the agents' sweeps). One client, so no
    client takes the server's cores. Short phases, the sides taking turns in an order that flips each
    round, so the machine's drift falls on every side alike. {(side, kind): [(CPU s, messages), ...]}"""
    idle = idle_cpu_rate(url, gateway)
    spent: dict[tuple[str, str], list] = {}
    for rnd in range(rounds):
        for side, make in (list(sides.items()) if rnd % 2 == 0 else list(sides.items())[::-1]):
            for kind in ("send", "drain"):
                def work(client, _: int, kind=kind) -> int:
                    if kind == "send":
                        return sum(client.send(b * BATCH) for b in range(batches))
                    done = 0
                    while n := client.drain():
                        done += n
                    return done

                started = time.perf_counter()
                with common.CpuMeter.http(url, gateway) as meter:
                    _, (count,) = RUN_CLIENTS(1, make, work)
                wall = time.perf_counter() - started
                assert count == batches * BATCH, f"{side} {kind}: {count} of {batches * BATCH} messages"
                server = sum(v for k, v in meter.used.items() if k != "clients")
                spent.setdefault((side, kind), []).append((server - idle * wall, count))
    idle = (idle + idle_cpu_rate(url, gateway)) / 2
    print(f"  (the idle server: {idle * 1000:.0f} ms of CPU a second, taken off each phase)")
    return spent


def us_per_message(samples: list) -> float:
    return sum(cpu for cpu, _ in samples) / sum(n for _, n in samples) * 1e6


def per_batch(meter: common.CpuMeter, messages: int) -> dict[str, float]:
    """A phase's CPU in ms per BATCH messages: the clients' (this process and those it forked), and the server's."""
    batches = messages / BATCH
    server = sum(v for k, v in meter.used.items() if k != "clients")
    return {"clients": meter.used["clients"] / batches * 1000, "server": server / batches * 1000}


def waiting(url: str, tenant: str) -> int:
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute("SELECT count(*) FROM queue_messages m JOIN queues q ON q.id = m.queue_id"
                            " WHERE q.tenant_id = %s", (tenant,)).fetchone()[0]


def main() -> None:
    def run(args, url: str) -> None:
        from postbox.sqs import credentials

        global RUN_CLIENTS
        if args.threads:
            RUN_CLIENTS = common.run_clients
        total = QUICK if args.quick else FULL
        tenant, key, _ = common.bench_tenant(url)
        credential = credentials.mint(tenant, "manage")
        print(f"SQS face vs the queues API ({'quick' if args.quick else 'full'} run): {total:,} messages, "
              f"{CLIENTS} client {'threads' if args.threads else 'processes'}, batches of {BATCH}; "
              "ratio = SQS / queues API\n")
        gateway = common.DevServer(url).start()
        table = common.Table()
        try:
            import httpx

            httpx.post(f"{gateway.url}/api/v1/queues", headers={"apikey": key}, json={"name": "native"})
            sqs_url = SqsClient(gateway.url, credential, "").sqs.create_queue(QueueName="face")["QueueUrl"]
            sides = {"SQS": lambda: SqsClient(gateway.url, credential, sqs_url),
                     "SQS, httpx": lambda: SignedJsonClient(gateway.url, credential, sqs_url),
                     "queues API": lambda: QueuesClient(gateway.url, key, "native", args.queues_client_cpu / 1000)}
            with contextlib.redirect_stdout(io.StringIO()):
                for make in sides.values():  # every worker process has served both before the clock starts
                    gateway.warm(make, lambda c, i: (c.send(0), c.drain(), c.drain()))
                    leftover = make()  # what the warm-up's drains left (they took turns) goes before the clock
                    while leftover.drain():
                        pass
                    leftover.close()
            results, cpu_goals = [], []
            if not args.server_cpu_only:
                table.header()
                results = throughput(url, gateway, sides, total, table)
            alone = server_cpu_alone(url, gateway, sides, ALONE_QUICK if args.quick else ALONE_FULL, ALONE_ROUNDS)
            print(f"\nServer CPU per message, one client at a time (postbox dev + PostgreSQL, the client's own "
                  f"excluded, the idle server's taken off), us: all {ALONE_ROUNDS} rounds together, sides taking "
                  "turns (the lowest and highest round); ratio = SQS / queues API")
            for label, kind in (("send batch of 10", "send"), ("receive 10 + delete batch", "drain")):
                theirs = us_per_message(alone[("queues API", kind)])
                line = "    ".join(
                    f"{side} {us_per_message(alone[(side, kind)]):.0f} "
                    f"({min(c / n for c, n in alone[(side, kind)]) * 1e6:.0f}-"
                    f"{max(c / n for c, n in alone[(side, kind)]) * 1e6:.0f})" for side in sides)
                ratios = ", ".join(f"{side} {us_per_message(alone[(side, kind)]) / theirs:.2f}"
                                   for side in ("SQS", "SQS, httpx"))
                print(f"  {kind:<6} {line}    ratio: {ratios}")
                cpu_goals.append((f"server CPU per message, {label} (SQS with boto3 / queues API)",
                                  us_per_message(alone[("SQS", kind)]) / theirs))
            assert waiting(url, tenant) == 0, "messages left"
            print("\nevery message sent was received and deleted once on every side, none left: OK")
        finally:
            gateway.stop()
        print("\ngoals")
        for label, ratio in results:
            print(f"  {'PASS' if ratio >= GOAL else 'MISS'}  {label} >= {GOAL}x  {ratio:.2f}")
        for label, ratio in cpu_goals:
            print(f"  {'PASS' if ratio <= CPU_GOAL else 'MISS'}  {label} <= {CPU_GOAL}x  {ratio:.2f}")

    def options(parser) -> None:
        parser.add_argument("--threads", action="store_true",
                            help="the clients as threads of this process instead of processes of their own")
        parser.add_argument("--queues-client-cpu", type=float, default=0.0, metavar="MS",
                            help="the queues API's client spends MS ms of CPU before each call (0.4 stands in for "
                                 "boto3's extra Python): the ratios when both sides' clients cost alike")
        parser.add_argument("--server-cpu-only", action="store_true",
                            help="only the server's CPU per message, one client at a time (no throughput rounds)")

    common.bench_main(__doc__, CLIENTS, run, "4,000 messages instead of 40,000", options)


def throughput(url: str, gateway, sides: dict, total: int, table: common.Table) -> list[tuple[str, float]]:
    """Each side's rates with CLIENTS clients at once, two rounds interleaved, and the CPU each phase
    took per 10 messages; the goal lines of the rates."""
    figures: dict[tuple[str, str], float] = {}
    cpu: dict[tuple[str, str], list[dict[str, float]]] = {}
    for rnd in range(2):  # each side twice, interleaved, so drift on the machine hits both
        for side, make in sides.items():
            common.checkpoint(url)
            with common.CpuMeter.http(url, gateway) as meter:
                seconds, sent = send_all(make, total)
            figures[(side, f"send{rnd}")] = sent / seconds
            cpu.setdefault((side, "send"), []).append(per_batch(meter, sent))
            common.checkpoint(url)
            with common.CpuMeter.http(url, gateway) as meter:
                seconds, done = drain_all(make)
            figures[(side, f"drain{rnd}")] = done / seconds
            cpu.setdefault((side, "drain"), []).append(per_batch(meter, done))
            assert done == sent, f"{side}: sent {sent}, drained {done}"
    results = []
    for side, client in (("SQS", "boto3"), ("SQS, httpx", "httpx+SigV4")):
        for label, kind in (("send batch of 10", "send"), ("receive 10 + delete batch", "drain")):
            ours = max(figures[(side, f"{kind}{r}")] for r in range(2))
            theirs = max(figures[("queues API", f"{kind}{r}")] for r in range(2))
            table.row(f"{label}, {client}", total, f"{ours:,.0f}/s", f"{theirs:,.0f}/s", ours / theirs,
                      "best of 2 rounds each")
            results.append((f"{label} ({client})", ours / theirs))
    print("\nCPU per 10 messages in the runs above (lower round), ms: clients | server (postbox dev + PostgreSQL); "
          "server ratio = SQS / queues API (the clients share the cores with the server)")
    for kind in ("send", "drain"):
        spent = {side: {part: min(r[part] for r in cpu[(side, kind)]) for part in ("clients", "server")}
                 for side in sides}
        theirs = spent["queues API"]
        line = "    ".join(f"{side} {spent[side]['clients']:.2f} | {spent[side]['server']:.2f}" for side in sides)
        ratios = ", ".join(f"{side} {spent[side]['server'] / theirs['server']:.2f}" for side in ("SQS", "SQS, httpx"))
        print(f"  {kind:<6} {line}    server ratio: {ratios}")
    return results


if __name__ == "__main__":
    main()
