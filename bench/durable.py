"""Durable Streams over HTTP: Postbox's local gateway against the Node reference server
(`@durable-streams/server`, in memory), both started in this run on this machine.

Measures appends per second of 256-byte JSON messages to 1 stream and spread over 100 streams
(concurrent clients each sending one append per request), and the catch-up read rate (messages
per second a client reads from the start of a stream, page by page). The load comes from Node's
fetch (undici) in its own process, so the client is not what is measured; `--python-client`
drives it from Python threads (httpx) instead. Prints medians of the repeats and the ratio
Postbox / reference. Needs `npm` (installs tests/conformance's pinned packages).

    .venv/bin/python bench/durable.py [--quick] [--fast] [--repeats N] [--clients N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bench.common import CpuMeter, Table, configure, load, rate, run_clients, server_description, start_server  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONFORMANCE = ROOT / "tests" / "conformance"
_NODE_SERVER = """
import { DurableStreamTestServer } from "@durable-streams/server"
const s = new DurableStreamTestServer({ port: Number(process.env.PORT), host: "127.0.0.1", longPollTimeout: 500 })
console.log(await s.start())
"""
_NODE_LOAD = """
const job = JSON.parse(process.env.JOB)
const pad = (i) => {
  const b = JSON.stringify({ i, pad: "" })
  return JSON.stringify({ i, pad: "x".repeat(256 - b.length) })
}
const t0 = performance.now()
let count = 0
if (job.mode === "append") {
  let next = 0
  const worker = async () => {
    for (;;) {
      const i = next++
      if (i >= job.total) return
      const r = await fetch(`${job.base}/v1/stream/${job.streams[i % job.streams.length]}`, {
        method: "POST", headers: { ...job.headers, "content-type": "application/json" }, body: pad(i) })
      const answer = await r.text()
      if (r.status !== 200 && r.status !== 204) throw new Error(`append answered ${r.status}: ${answer}`)
      count++
    }
  }
  await Promise.all(Array.from({ length: job.concurrency }, worker))
} else {
  let offset = "-1"
  for (;;) {
    const r = await fetch(`${job.base}/v1/stream/${job.streams[0]}?offset=${encodeURIComponent(offset)}`,
      { headers: job.headers })
    count += (await r.json()).length
    offset = r.headers.get("stream-next-offset")
    if (r.headers.get("stream-up-to-date") === "true") break
  }
}
console.log(JSON.stringify({ count, seconds: (performance.now() - t0) / 1000 }))
"""


def message(i: int) -> bytes:
    body = json.dumps({"i": i, "pad": ""}, separators=(",", ":"))
    return json.dumps({"i": i, "pad": "x" * (256 - len(body))}, separators=(",", ":")).encode()


def free_port() -> int:
    from support.http import free_port as pick

    return pick()


def wait_up(url: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.head(url + "/v1/stream/ping", timeout=2)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not start")


def start_reference() -> tuple[subprocess.Popen, str]:
    if not (CONFORMANCE / "node_modules" / "@durable-streams" / "server").is_dir():
        # `npm install` with the committed lock installs exactly the pinned tree; `npm ci` (npm 11)
        # refuses this lock over an optional Windows-only package it cannot resolve on Linux.
        print("installing the Node reference server (npm install) ...", flush=True)
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=CONFORMANCE, check=True)
    port = free_port()
    proc = subprocess.Popen(["node", "--input-type=module", "-e", _NODE_SERVER], cwd=CONFORMANCE,
                            env={**os.environ, "PORT": str(port)}, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_up(url)
    return proc, url


class Target:
    def __init__(self, name: str, url: str, key: str | None) -> None:
        self.name, self.url = name, url
        self.headers = {"apikey": key} if key else {}

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.headers, timeout=60)

    def create(self, streams: list[str]) -> None:
        with self.client() as c:
            for s in streams:
                r = c.put(f"/v1/stream/{s}", headers={"content-type": "application/json"})
                assert r.status_code in (200, 201), r.text


def node_load(target: Target, mode: str, streams: list[str], total: int, clients: int) -> float:
    """Run the Node load generator; returns messages per second."""
    job = {"base": target.url, "headers": target.headers, "mode": mode, "streams": streams, "total": total,
           "concurrency": clients}
    run = subprocess.run(["node", "--input-type=module", "-e", _NODE_LOAD], cwd=CONFORMANCE, check=False,
                         capture_output=True, text=True, env={**os.environ, "JOB": json.dumps(job)})
    if run.returncode:
        raise RuntimeError(f"the load generator failed on {target.name}: {run.stderr[-2000:]}")
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["count"] == total, result
    return result["count"] / result["seconds"]


def appends(target: Target, streams: list[str], total: int, clients: int, python_client: bool = False) -> float:
    """Appends per second: `clients` concurrent clients, each sending one append per request."""
    target.create(streams)
    if not python_client:
        return node_load(target, "append", streams, total, clients)
    per = total // clients

    def work(c: httpx.Client, i: int) -> int:
        for n in range(per):
            s = streams[(i * per + n) % len(streams)]
            r = c.post(f"/v1/stream/{s}", content=message(n), headers={"content-type": "application/json"})
            assert r.status_code in (200, 204), r.text
        return per

    elapsed, done = run_clients(clients, target.client, work)
    return sum(done) / elapsed


def catch_up(target: Target, stream: str, total: int, python_client: bool = False) -> float:
    """Messages per second read from the start of a stream with `total` messages (appended 100 per
    request), page by page."""
    target.create([stream])
    with target.client() as c:
        batch = 100
        for start in range(0, total, batch):
            body = b"[" + b",".join(message(i) for i in range(start, min(start + batch, total))) + b"]"
            c.post(f"/v1/stream/{stream}", content=body, headers={"content-type": "application/json"})
        if not python_client:
            return node_load(target, "read", [stream], total, 1)
        t0 = time.perf_counter()
        offset, seen = "-1", 0
        while True:
            r = c.get(f"/v1/stream/{stream}", params={"offset": offset})
            seen += len(r.json())
            offset = r.headers["stream-next-offset"]
            if r.headers.get("stream-up-to-date") == "true":
                break
        elapsed = time.perf_counter() - t0
    assert seen == total, (seen, total)
    return total / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="about 5x fewer messages")
    parser.add_argument("--fast", action="store_true", help="PostgreSQL with fsync and synchronous_commit off")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--clients", type=int, default=16, help="concurrent appenders")
    parser.add_argument("--python-client", action="store_true", help="drive the load from Python threads")
    args = parser.parse_args()
    scale = 5 if args.quick else 1
    n_append, n_read = 4000 // scale, 20000 // scale
    configure(4)
    server, url = start_server(args.fast)
    from functions.local.runtime import use_database
    from postbox import tenancy

    use_database(url)
    tenant = tenancy.create_tenant("bench-durable", plan="unlimited")
    key = tenancy.create_key(tenant, "manage").key
    from bench.common import DevServer, progress

    progress("starting postbox dev and the Node reference server")
    pb = DevServer(url, POSTBOX_LONG_POLL_MS="500").start()
    pb_url = pb.url
    ref, ref_url = start_reference()
    targets = [Target("postbox", pb_url, key), Target("reference", ref_url, None)]
    warm = [f"warm-{i}" for i in range(args.clients)]
    targets[0].create(warm)
    pb.warm(targets[0].client, lambda c, i: [c.post(f"/v1/stream/{warm[i]}", content=message(n),
                                                    headers={"content-type": "application/json"})
                                             for n in range(5)], connections=args.clients)
    driver = "Python threads (httpx)" if args.python_client else "Node fetch (undici), one process"
    print(f"Durable Streams over HTTP, {args.clients} concurrent clients ({driver}); {server_description(url)}")
    print(f"Postbox: postbox dev ({pb.workers} gateway worker processes) + PostgreSQL; reference:"
          " @durable-streams/server 0.3.7 in memory (Node)")
    print(f"load before: {load()}; medians of {args.repeats} runs\n")
    py = args.python_client
    table = Table()
    table.header()
    try:
        cases = [
            ("appends/s, 256 B JSON, 1 stream", n_append,
             lambda t, r: appends(t, [f"one-{r}-{uuid.uuid4().hex[:6]}"], n_append, args.clients, py)),
            ("appends/s, 256 B JSON, 100 streams", n_append,
             lambda t, r: appends(t, [f"many-{r}-{i}-{uuid.uuid4().hex[:6]}" for i in range(100)], n_append,
                                  args.clients, py)),
            ("catch-up read, messages/s", n_read,
             lambda t, r: catch_up(t, f"read-{r}-{uuid.uuid4().hex[:6]}", n_read, py)),
        ]
        meters = {"postbox": lambda: CpuMeter.http(url, pb), "reference": lambda: CpuMeter(server=ref.pid)}
        for label, count, run in cases:
            figures = {t.name: [] for t in targets}
            cpu: dict[str, CpuMeter] = {}
            for r in range(args.repeats):
                progress(f"{label}: run {r + 1} of {args.repeats}")
                for t in targets:
                    with meters[t.name]() as cpu[t.name]:
                        figures[t.name].append(run(t, r))
            ours, theirs = (statistics.median(figures[t.name]) for t in targets)
            table.row(label, count, rate(ours, 1), rate(theirs, 1), ours / theirs,
                      note="runs: " + " | ".join(f"{t.name} " + ", ".join(f"{v:,.0f}" for v in figures[t.name])
                                                  for t in targets))
            for t in targets:  # the last run's: the clients' share includes the load generator's start
                unit = "append" if label.startswith("appends") else "message read"
                print(f"   {t.name}: {cpu[t.name].per_call(count, unit)}")
    except Exception:
        print(f"postbox dev's stderr, the end:\n{pb.errors()}", file=sys.stderr)
        raise
    finally:
        pb.stop()
        ref.terminate()
        ref.wait(timeout=10)
        server.stop()
    print(f"\nload after: {load()}")


if __name__ == "__main__":
    main()
