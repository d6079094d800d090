"""Subscriptions of the work surface over HTTP: every route, status and error code."""

from __future__ import annotations

import uuid

from support.http import client
from support.tenants import new_tenant
from support.work_api import W
from support.work_api import error as _error
from support.work_api import ok as _ok


def test_subscription_routes(gateway, api):
    scope = _ok(api.post(f"{W}/scopes", json={"slug": "news"}), 201)
    feed = _ok(api.post(f"{W}/scopes/{scope['id']}/queues", json={"slug": "feed", "consumer_mode": "broadcast"}), 201)
    base = f"{W}/scopes/{scope['id']}/subscriptions"
    body = {"subscriber_type": "agent", "subscriber_id": "indexer", "queue_id": feed["id"],
            "filter": {"any": [{"field": "type", "op": "eq", "value": "news.published"}]}, "max_in_flight": 5}
    sub = _ok(api.post(base, json=body), 201)
    assert sub["delivery_mode"] == "pull" and sub["auto_claim"] is False and sub["state"] == "active"
    assert sub["queue_id"] == feed["id"] and sub["max_in_flight"] == 5
    other = _ok(api.post(base, json={**body, "subscriber_id": "mailer", "filter": None}), 201)
    assert [s["subscriber_id"] for s in _ok(api.get(base))] == ["indexer", "mailer"]
    assert _ok(api.get(f"{base}/{sub['id']}"))["filter"] == body["filter"]
    changed = _ok(api.patch(f"{base}/{other['id']}", json={"max_in_flight": 9, "auto_claim": True}))
    assert changed["max_in_flight"] == 9 and changed["auto_claim"] is True
    assert _ok(api.post(f"{base}/{other['id']}/pause"))["state"] == "paused"
    assert _ok(api.post(f"{base}/{other['id']}/resume"))["state"] == "active"

    q = f"{W}/scopes/{scope['id']}/queues/{feed['id']}"
    news = _ok(api.post(f"{q}/messages", json={"body": "n", "type": "news.published"}), 201)
    other_type = _ok(api.post(f"{q}/messages", json={"body": "o", "type": "other"}), 201)
    with client(gateway.url, api.tenant.key_for("write")) as worker:
        [got] = _ok(worker.post(f"{base}/{sub['id']}/claim", json={"batch_size": 10}))
        assert got["id"] == news["id"] and got["claim_token"]
        done = f"{base}/{sub['id']}/messages/{got['id']}"
        _error(worker.post(f"{done}/complete", json={"claim_token": str(uuid.uuid4())}), 409, "SCAIQUEUE_NOT_CLAIMED")
        assert _ok(worker.post(f"{done}/release"))["state"] == "pending"
        [got] = _ok(worker.post(f"{base}/{sub['id']}/claim"))
        assert _ok(worker.post(f"{done}/fail", json={"reason": "later"}))["state"] == "pending"
        _error(worker.post(f"{done}/complete"), 409, "SCAIQUEUE_NOT_CLAIMED")
        _error(worker.post(f"{base}/{sub['id']}/messages/{other_type['id']}/complete"), 404,
               "SCAIQUEUE_MESSAGE_NOT_FOUND")
        check = _ok(worker.post(f"{W}/subscriptions/{sub['id']}/check-processed",
                                json={"message_ids": [news["id"], other_type["id"]]}))
        assert check == {news["id"]: False, other_type["id"]: False}
        # the mailer is auto-claimed: both messages were assigned to it as they were published
        assert _ok(worker.post(f"{base}/{other['id']}/claim", json={"batch_size": 10})) == []
        inbox = worker.get(f"{base}/{other['id']}/deliveries", params={"state": "claimed", "limit": 1})
        assert inbox.status_code == 200 and inbox.json()["meta"]["next_cursor"]
        rest = worker.get(f"{base}/{other['id']}/deliveries",
                          params={"state": "claimed", "cursor": inbox.json()["meta"]["next_cursor"]})
        mailer = inbox.json()["data"] + _ok(rest)
        assert [m["id"] for m in mailer] == [news["id"], other_type["id"]]
        assert all(m["state"] == "claimed" and m["attempts"] == 1 and m["claim_token"] for m in mailer)
        assert _ok(worker.get(f"{base}/{other['id']}/deliveries", params={"state": "pending"})) == []
        _error(worker.get(f"{base}/{other['id']}/deliveries", params={"state": "lost"}), 422, "VALIDATION_ERROR")
        for m in mailer:
            token = {"claim_token": m["claim_token"]}
            _ok(worker.post(f"{base}/{other['id']}/messages/{m['id']}/complete", json=token))
        check = _ok(worker.post(f"{W}/subscriptions/{other['id']}/check-processed",
                                json={"message_ids": [news["id"], other_type["id"], "x"]}))
        assert check == {news["id"]: True, other_type["id"]: True, "x": False}
        _error(worker.patch(f"{base}/{sub['id']}", json={"max_in_flight": 1}), 403, "AUTHZ_PERMISSION_DENIED")
    with client(gateway.url, api.tenant.key_for("read")) as reader:
        _ok(reader.get(base))
        _error(reader.post(base, json=body), 403, "AUTHZ_PERMISSION_DENIED")
        _error(reader.get(f"{base}/{other['id']}/deliveries"), 403, "AUTHZ_PERMISSION_DENIED")
        _error(reader.post(f"{W}/subscriptions/{sub['id']}/check-processed", json={"message_ids": ["x"]}), 403,
               "AUTHZ_PERMISSION_DENIED")

    err = _error(api.post(base, json={**body, "filter": {"field": "type", "op": "gt"}}), 422, "VALIDATION_ERROR")
    assert err["details"][0]["field"] == "filter"
    _error(api.post(base, json={**body, "delivery_mode": "push"}), 422, "VALIDATION_ERROR")
    _error(api.post(base, json={**body, "queue_id": "nope"}), 422, "VALIDATION_ERROR")
    _error(api.post(base, json={**body, "queue_id": str(uuid.uuid4())}), 422, "VALIDATION_ERROR")
    assert _ok(api.delete(f"{base}/{sub['id']}")) == {"id": sub["id"], "deleted": True}
    for r in (api.get(f"{base}/{sub['id']}"), api.delete(f"{base}/{sub['id']}"), api.post(f"{base}/{sub['id']}/pause"),
              api.post(f"{base}/{sub['id']}/claim"), api.get(f"{base}/nope"),
              api.get(f"{base}/{sub['id']}/deliveries"),
              api.post(f"{W}/subscriptions/{sub['id']}/check-processed", json={"message_ids": ["x"]})):
        _error(r, 404, "SCAIQUEUE_SUBSCRIPTION_NOT_FOUND")
    with client(gateway.url, new_tenant().key) as outsider:
        _error(outsider.post(f"{W}/subscriptions/{other['id']}/check-processed", json={"message_ids": ["x"]}), 404,
               "SCAIQUEUE_SUBSCRIPTION_NOT_FOUND")
        _error(outsider.get(f"{base}/{other['id']}/deliveries"), 404, "SCAIQUEUE_SUBSCRIPTION_NOT_FOUND")
