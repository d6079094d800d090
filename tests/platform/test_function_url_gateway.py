"""`postbox dev --front-door function-url`: the local gateway acts as the surfaces' Lambda function
URLs (their events, their CORS preflights, their request id header), so the door's behaviour is met
locally first; by default it acts as API Gateway."""

from __future__ import annotations

import httpx
import pytest

from functions.local.cli import parser
from support.http import GatewayServer, client


@pytest.fixture
def url_gateway(database_url, monkeypatch):
    monkeypatch.setenv("POSTBOX_FRONT_DOOR", "function-url")
    server = GatewayServer().start()
    yield server
    server.stop()


def test_requests_reach_the_surfaces_as_function_url_events(url_gateway, tenant):
    with client(url_gateway.url, tenant.key) as c:
        assert c.post("/api/v1/queues", json={"name": "local-door"}).status_code == 201
        sent = c.post("/api/v1/queues/local-door/send", json={"message": {"n": 1}})
        assert sent.status_code == 201 and sent.json()["msg_id"]
        assert sent.headers["x-amzn-requestid"] and "apigw-requestid" not in sent.headers
        assert sent.headers["x-request-id"] == sent.headers["x-amzn-requestid"]  # the URL's request id
        missing = c.get("/no/such/route")
        assert missing.status_code == 404 and missing.json() == {"message": "Not Found"}


def test_a_browsers_preflight_is_answered_by_the_urls_cors_configuration(url_gateway):
    asked = httpx.options(f"{url_gateway.url}/api/v1/queues/anything/send", headers={
        "Origin": "https://app.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "apikey, content-type"})
    assert asked.status_code == 200 and asked.headers["access-control-allow-origin"] == "*"
    assert "apikey" in asked.headers["access-control-allow-headers"]
    answered = httpx.get(f"{url_gateway.url}/api/v1/queues", headers={"Origin": "https://app.example"})
    assert answered.status_code == 401 and answered.headers["access-control-allow-origin"] == "*"


def test_by_default_the_gateway_is_api_gateway(gateway, tenant):
    with client(gateway.url, tenant.key) as c:
        listed = c.get("/api/v1/queues")
    assert listed.status_code == 200 and listed.headers["apigw-requestid"]
    assert "x-amzn-requestid" not in listed.headers and "access-control-allow-origin" not in listed.headers


def test_postbox_dev_takes_the_door_as_a_flag():
    assert parser().parse_args(["dev", "--front-door", "function-url"]).front_door == "function-url"
    with pytest.raises(SystemExit):
        parser().parse_args(["dev", "--front-door", "cloudfront"])
