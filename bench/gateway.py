"""The local gateway's added latency: the same request as a direct handler call and over HTTP.

Prints p50/p90 for both and the difference (what the HTTP server, event translation and
authorizer invocation add per request). Also prints the queues function's import time.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from functions.local.embedded import EmbeddedPostgres  # noqa: E402
from functions.local.runtime import use_database  # noqa: E402


def percentile(samples: list[float], p: float) -> float:
    return statistics.quantiles(samples, n=100)[int(p) - 1] if len(samples) > 1 else samples[0]


def import_time_ms(module: str, runs: int = 5) -> float:
    """Median cumulative import time of `module` in a fresh interpreter (python -X importtime)."""
    totals = []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"],
                             capture_output=True, text=True, check=True).stderr
        last = [line for line in out.splitlines() if line.rstrip().endswith(f"| {module}")][-1]
        totals.append(int(last.split("|")[1]) / 1000)
    return statistics.median(totals)


def main(n: int = 2000) -> None:
    print(f"queues function import time (median of 5): {import_time_ms('functions.api.queues'):.0f} ms")
    server = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="postbox-bench-")) / "pgdata", keep=False)
    use_database(server.ensure_database("bench", fresh=True))
    from functions.api.queues import handler
    from functions.local.lambda_context import LocalContext
    from support.events import api_event
    from support.http import GatewayServer, client
    from support.tenants import new_tenant

    tenant = new_tenant()
    path = "/api/v1/queues/lat/metrics"
    direct, http = [], []
    gw = GatewayServer().start()
    with client(gw.url, tenant.key) as c:
        c.post("/api/v1/queues", json={"name": "lat"})
        for _ in range(200):  # warm both paths
            handler(api_event("GET", path, key=tenant.key), LocalContext("queues"))
            c.get(path)
        for _ in range(n):
            t0 = time.perf_counter()
            result = handler(api_event("GET", path, key=tenant.key), LocalContext("queues"))
            direct.append(time.perf_counter() - t0)
            assert result["statusCode"] == 200
            t0 = time.perf_counter()
            r = c.get(path)
            http.append(time.perf_counter() - t0)
            assert r.status_code == 200
    gw.stop()
    server.stop()
    d50, h50 = percentile(direct, 50) * 1000, percentile(http, 50) * 1000
    print(f"GET {path}, {n} requests each, 1 client")
    print(f"  handler called directly (event built + authorizer answer): p50 {d50:.2f} ms  "
          f"p90 {percentile(direct, 90) * 1000:.2f} ms")
    print(f"  over HTTP through the local gateway:                       p50 {h50:.2f} ms  "
          f"p90 {percentile(http, 90) * 1000:.2f} ms")
    print(f"  gateway adds p50 {h50 - d50:.2f} ms per request (ratio {h50 / d50:.2f}x)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
