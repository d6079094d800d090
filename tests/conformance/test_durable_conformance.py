"""The Durable Streams conformance suite (`@durable-streams/server-conformance-tests`, pinned in
package.json) run against Postbox's local gateway, as `make test` runs it.

npm installs the pinned packages into this folder's node_modules (git-ignored); the gateway runs in
a subprocess on a free loopback port with 500 ms long-poll waits (and heartbeats), SSE answers
open for at most 3 s, and anonymous `/v1/stream/...`
requests mapped to a fresh tenant (POSTBOX_DURABLE_OPEN_TENANT, never set by default); vitest runs
the one-line test file and every test it runs must pass: none failed, and the number passed is the
number collected less the suite's own skips (its opt-in groups). No threshold: a count compared
with a floor (the reference server's 326) let a regression pass unseen. A failure is named by its
full title and message.
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
        # Many of the suite's SSE tests read the headers or a few events and never close the answer
        # (the reference server keeps each open until its process ends): each open answer holds one
        # of its caller's wait slots (the suite's requests are anonymous: one address's), so they
        # end within a few seconds, past any test's need, and the address may hold many.
        "POSTBOX_STREAM_MAX_SECONDS": "3",
        "POSTBOX_WAITS_PER_ADDRESS": "1000",
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
    verdict = Verdict(report)
    print("\n" + verdict.summary)
    for line in verdict.failures:
        print("  FAILED", line)
    assert verdict.ok, verdict.explain()


_SKIPPED = {"skipped", "pending", "todo", "disabled"}


class Verdict:
    """A vitest JSON report judged: every test the suite runs passed (its own skips aside)."""

    def __init__(self, report: dict) -> None:
        tests = [t for suite in report.get("testResults", []) for t in suite.get("assertionResults", [])]
        self.total = len(tests)
        self.passed = sum(t.get("status") == "passed" for t in tests)
        self.skipped = sum(t.get("status") in _SKIPPED for t in tests)
        self.failures = [
            f"{' > '.join([*t.get('ancestorTitles', []), t.get('title', '?')])}: "
            f"{_message(t.get('failureMessages') or ['(no message)'], t.get('duration'))}"
            for t in tests if t.get("status") not in _SKIPPED | {"passed"}
        ]
        # A test file that failed to load or run (no assertion results of its own) is a failure too.
        self.failures += [
            f"{suite.get('name', '?')}: {_message([suite.get('message') or '(no message)'])}"
            for suite in report.get("testResults", [])
            if suite.get("status") == "failed" and not suite.get("assertionResults")
        ]
        self.ok = self.total > 0 and not self.failures and self.passed == self.total - self.skipped
        self.summary = (f"Durable Streams conformance: {self.passed} passed, {len(self.failures)} failed, "
                        f"{self.skipped} skipped by the suite, of {self.total}")

    def explain(self) -> str:
        lines = [self.summary, *(f"FAILED {f}" for f in self.failures)]
        if self.total == 0:
            lines.append("the suite ran no tests")
        return "\n".join(lines)


def _message(messages: list[str], duration_ms: float | None = None) -> str:
    """A failure's message, without vitest's stack trace. A test over vitest's per-test timeout has
    only the stack vitest captured where the test was declared (`Error: STACK_TRACE_ERROR`)."""
    text = messages[0]
    if text.startswith("Error: STACK_TRACE_ERROR"):
        return f"timed out (vitest's per-test timeout) after {duration_ms or 0:.0f} ms"
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("at ")]
    return " / ".join(lines[:3])[:500]


def test_the_verdict_fails_on_any_failure_and_names_it():
    """The judgement itself, on vitest reports shaped as the suite's: 331 passed and 1 failed out of
    338 (the SSE Content-Length regression a floor of 326 let through) is a failure that names the
    test and its message; all run tests passed with the suite's 6 skips is a pass."""
    def report(statuses: list[str]) -> dict:
        tests = [{"ancestorTitles": ["Durable Streams Server Conformance", "SSE Mode"], "title": f"test {i}",
                  "status": status,
                  "failureMessages": ["AssertionError: expected '9' to be null\n    at file.js:1:1"]
                  if status == "failed" else []}
                 for i, status in enumerate(statuses)]
        return {"testResults": [{"name": "conformance.test.mjs", "status": "failed", "assertionResults": tests}]}

    regressed = Verdict(report(["passed"] * 331 + ["failed"] + ["skipped"] * 6))
    assert not regressed.ok
    assert regressed.failures == ["Durable Streams Server Conformance > SSE Mode > test 331: "
                                  "AssertionError: expected '9' to be null"]
    assert "331 passed, 1 failed, 6 skipped by the suite, of 338" in regressed.explain()
    assert Verdict(report(["passed"] * 332 + ["skipped"] * 6)).ok
    timed_out = report(["failed"])
    timed_out["testResults"][0]["assertionResults"][0].update(
        failureMessages=["Error: STACK_TRACE_ERROR\n    at task (chunk-artifact.js:1784:27)"], duration=5012.4)
    assert Verdict(timed_out).failures == ["Durable Streams Server Conformance > SSE Mode > test 0: "
                                           "timed out (vitest's per-test timeout) after 5012 ms"]
    assert not Verdict({"testResults": []}).ok  # nothing ran
    broken_file = {"testResults": [{"name": "conformance.test.mjs", "status": "failed", "message": "SyntaxError",
                                    "assertionResults": []}]}
    assert Verdict(broken_file).failures == ["conformance.test.mjs: SyntaxError"]
