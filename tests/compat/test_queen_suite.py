"""Queen's own client test suite (clients/client-py/tests of Queen's repository, vendored at a pinned
commit in queen_client_suite/, see its README) against Postbox: every test Postbox offers must pass.

The suite runs in its own pytest process (its rootdir, its pytest.ini, pytest-asyncio and our
plugin `postbox_queen_plugin` in place of its conftests), so neither its asyncio mode nor its
fixtures touch this session. It talks to this session's gateway handlers on a port of its own,
behind a front that holds a fresh tenant's key (Queen's tests send no token, as behind Queen's
proxy). What is not offered, and why, is listed once: NOT_OFFERED in the plugin.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from functions.local.gateway import LocalGateway
from support.http import GatewayServer

pytest.importorskip("queen", reason="queen-mq is installed by the dev extra")
pytest.importorskip("pytest_asyncio", reason="pytest-asyncio is installed by the dev extra")

SUITE = Path(__file__).parent / "queen_client_suite"


class KeyHoldingGateway:
    """The local gateway with a key added to every request that brings none (Queen's proxy's role)."""

    def __init__(self, inner: LocalGateway, key: str) -> None:
        self.inner, self.key = inner, key
        self.max_body_bytes = inner.max_body_bytes

    def handle(self, method, path, query, headers, body, source_ip="127.0.0.1"):
        names = {name.lower() for name, _ in headers}
        if "authorization" not in names and "apikey" not in names:
            headers = [*headers, ("authorization", f"Bearer {self.key}")]
        return self.inner.handle(method, path, query, headers, body, source_ip)

    def too_large(self, method, path):
        return self.inner.too_large(method, path)


@pytest.mark.timeout(1200)
def test_queen_client_suite_passes_every_test_postbox_offers(gateway, tenant, tmp_path):
    from postbox.flows import quotas

    quotas.grant(tenant.tenant_id)  # the streaming tests register queries: the operator's grant
    front = GatewayServer(KeyHoldingGateway(LocalGateway(), tenant.key)).start()
    report = tmp_path / "queen-suite.xml"
    env = {**os.environ, "QUEEN_URL": front.url, "PYTHONPATH": str(SUITE), "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-c", str(SUITE / "pytest.ini"), "--rootdir", str(SUITE),
             "-p", "no:cacheprovider", f"--junitxml={report}", "-o", "junit_family=xunit1", "-q"],
            cwd=SUITE, env=env, capture_output=True, text=True, timeout=1150,
        )
    finally:
        front.stop()
    out = run.stdout[-20000:] + run.stderr[-5000:]
    assert report.exists(), out
    cases = ET.parse(report).getroot().iter("testcase")
    outcome: dict[str, str] = {}
    for case in cases:
        name = f"{case.get('classname')}::{case.get('name')}"
        bad = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        outcome[name] = bad[0] if bad else "passed"
    not_passed = {name: o for name, o in outcome.items() if o != "passed"}
    assert outcome, out
    assert not not_passed, f"{len(not_passed)} of {len(outcome)} selected tests did not pass: {not_passed}\n{out}"
    assert run.returncode == 0, out
