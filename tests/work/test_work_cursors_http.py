"""Every paged work route refuses a cursor it did not write with 422, whatever shape the JSON
inside the base64 has (a regression: well-formed base64 of the wrong shape reached the queries)."""

from __future__ import annotations

import base64
import json

import pytest

from support.work_api import W
from support.work_api import error as _error
from support.work_api import ok as _ok

# Wrong for every route (sequence numbers and slugs alike); a number where a slug is due and a
# slug where a number is due are wrong too.
SHAPES = [{"x": 1}, [1], {}, [[1], 2], [1, "x"], "\u0000", ["a", "b"], 2**70, 1.5, True, -1, None, "", "x" * 300]
BY_SLUG = ("/scopes", "/queues")


def _cursor(value) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


@pytest.fixture
def routes(api):
    scope = _ok(api.post(f"{W}/scopes", json={"slug": "paged"}), 201)
    feed = _ok(api.post(f"{W}/scopes/{scope['id']}/queues", json={"slug": "feed", "consumer_mode": "broadcast"}), 201)
    sub = _ok(api.post(f"{W}/scopes/{scope['id']}/subscriptions",
                       json={"subscriber_type": "agent", "subscriber_id": "a", "queue_id": feed["id"]}), 201)
    s = f"{W}/scopes/{scope['id']}"
    return [f"{W}/scopes", f"{s}/queues", f"{s}/queues/{feed['id']}/messages", f"{s}/streams", f"{s}/audit",
            f"{s}/subscriptions/{sub['id']}/deliveries", f"{W}/tenants/{api.tenant.tenant_id}/audit"]


def test_a_cursor_of_any_other_shape_is_a_validation_error(api, routes):
    for path in routes:
        assert api.get(path).status_code == 200, path
        for value in SHAPES + ([7] if path.endswith(BY_SLUG) else ["abc"]):
            err = _error(api.get(path, params={"cursor": _cursor(value)}), 422, "VALIDATION_ERROR")
            assert err["details"][0]["field"] == "cursor", (path, value)
        _error(api.get(path, params={"cursor": "zzz"}), 422, "VALIDATION_ERROR")


def test_the_cursors_the_api_writes_still_page(api, routes):
    for n in range(3):
        _ok(api.post(f"{W}/scopes", json={"slug": f"more-{n}"}), 201)
    first = api.get(f"{W}/scopes", params={"limit": 2}).json()
    rest = _ok(api.get(f"{W}/scopes", params={"limit": 2, "cursor": first["meta"]["next_cursor"]}))
    assert [s["slug"] for s in first["data"] + rest] == ["more-0", "more-1", "more-2", "paged"]
