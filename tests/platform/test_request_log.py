"""`postbox dev`'s request log: one line per request with its method, path, status, time and tenant,
written by the gateway that served it; off unless asked for, and `--quiet` turns it off."""

from __future__ import annotations

import logging
import re

import pytest

from functions.local import cli, requestlog
from functions.local.gateway import LocalGateway
from postbox import tenancy
from support.http import GatewayServer, client

LINE = re.compile(r"(?P<method>[A-Z]+) (?P<path>\S+) (?P<status>\d{3}) (?P<ms>\d+\.\d) ms tenant=(?P<tenant>\S+)"
                  r"(?: id=(?P<id>\S+))?")


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def logged_gateway(database_url):
    lines = Lines()
    requestlog.logger.addHandler(lines)
    server = GatewayServer(request_log=True).start()
    yield server, lines.lines
    server.stop()
    requestlog.logger.removeHandler(lines)


def _fields(line: str) -> dict[str, str]:
    m = LINE.fullmatch(line)
    assert m, line
    return m.groupdict()


def test_each_request_logs_its_method_path_status_time_and_tenant(logged_gateway, tenant):
    server, lines = logged_gateway
    name = tenancy.tenant_name(tenant.tenant_id)
    with client(server.url, tenant.key) as api:
        assert api.post("/api/v1/queues", json={"name": "logged"}).status_code == 201
        assert api.post("/api/v1/queues/logged/send", json={"message": 1}).status_code == 201
        assert api.get("/api/v1/queues/missing").status_code == 404
    with client(server.url, None) as nobody:
        assert nobody.get("/api/v1/queues").status_code == 401
        assert nobody.get("/no/such/route").status_code == 404
    fields = [_fields(line) for line in lines]
    assert [(f["method"], f["path"], f["status"], f["tenant"]) for f in fields] == [
        ("POST", "/api/v1/queues", "201", name),
        ("POST", "/api/v1/queues/logged/send", "201", name),
        ("GET", "/api/v1/queues/missing", "404", name),
        ("GET", "/api/v1/queues", "401", "-"),
        ("GET", "/no/such/route", "404", "-"),
    ]
    assert all(float(f["ms"]) > 0 for f in fields[:3])


def test_a_failed_requests_line_names_the_id_its_answer_showed(logged_gateway, tenant):
    """Only failures grow by the id (a success's line is as long as ever); it is the X-Request-Id the
    caller saw, which the function's own log lines of that request carry as correlation_id."""
    server, lines = logged_gateway
    with client(server.url, tenant.key) as api:
        ok = api.post("/api/v1/queues", json={"name": "ided"})
        missing = api.get("/api/v1/queues/missing")
        work = api.get("/v1/modules/scaiqueue/scopes/no-such-scope")
    assert ok.status_code == 201 and missing.status_code == 404 and work.status_code == 404
    fields = [_fields(line) for line in lines]
    assert fields[0]["id"] is None
    assert fields[1]["id"] == missing.headers["x-request-id"] == missing.headers["apigw-requestid"]
    assert fields[2]["id"] == work.headers["x-request-id"] == work.json()["meta"]["request_id"]
    assert fields[2]["id"] == "req_" + work.headers["apigw-requestid"]


def test_a_too_large_body_is_logged_too(logged_gateway):
    server, lines = logged_gateway
    with client(server.url, None) as nobody:
        assert nobody.post("/api/v1/queues/x/send", content=b"x" * (10 * 1024 * 1024 + 1)).status_code == 413
    assert [_fields(line)["status"] for line in lines] == ["413"]


def test_the_log_is_off_unless_asked_for(monkeypatch, database_url):
    monkeypatch.delenv(requestlog.ENV, raising=False)
    assert LocalGateway().request_log is False
    monkeypatch.setenv(requestlog.ENV, "1")
    assert LocalGateway().request_log is True  # what `postbox dev` hands its worker processes
    monkeypatch.setenv(requestlog.ENV, "0")
    assert LocalGateway().request_log is False
    assert LocalGateway(request_log=True).request_log is True


def test_postbox_dev_logs_by_default_and_quiet_or_the_variable_silences_it(monkeypatch):
    monkeypatch.delenv(requestlog.ENV, raising=False)
    assert cli.parser().parse_args(["dev"]).quiet is False
    assert cli.parser().parse_args(["dev", "--quiet"]).quiet is True
    monkeypatch.setenv(requestlog.ENV, "0")
    assert cli.parser().parse_args(["dev"]).quiet is True


def test_postbox_dev_workers_each_write_their_requests_to_stderr(database_url, tmp_path):
    """The real command with two worker processes: each line comes from the process that served it."""
    import os
    import subprocess
    import sys
    import time

    import httpx

    from support.http import free_port

    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != requestlog.ENV}
    env |= {"DATABASE_URL": database_url, "POSTBOX_POOL_MAX": "4", "PYTHONUNBUFFERED": "1"}
    err = tmp_path / "stderr"
    with err.open("wb") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "functions.local.cli", "dev", "--port", str(port),
                                 "--state-dir", str(tmp_path / "state"), "--workers", "2"],
                                env=env, stdout=subprocess.DEVNULL, stderr=sink)
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/api/v1/queues/ready-probe", timeout=2).status_code:
                        break
                except httpx.TransportError:
                    assert proc.poll() is None and time.monotonic() < deadline, err.read_text()
                    time.sleep(0.2)
            key = (tmp_path / "state" / "dev-key").read_text().strip()
            answer = httpx.get(f"http://127.0.0.1:{port}/api/v1/queues", headers={"apikey": key}, timeout=10)
            assert answer.status_code == 200
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    logged = [_fields(m.group(0)) for m in LINE.finditer(err.read_text())]
    seen = [(f["method"], f["path"], f["status"], f["tenant"]) for f in logged]
    assert ("GET", "/api/v1/queues/ready-probe", "401", "-") in seen
    assert ("GET", "/api/v1/queues", "200", "dev") in seen


def test_a_signed_sqs_request_logs_its_tenant(logged_gateway, tenant):
    """The SQS endpoint checks its own callers (SigV4, no key): its lines name the tenant the
    signature resolved to, and `-` for a request it could not tie to one."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import ClientError

    from postbox.sqs import credentials

    def sqs_client(credential: dict):
        return boto3.session.Session().client(
            "sqs", endpoint_url=f"{server.url}/sqs", region_name="us-east-1",
            aws_access_key_id=credential["access_key_id"], aws_secret_access_key=credential["secret_access_key"],
            config=Config(retries={"max_attempts": 1, "mode": "standard"}))

    server, lines = logged_gateway
    sqs = sqs_client(credentials.mint(tenant.tenant_id, "manage"))
    sqs.create_queue(QueueName="signed")
    stranger = sqs_client({"access_key_id": "PBSQAAAAAAAAAAAAAAAA", "secret_access_key": "x"})
    with pytest.raises(ClientError):
        stranger.list_queues()
    fields = [_fields(line) for line in lines]
    assert [(f["path"], f["status"], f["tenant"]) for f in fields] == [
        ("/sqs", "200", tenancy.tenant_name(tenant.tenant_id)), ("/sqs", "403", "-")]
