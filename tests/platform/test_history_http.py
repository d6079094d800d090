"""The history routes of the four surfaces over HTTP: a key's read permission gives its own
resource's series (a point a minute over the last hour or day); another tenant's resource, or another
project's, is answered as a missing one (404); a key without read is refused; the window is checked."""

from __future__ import annotations

from datetime import timedelta

import pytest

from postbox import db, history
from postbox_client import Client, item
from support.http import client
from support.work_api import W, fresh_key_cache

_fresh_cache = pytest.fixture(autouse=True)(fresh_key_cache)


def _make(gateway, key: str) -> dict[str, str]:
    """One resource of each kind, a message sent to each; the path of each one's history route."""
    with Client(gateway.url, key) as pb:
        pb.queues.create("jobs")
        pb.queues.send("jobs", {"n": 1})
        scope = pb.work.create_scope("charts")
        work = pb.work.create_queue(scope, "tickets")
        pb.work.publish(scope, work, {"n": 1})
        pb.partitioned.push([item("orders", {"n": 1})])
        pb.streams.create("signups")
        pb.streams.subscribe("signups", "mailer", start="earliest")
        pb.streams.publish("signups", {"n": 1})
    return {
        "queue": "/api/v1/queues/jobs/history",
        "work": f"{W}/scopes/{scope['id']}/queues/{work['id']}/history",
        "partitioned": "/api/v1/resources/queues/orders/history",
        "stream": "/v1/streams/signups/history",
    }


def _record_two_minutes() -> None:
    with db.connection() as conn:
        now = conn.execute("SELECT clock_timestamp()").fetchone()[0]
    history.record(now - timedelta(minutes=2))
    history.record(now - timedelta(minutes=1))


def _series(r) -> dict:
    assert r.status_code == 200, r.text
    body = r.json()
    return body.get("data", body)


def test_each_surface_answers_its_resources_series_to_a_read_key(gateway, tenant):
    paths = _make(gateway, tenant.key)
    _record_two_minutes()
    reader = tenant.key_for("read")
    with client(gateway.url, reader) as c:
        for kind, path in paths.items():
            for window, span in (("hour", 3600), ("day", 86400)):
                s = _series(c.get(path, params={"window": window}))
                assert s["window"] == window and s["to"] - s["from"] == span, kind
                assert len(s["t"]) == 2 and s["depth"] == [1, 1], (kind, s)
                assert s["in_per_min"] == [None, 0] and s["out_per_min"] == [None, 0], (kind, s)
                assert all(a is not None and a >= 0 for a in s["oldest_age_sec"]), (kind, s)
            assert _series(c.get(path))["window"] == "hour"  # the default


def test_another_tenants_resource_is_404_as_a_missing_one(gateway, tenant, make_tenant):
    paths = _make(gateway, tenant.key)
    _record_two_minutes()
    other = make_tenant()
    with client(gateway.url, other.key) as c:
        for kind, path in paths.items():
            theirs = c.get(path)
            assert theirs.status_code == 404 and "depth" not in theirs.text, (kind, theirs.text)
            missing = c.get(MISSING[kind](path))
            assert missing.status_code == 404, (kind, missing.text)
            assert _code(theirs) == _code(missing), kind


MISSING = {  # the same route naming a resource no one has
    "queue": lambda p: p.replace("jobs", "nope"),
    "work": lambda p: p.replace(p.split("/")[-2], "00000000-0000-7000-8000-000000000000"),
    "partitioned": lambda p: p.replace("orders", "nope"),
    "stream": lambda p: p.replace("signups", "nope"),
}


def _code(r) -> object:
    """What an error answer says to branch on, without the request's own id or the name asked for."""
    body = r.json()
    error = body.get("error", body.get("detail"))
    return error.get("code") if isinstance(error, dict) else type(error).__name__


def test_another_projects_key_finds_no_queue_or_stream(gateway, tenant):
    paths = _make(gateway, tenant.key)
    with client(gateway.url, tenant.key_for("read", project="elsewhere")) as c:
        for kind in ("queue", "stream"):
            assert c.get(paths[kind]).status_code == 404, kind


def test_a_key_without_read_is_refused_and_a_bad_window_is_a_client_error(gateway, tenant):
    paths = _make(gateway, tenant.key)
    with client(gateway.url, tenant.key_for("anon")) as c:
        for kind, path in paths.items():
            assert c.get(path).status_code == 401, kind
    with client(gateway.url, tenant.key) as c:
        minted = c.post(f"{W}/tenants/{tenant.tenant_id}/api-keys",
                        json={"subject_id": "publisher", "allowed_operations": ["scaiqueue:publish"]})
        assert minted.status_code == 201, minted.text
        for kind, path in paths.items():
            r = c.get(path, params={"window": "week"})
            assert r.status_code in (400, 422), (kind, r.text)
            assert "window" in r.text, kind
    with client(gateway.url, minted.json()["data"]["key"]) as c:
        r = c.get(paths["work"])
        assert r.status_code == 403 and r.json()["error"]["code"] == "AUTHZ_PERMISSION_DENIED", r.text
