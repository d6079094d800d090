"""The streams handler called with synthetic API Gateway events, and the pure pieces it relies on."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from functions.api.keyed_streams.app import handler
from functions.local.lambda_context import LocalContext
from postbox.errors import Invalid
from postbox.keyed_streams.durations import iso, parse_duration, parse_instant
from support.events import api_event

CTX = LocalContext("keyed-streams")


def _call(event):
    result = handler(event, CTX)
    return result["statusCode"], json.loads(result["body"])


def test_no_key_is_401_in_the_streams_envelope(database_url):
    status, body = _call(api_event("GET", "/v1/streams"))
    assert status == 401 and body == {"error": {"code": "unauthorized", "message": "No valid session or key."}}


def test_malformed_json_is_400(tenant):
    status, body = _call(api_event("POST", "/v1/streams", key=tenant.key, raw_body="{nope"))
    assert status == 400 and set(body["error"]) == {"code", "message"}


def test_publish_then_browse_through_the_handler(tenant):
    status, published = _call(api_event("POST", "/v1/streams/h/messages", key=tenant.key,
                                        body={"key": "k", "payload": [1, 2]}))
    assert status == 200 and published["message"]["payload"] == [1, 2]
    status, browsed = _call(api_event("GET", "/v1/streams/h/messages", key=tenant.key, query="key=k&limit=1"))
    assert status == 200 and browsed["messages"] == [published["message"]]


@pytest.mark.parametrize(("text", "ms"), [
    ("7d", 604_800_000), ("12h", 43_200_000), ("90m", 5_400_000), ("1h30m", 5_400_000), ("45s", 45_000),
    ("250ms", 250), ("2w", 1_209_600_000), ("30D", 2_592_000_000), ("forever", None), ("Forever", None),
])
def test_durations(text, ms):
    assert parse_duration(text) == ms


@pytest.mark.parametrize("text", ["", "7", "d", "7 days", "-1d", "0s", "1.5h", "never", "1y"])
def test_invalid_durations(text):
    with pytest.raises(Invalid):
        parse_duration(text)


def test_timestamps():
    assert iso(datetime(2026, 8, 31, 10, 15, tzinfo=UTC)) == "2026-08-31T10:15:00.000Z"
    plus2 = datetime(2026, 8, 31, 12, 15, 0, 123456, tzinfo=timezone(timedelta(hours=2)))
    assert iso(plus2) == "2026-08-31T10:15:00.123Z"
    assert parse_instant("2026-08-31T10:15:00Z", field="deliver_at") == datetime(2026, 8, 31, 10, 15, tzinfo=UTC)
    for bad in ("2026-08-31T10:15:00", "tomorrow", ""):
        with pytest.raises(Invalid):
            parse_instant(bad, field="deliver_at")
