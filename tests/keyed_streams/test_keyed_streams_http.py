"""The streams surface over HTTP (local gateway): every route and status the spec names, the
publish/subscription/consume routes it implies, and project scoping of keys."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from postbox import tenancy
from support.http import client


def _err(r, status, code=None):
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    if code:
        assert body["error"]["code"] == code, body
    return body["error"]


def test_create_get_list_patch_delete(api):
    r = api.post("/v1/streams", json={"name": "orders", "retention": "30d", "max_backlog": 50000})
    assert r.status_code == 200 and r.json() == {"name": "orders", "project": "default", "created": True}
    got = api.get("/v1/streams/orders").json()
    assert got["retention"] == "30d" and got["effective_retention_ms"] == 2592000000
    assert got["max_backlog"] == got["effective_max_backlog"] == 50000
    assert got["messages"] == 0 and got["created_at"].endswith("Z")
    listed = api.get("/v1/streams").json()["streams"]
    assert listed == [{"name": "orders", "project": "default", "messages": 0, "active_keys": 0, "scheduled": 0,
                       "subscriptions": [], "created_at": got["created_at"]}]
    r = api.patch("/v1/streams/orders", json={"retention": "forever", "max_backlog": None})
    assert r.status_code == 200
    assert r.json() == {"name": "orders", "project": "default", "retention": "forever", "max_backlog": None}
    assert api.get("/v1/streams/orders").json()["effective_retention_ms"] is None
    api.post("/v1/streams/orders/messages", json={"payload": 1})
    r = api.delete("/v1/streams/orders")
    assert r.status_code == 200
    assert r.json() == {"name": "orders", "project": "default", "deleted": True, "messages_deleted": 1}
    _err(api.get("/v1/streams/orders"), 404, "stream_not_found")


def test_create_defaults_and_project_in_body_or_query(api):
    tenancy.ensure_project(api.tenant.tenant_id, "payments")
    assert api.post("/v1/streams", json={"name": "a"}).json()["project"] == "default"
    got = api.get("/v1/streams/a").json()
    assert (got["retention"], got["effective_retention_ms"], got["max_backlog"]) == ("7d", 604800000, None)
    assert api.post("/v1/streams", json={"name": "b", "project": "payments"}).json()["project"] == "payments"
    assert api.post("/v1/streams?project=payments", json={"name": "c"}).json()["project"] == "payments"
    assert api.post("/v1/streams", json={"name": "b"}).status_code == 200  # unique per project, not globally
    assert [s["name"] for s in api.get("/v1/streams?project=payments").json()["streams"]] == ["b", "c"]
    assert len(api.get("/v1/streams").json()["streams"]) == 4
    assert api.get("/v1/streams/b?project=payments").json()["project"] == "payments"


def test_create_errors(api):
    _err(api.post("/v1/streams", json={}), 400, "invalid_name")
    _err(api.post("/v1/streams", json={"name": "has space"}), 400, "invalid_name")
    _err(api.post("/v1/streams", json={"name": "a/b"}), 400, "invalid_name")
    _err(api.post("/v1/streams", json={"name": "ok", "retention": "7 days"}), 400, "invalid_retention")
    _err(api.post("/v1/streams", json={"name": "ok", "retention": "0d"}), 400, "invalid_retention")
    _err(api.post("/v1/streams", json={"name": "ok", "max_backlog": -1}), 400, "invalid_max_backlog")
    _err(api.post("/v1/streams", json={"name": "ok", "max_backlog": "10"}), 400, "invalid_max_backlog")
    _err(api.post("/v1/streams", content=b"{nope", headers={"content-type": "application/json"}), 400)
    e = _err(api.post("/v1/streams", json={"name": "ok", "project": "nowhere"}), 404, "project_not_found")
    assert e["message"] == "no project named nowhere"
    assert api.post("/v1/streams", json={"name": "v1.orders_x-y"}).status_code == 200
    e = _err(api.post("/v1/streams", json={"name": "v1.orders_x-y"}), 409, "stream_exists")
    assert e["message"] == "a stream named v1.orders_x-y already exists in project default"


def test_get_patch_delete_errors(api):
    e = _err(api.get("/v1/streams/missing"), 404, "stream_not_found")
    assert e["message"] == "no stream named missing in project default"
    _err(api.patch("/v1/streams/missing", json={"retention": "1d"}), 404)
    _err(api.delete("/v1/streams/missing"), 404)
    api.post("/v1/streams", json={"name": "s"})
    _err(api.patch("/v1/streams/s", json={}), 400, "nothing_to_update")
    _err(api.patch("/v1/streams/s", json={"retention": "soon"}), 400, "invalid_retention")
    _err(api.patch("/v1/streams/s", json={"max_backlog": -5}), 400, "invalid_max_backlog")
    _err(api.patch("/v1/streams/s", json={"colour": "red"}), 400)
    assert api.patch("/v1/streams/s", json={"max_backlog": 10}).json()["max_backlog"] == 10
    assert api.patch("/v1/streams/s", json={"max_backlog": 0}).json()["max_backlog"] is None
    assert api.patch("/v1/streams/s", json={"retention": "12h"}).json()["retention"] == "12h"
    assert api.patch("/v1/streams/s", json={"retention": None}).json()["retention"] == "7d"  # the default again
    api.post("/v1/streams/s/subscriptions", json={"name": "billing-worker"})
    api.post("/v1/streams/s/subscriptions", json={"name": "notifier"})
    e = _err(api.delete("/v1/streams/s"), 409, "subscriptions_exist")
    assert e["message"] == "delete this stream's subscriptions first: billing-worker, notifier"


def test_publish_creates_the_stream_and_browse_shows_spec_bodies(api):
    r = api.post("/v1/streams/orders/messages", json={
        "key": "tenant_42", "payload": {"order_id": 8891}, "headers": {"region": "in"},
        "idempotency_key": "order-8891-created"})
    assert r.status_code == 200 and r.json()["replayed"] is False
    msg = r.json()["message"]
    assert msg["id"].startswith("msg_") and len(msg["id"]) == 25
    listed = api.get("/v1/streams/orders/messages").json()["messages"]
    assert listed == [msg]
    assert set(msg) == {"id", "stream", "project", "key", "payload", "headers", "idempotency_key", "deliver_at",
                        "expires_at", "published_at", "offset", "status"}
    assert (msg["stream"], msg["project"], msg["key"], msg["payload"], msg["headers"]) == (
        "orders", "default", "tenant_42", {"order_id": 8891}, {"region": "in"})
    assert (msg["deliver_at"], msg["expires_at"], msg["offset"], msg["status"]) == (None, None, 0, "available")
    replay = api.post("/v1/streams/orders/messages", json={"payload": {"other": 1},
                                                           "idempotency_key": "order-8891-created"})
    assert replay.json() == {"message": msg, "replayed": True}
    assert api.get("/v1/streams/orders/messages/0").json() == msg
    _err(api.get("/v1/streams/orders/messages/7"), 404, "message_not_found")
    _err(api.get("/v1/streams/orders/messages/x"), 400)


def test_publish_errors_and_backlog_429(api):
    _err(api.post("/v1/streams/s/messages", json={"key": "a"}), 400, "invalid_payload")
    _err(api.post("/v1/streams/s/messages", json={"payload": 1, "deliver_at": "tomorrow"}), 400,
         "invalid_deliver_at")
    _err(api.post("/v1/streams/s/messages", json={"payload": 1, "deliver_at": "2030-01-01T00:00:00"}), 400,
         "invalid_deliver_at")
    _err(api.post("/v1/streams/s/messages", json={"payload": 1, "expires_at": "2001-01-01T00:00:00Z"}), 400,
         "invalid_expires_at")
    _err(api.post("/v1/streams/s/messages", json={"payload": 1, "headers": ["x"]}), 400, "invalid_headers")
    _err(api.post("/v1/streams/s/messages?project=nowhere", json={"payload": 1}), 404, "project_not_found")
    api.post("/v1/streams", json={"name": "capped", "max_backlog": 2})
    for i in range(2):
        assert api.post("/v1/streams/capped/messages", json={"payload": i}).status_code == 200
    e = _err(api.post("/v1/streams/capped/messages", json={"payload": 2}), 429, "backlog_full")
    assert "backlog" in e["message"]


def test_browse_filters_and_paging(api):
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat().replace("+00:00", "Z")
    for i in range(6):
        api.post("/v1/streams/s/messages", json={"key": "even" if i % 2 == 0 else "odd", "payload": {"n": i}})
    sched = api.post("/v1/streams/s/messages", json={"key": "even", "payload": {"n": 6}, "deliver_at": later})
    assert sched.json()["message"]["status"] == "scheduled"
    assert sched.json()["message"]["deliver_at"].endswith("Z")

    def payloads(query):
        r = api.get("/v1/streams/s/messages" + query)
        assert r.status_code == 200, r.text
        return [m["payload"]["n"] for m in r.json()["messages"]]

    assert payloads("") == [6, 5, 4, 3, 2, 1, 0]
    assert payloads("?key=odd") == [5, 3, 1]
    assert payloads("?status=scheduled") == [6]
    assert payloads("?status=available&key=even") == [4, 2, 0]
    assert payloads("?limit=2") == [6, 5]
    assert payloads("?limit=2&before_offset=5") == [4, 3]
    assert api.get("/v1/streams/s/messages?limit=2").json()["next_before_offset"] == 5
    assert payloads("?q=%22n%22%3A3") == [3]
    assert payloads("?q=nothing") == []
    assert payloads("?status=cancelled") == []
    _err(api.get("/v1/streams/s/messages?limit=501"), 400, "invalid_limit")
    _err(api.get("/v1/streams/s/messages?limit=0"), 400, "invalid_limit")
    _err(api.get("/v1/streams/s/messages?status=dead"), 400, "invalid_status")
    _err(api.get("/v1/streams/s/messages?before_offset=-1"), 400, "invalid_before_offset")
    _err(api.get("/v1/streams/nope/messages"), 404, "stream_not_found")
    assert len(api.get("/v1/streams/s/messages?limit=500").json()["messages"]) == 7


def test_cancel_route(api):
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    offset = api.post("/v1/streams/s/messages", json={"payload": 1, "deliver_at": later}).json()["message"]["offset"]
    now = api.post("/v1/streams/s/messages", json={"payload": 2}).json()["message"]["offset"]
    r = api.post(f"/v1/streams/s/messages/{offset}/cancel")
    assert r.status_code == 200 and r.json()["message"]["status"] == "cancelled"
    _err(api.post(f"/v1/streams/s/messages/{offset}/cancel"), 409, "not_scheduled")
    _err(api.post(f"/v1/streams/s/messages/{now}/cancel"), 409, "not_scheduled")
    _err(api.post("/v1/streams/s/messages/99/cancel"), 404, "message_not_found")
    assert [m["offset"] for m in api.get("/v1/streams/s/messages?status=cancelled").json()["messages"]] == [offset]


def test_subscription_routes_consume_ack_nack(api):
    _err(api.post("/v1/streams/s/subscriptions", json={"name": "w"}), 404, "stream_not_found")
    api.post("/v1/streams", json={"name": "s"})
    r = api.post("/v1/streams/s/subscriptions", json={"name": "w", "max_deliveries": 3, "lease_ms": 60000})
    assert r.status_code == 200
    assert r.json()["name"] == "w" and r.json()["max_deliveries"] == 3 and r.json()["pending"] == 0
    _err(api.post("/v1/streams/s/subscriptions", json={"name": "w"}), 409, "subscription_exists")
    _err(api.post("/v1/streams/s/subscriptions", json={"name": "bad name"}), 400, "invalid_name")
    _err(api.post("/v1/streams/s/subscriptions", json={"name": "x", "max_deliveries": 0}), 400,
         "invalid_max_deliveries")
    assert [s["name"] for s in api.get("/v1/streams/s/subscriptions").json()["subscriptions"]] == ["w"]
    _err(api.get("/v1/streams/s/subscriptions/nope"), 404, "subscription_not_found")

    for i in range(3):
        api.post("/v1/streams/s/messages", json={"key": f"k{i}", "payload": i})
    got = api.post("/v1/streams/s/subscriptions/w/consume", json={"max_messages": 2}).json()["messages"]
    assert [m["payload"] for m in got] == [0, 1]
    assert all(m["attempt"] == 1 and m["receipt"] and m["lease_expires_at"].endswith("Z") for m in got)
    sub = api.get("/v1/streams/s/subscriptions/w").json()
    assert (sub["pending"], sub["in_flight"]) == (3, 2)
    listed = api.get("/v1/streams").json()["streams"][0]
    assert (listed["active_keys"], listed["subscriptions"]) == (3, ["w"])
    r = api.post("/v1/streams/s/subscriptions/w/ack", json={"receipts": [got[0]["receipt"]]})
    assert r.json() == {"acked": [0], "lost": []}
    r = api.post("/v1/streams/s/subscriptions/w/nack", json={"receipts": [got[1]["receipt"]]})
    assert r.json() == {"released": [1], "lost": []}
    again = api.post("/v1/streams/s/subscriptions/w/consume").json()["messages"]
    assert sorted((m["payload"], m["attempt"]) for m in again) == [(1, 2), (2, 1)]
    _err(api.post("/v1/streams/s/subscriptions/w/ack", json={"receipts": ["garbage"]}), 400, "invalid_receipt")
    _err(api.post("/v1/streams/s/subscriptions/w/ack", json={"receipts": []}), 400, "invalid_receipts")
    _err(api.post("/v1/streams/s/subscriptions/w/consume", json={"max_messages": 101}), 400, "invalid_max_messages")
    _err(api.post("/v1/streams/s/subscriptions/nope/consume"), 404, "subscription_not_found")
    assert api.get("/v1/streams/s/subscriptions/w/dead").json() == {"messages": []}
    empty = api.post("/v1/streams/s/subscriptions/w/consume", json={"wait_ms": 200}).json()
    assert empty == {"messages": []}
    r = api.delete("/v1/streams/s/subscriptions/w")
    assert r.status_code == 200 and r.json()["deleted"] is True
    _err(api.delete("/v1/streams/s/subscriptions/w"), 404, "subscription_not_found")
    assert api.delete("/v1/streams/s").json()["messages_deleted"] == 3


def test_long_poll_consume_wakes_on_publish(api, gateway, notify_only):
    import threading

    api.post("/v1/streams", json={"name": "s"})
    api.post("/v1/streams/s/subscriptions", json={"name": "w"})
    found = {}

    def wait():
        with client(gateway.url, api.tenant.key) as c:
            found["r"] = c.post("/v1/streams/s/subscriptions/w/consume", json={"wait_ms": 3000}).json()

    t = threading.Thread(target=wait)
    t.start()
    notify_only.wait_until_asleep()
    api.post("/v1/streams/s/messages", json={"payload": "hello"})
    t.join()
    assert [m["payload"] for m in found["r"]["messages"]] == ["hello"]
    assert notify_only.woken == [True]


def test_roles_and_missing_key(api, gateway):
    with client(gateway.url, None) as anon:
        _err(anon.get("/v1/streams"), 401, "unauthorized")
    api.post("/v1/streams/s/messages", json={"payload": 1})
    with client(gateway.url, api.tenant.key_for("read")) as reader:
        assert reader.get("/v1/streams/s").status_code == 200
        assert reader.get("/v1/streams/s/messages").status_code == 200
        _err(reader.post("/v1/streams", json={"name": "x"}), 403, "forbidden")
        _err(reader.post("/v1/streams/s/messages", json={"payload": 1}), 403, "forbidden")
    with client(gateway.url, api.tenant.key_for("write")) as writer:
        assert writer.post("/v1/streams/s/messages", json={"payload": 2}).status_code == 200
        _err(writer.delete("/v1/streams/s"), 403, "forbidden")
        _err(writer.post("/v1/streams/s/subscriptions", json={"name": "w"}), 403, "forbidden")


def test_a_project_key_sees_only_its_own_project(api, gateway):
    tenancy.ensure_project(api.tenant.tenant_id, "payments")
    api.post("/v1/streams", json={"name": "orders"})  # default project
    api.post("/v1/streams", json={"name": "secret"})
    with client(gateway.url, api.tenant.key_for("manage", project="payments")) as scoped:
        r = scoped.post("/v1/streams", json={"name": "orders", "project": "default"})
        assert r.json() == {"name": "orders", "project": "payments", "created": True}  # its project is enforced
        scoped.post("/v1/streams/orders/messages?project=default", json={"payload": "p"})
        assert [(s["name"], s["project"]) for s in scoped.get("/v1/streams").json()["streams"]] == [
            ("orders", "payments")]
        assert [s["name"] for s in scoped.get("/v1/streams?project=default").json()["streams"]] == ["orders"]
        _err(scoped.get("/v1/streams/secret"), 404)
        _err(scoped.get("/v1/streams/secret?project=default"), 404)
        _err(scoped.delete("/v1/streams/secret?project=default"), 404)
        _err(scoped.get("/v1/streams/secret/messages?project=default"), 404)
    assert api.get("/v1/streams/orders").json()["messages"] == 0
    assert api.get("/v1/streams/orders?project=payments").json()["messages"] == 1
    _err(api.get("/v1/streams?project=nowhere"), 404, "project_not_found")


def test_another_tenants_stream_is_a_404(api, make_tenant, gateway):
    api.post("/v1/streams", json={"name": "mine"})
    other = make_tenant()
    with client(gateway.url, other.key) as c:
        _err(c.get("/v1/streams/mine"), 404, "stream_not_found")
        _err(c.get("/v1/streams/mine/messages"), 404)
        _err(c.delete("/v1/streams/mine"), 404)
        assert c.get("/v1/streams").json() == {"streams": []}


def test_payload_above_the_plan_limit_is_413(make_tenant, gateway):
    small = make_tenant(plan="free")
    with client(gateway.url, small.key) as c:
        _err(c.post("/v1/streams/s/messages", json={"payload": "x" * 300_000}), 413, "payload_too_large")
        assert c.post("/v1/streams/s/messages", json={"payload": "x" * 1000}).status_code == 200


def test_subscription_routes_on_a_missing_stream_are_404(api):
    _err(api.get("/v1/streams/none/subscriptions"), 404, "stream_not_found")
    _err(api.get("/v1/streams/none/subscriptions/w"), 404, "stream_not_found")
    _err(api.get("/v1/streams/none/subscriptions/w/dead"), 404, "stream_not_found")
    _err(api.post("/v1/streams/none/subscriptions/w/ack", json={"receipts": ["1.00000000000000000000000000000000"]}),
         404, "stream_not_found")
    api.post("/v1/streams", json={"name": "s"})
    _err(api.get("/v1/streams/s/subscriptions/w/dead"), 404, "subscription_not_found")
    _err(api.post("/v1/streams/s/subscriptions/w/nack", json={"receipts": ["1.00000000000000000000000000000000"]}),
         404, "subscription_not_found")

