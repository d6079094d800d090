"""The serving path: what the local gateway adds per request, and 50 concurrent single sends over
HTTP against the same 50 senders in the domain layer (every function's cold import is
`bench/cold_imports.py`'s).

  b. one client, GET metrics: the handler called directly vs over HTTP through the in-process
     gateway (p50, p90): what the HTTP server and event translation add;
  c. 50 clients, one `send` per call: the domain layer (50 threads, `send_messages`) vs over HTTP
     through `postbox dev` with 1 and with N worker processes (sends/s, p50, p99).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bench import common  # noqa: E402

CLIENTS = 50


def percentile(samples: list[float], p: float) -> float:
    return statistics.quantiles(samples, n=100)[int(p) - 1] if len(samples) > 1 else samples[0]


class _Bare:
    """The floor of an HTTP round trip here: the same server answering at once, no gateway."""

    max_body_bytes = 1 << 20

    def __init__(self) -> None:
        from functions.local.events import HttpResponse

        self.answer = HttpResponse(200, [("content-type", "application/json")], b"{}")

    def handle(self, *_: object) -> object:
        return self.answer

    def too_large(self, *_: object) -> object:
        return self.answer


def gateway_latency(table: common.Table, key: str, n: int) -> None:
    """What the gateway adds = HTTP through it - the handler called directly - a bare HTTP round
    trip (the same client, the same server, answering at once): the rest is the gateway's."""
    from functions.api.queues.app import handler
    from functions.local.lambda_context import LocalContext
    from support.events import api_event
    from support.http import GatewayServer, client

    common.progress(f"gateway latency, {n} requests each way")
    path = "/api/v1/queues/lat/metrics"
    direct, http, bare = [], [], []
    gw = GatewayServer().start()
    floor = GatewayServer(_Bare()).start()
    with client(gw.url, key) as c, client(floor.url, key) as f:
        c.post("/api/v1/queues", json={"name": "lat"})
        for _ in range(200):  # warm every path
            handler(api_event("GET", path, key=key), LocalContext("queues"))
            c.get(path)
            f.get(path)
        for _ in range(n):
            t0 = time.perf_counter()
            result = handler(api_event("GET", path, key=key), LocalContext("queues"))
            direct.append(time.perf_counter() - t0)
            assert result["statusCode"] == 200
            t0 = time.perf_counter()
            r = c.get(path)
            http.append(time.perf_counter() - t0)
            assert r.status_code == 200
            t0 = time.perf_counter()
            f.get(path)
            bare.append(time.perf_counter() - t0)
    gw.stop()
    floor.stop()
    d50, h50, b50 = (percentile(x, 50) * 1000 for x in (direct, http, bare))
    table.row("b. GET metrics p50, HTTP (1 client)", n, f"{h50:.2f} ms", f"{d50 + b50:.2f} ms", h50 / (d50 + b50),
              f"reference = handler called directly ({d50:.2f}) + a bare HTTP round trip ({b50:.2f});"
              f" the gateway adds {h50 - d50 - b50:.2f} ms (goal <= 0.3 ms)")


def _senders(make, send, per_client: int) -> tuple[float, list[float]]:
    """CLIENTS threads, each sending `per_client` single messages: (sends/s, every latency)."""
    def work(client, i: int) -> list[float]:
        times = []
        for n in range(per_client):
            t0 = time.perf_counter()
            send(client, {"to": "a@example.com", "client": i, "n": n})
            times.append(time.perf_counter() - t0)
        return times

    seconds, results = common.run_clients(CLIENTS, make, work)
    latencies = [t for r in results for t in r]
    return len(latencies) / seconds, latencies


def concurrent_sends(table: common.Table, url: str, key: str, principal, per_client: int) -> None:
    import httpx

    from functions.local.cli import default_workers
    from postbox import db
    from postbox.queues import service

    queue = "conc"
    service.create_queue(principal, queue, {})

    class Domain:
        def close(self) -> None:
            pass

    common.checkpoint(url)
    common.progress(f"{CLIENTS} clients x {per_client} single sends, domain layer")
    base, base_lat = _senders(Domain, lambda _, m: service.send_messages(principal, queue, [m]), per_client)
    note = f"p50 {common.p50_ms(base_lat):.1f} ms, p99 {common.quantile_ms(base_lat, 0.99):.1f} ms"
    table.row(f"c. {CLIENTS} clients single send, domain", len(base_lat), f"{base:,.0f}/s", "", 1.0, note)
    db.close_pool()  # its connections are the servers' below

    def post(c: httpx.Client, m: dict) -> None:
        r = c.post(f"/api/v1/queues/{queue}/send", json={"message": m})
        r.raise_for_status()

    for workers in sorted({1, default_workers()}):
        common.progress(f"{CLIENTS} clients x {per_client} single sends over HTTP, postbox dev --workers {workers}")
        server = common.DevServer(url, workers, POSTBOX_POOL_MAX=str(max(8, 80 // (workers + 1)))).start()
        try:
            def make(s=server) -> httpx.Client:
                return httpx.Client(base_url=s.url, headers={"apikey": key}, timeout=60)

            server.warm(make, lambda c, i: [post(c, {"warm": i}) for _ in range(5)], connections=CLIENTS)
            common.checkpoint(url)
            rate, lat = _senders(make, post, per_client)
        finally:
            server.stop()
        table.row(f"c. ... HTTP, postbox dev --workers {workers}", len(lat), f"{rate:,.0f}/s", f"{base:,.0f}/s",
                  rate / base, f"p50 {common.p50_ms(lat):.1f} ms, p99 {common.quantile_ms(lat, 0.99):.1f} ms;"
                  " goal >= 0.5")


def main() -> None:
    def run(args, url: str) -> None:
        os.environ["POSTBOX_POOL_MIN"], os.environ["POSTBOX_POOL_MAX"] = "0", str(CLIENTS)
        tenant, key, principal = common.bench_tenant(url)
        table = common.Table()
        table.header()
        gateway_latency(table, key, 300 if args.quick else 2000)
        concurrent_sends(table, url, key, principal, 10 if args.quick else 60)

    os.environ.setdefault("POSTBOX_KEY_CACHE_SECONDS", "300")
    common.bench_main(__doc__, CLIENTS, run)


if __name__ == "__main__":
    main()
