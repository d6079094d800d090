"""The Durable Streams conformance suite (`@durable-streams/server-conformance-tests`, pinned in
package.json) run against Postbox's local gateway, as `make test` runs it.

npm installs the pinned packages into this folder's node_modules (git-ignored); the gateway runs in
a subprocess on a free loopback port with 500 ms long-poll waits and anonymous `/v1/stream/...`
requests mapped to a fresh tenant (POSTBOX_DURABLE_OPEN_TENANT, never set by default); vitest runs
the one-line test file and its pass/fail counts are asserted.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from postbox import tenancy
from support.http import free_port

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
REFERENCE_PASSES = 326  # the Node reference server's count on this machine (of 338; 6 are skipped)

pytestmark = pytest.mark.conformance

_SERVE = """
from functions.local.gateway import LocalGateway
from functions.local.server import Server
Server(LocalGateway(), "127.0.0.1", {port}).serve_forever()
"""


def npm_install() -> None:
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed")
    installed = HERE / "node_modules" / ".package-lock.json"  # written by npm install
    if installed.exists() and installed.stat().st_mtime >= (HERE / "package-lock.json").stat().st_mtime:
        return
    # `npm install` with the committed lock installs exactly the pinned tree; `npm ci` (npm 11)
    # refuses this lock over an optional Windows-only package it cannot resolve on Linux.
    subprocess.run([npm, "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=HERE, check=True,
                   timeout=600)


def start_gateway(database_url: str, open_tenant: str, long_poll_ms: int = 500) -> tuple[subprocess.Popen, str]:
    """`postbox dev`'s gateway in a subprocess on the test database, so its settings are its own."""
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "POSTBOX_LONG_POLL_MS": str(long_poll_ms),
        "POSTBOX_DURABLE_OPEN_TENANT": open_tenant,
        "POSTBOX_POOL_MAX": "24",
        "POWERTOOLS_METRICS_DISABLED": "true",
        "POWERTOOLS_LOG_LEVEL": "ERROR",
        "PYTHONWARNINGS": "ignore::UserWarning",
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "shared")]),
    }
    proc = subprocess.Popen([sys.executable, "-c", _SERVE.format(port=port)], cwd=ROOT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(url + "/v1/stream/ping", timeout=2)
            return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the gateway did not start")


def run_suite(url: str) -> dict:
    report = HERE / "node_modules" / ".report.json"
    env = {**os.environ, "CONFORMANCE_TEST_URL": url}
    report.unlink(missing_ok=True)
    run = subprocess.run(
        ["npx", "vitest", "run", "--reporter=json", f"--outputFile={report}"],
        cwd=HERE, env=env, timeout=900, check=False, capture_output=True, text=True,
    )
    if not report.exists():
        raise RuntimeError(f"vitest wrote no report:\n{run.stdout[-4000:]}\n{run.stderr[-4000:]}")
    return json.loads(report.read_text())


@pytest.mark.timeout(900)  # about a minute here; the default 300 s is tight on a loaded machine
def test_durable_streams_conformance(database_url):
    npm_install()
    tenant = f"conformance-{uuid.uuid4().hex[:10]}"
    tenancy.create_tenant(tenant, plan="pro")
    proc, url = start_gateway(database_url, tenant)
    try:
        report = run_suite(url)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    passed, failed = report["numPassedTests"], report["numFailedTests"]
    failures = [
        " > ".join([*t.get("ancestorTitles", []), t["title"]])
        for suite in report["testResults"] for t in suite["assertionResults"] if t["status"] == "failed"
    ]
    print(f"\nDurable Streams conformance: {passed} passed, {failed} failed, "
          f"{report['numPendingTests'] + report.get('numTodoTests', 0)} skipped of {report['numTotalTests']}")
    for name in failures:
        print("  FAILED", name)
    assert passed >= REFERENCE_PASSES, failures
