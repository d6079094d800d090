"""The local gateway's event translation follows API Gateway's payload 2.0 rules."""

from __future__ import annotations

import base64
import time

from functions.local.events import http_event, read_response
from functions.routes import match


def test_request_becomes_a_v2_event():
    route, params = match("POST", "/api/v1/queues/emails/send")
    event = http_event(
        "POST", "/api/v1/queues/emails/send", query="a=1&a=2&b=",
        headers=[("X-Thing", "1"), ("x-thing", "2"), ("Cookie", "s=1; t=2"), ("Content-Type", "application/json")],
        body=b'{"message": 1}', route=route, path_parameters=params,
    )
    assert event["version"] == "2.0"
    assert event["routeKey"] == "POST /api/v1/queues/{name}/send"
    assert event["rawPath"] == "/api/v1/queues/emails/send"
    assert event["rawQueryString"] == "a=1&a=2&b="
    assert event["queryStringParameters"] == {"a": "1,2", "b": ""}
    assert event["headers"]["x-thing"] == "1,2"
    assert "cookie" not in event["headers"] and event["cookies"] == ["s=1", "t=2"]
    assert event["pathParameters"] == {"name": "emails"}
    assert event["body"] == '{"message": 1}' and event["isBase64Encoded"] is False
    assert event["requestContext"]["http"]["method"] == "POST"


def test_repeated_headers_and_parameters_are_folded_in_linear_time():
    """200,000 repeats of one header, and of one query parameter, each fold into one value at once
    (appended at each repeat, the two took about a minute)."""
    repeats = 200_000
    started = time.monotonic()
    event = http_event("GET", "/x", query="&".join(["p=v"] * repeats), headers=[("X-Rep", "abcdefgh")] * repeats)
    assert time.monotonic() - started < 2.0
    assert event["headers"]["x-rep"] == ",".join(["abcdefgh"] * repeats)
    assert event["queryStringParameters"]["p"] == ",".join(["v"] * repeats)


def test_binary_bodies_are_base64():
    event = http_event("POST", "/x", headers={"content-type": "application/octet-stream"}, body=b"\x00\xff")
    assert event["isBase64Encoded"] is True
    assert base64.b64decode(event["body"]) == b"\x00\xff"


def test_empty_body_is_absent():
    assert "body" not in http_event("GET", "/x")


def test_responses_come_back_with_status_headers_cookies_and_binary():
    r = read_response({"statusCode": 201, "headers": {"X-A": "1"}, "cookies": ["c=1"],
                       "body": base64.b64encode(b"\x01\x02").decode(), "isBase64Encoded": True})
    assert r.status == 201 and ("x-a", "1") in r.headers and ("set-cookie", "c=1") in r.headers
    assert r.body == b"\x01\x02"


def test_a_bare_result_is_a_200_json_answer():
    r = read_response({"hello": "world"})
    assert r.status == 200 and r.json() == {"hello": "world"}
