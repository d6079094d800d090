"""Routing rules and message schemas of the work surface over HTTP: every route, status and code."""

from __future__ import annotations

import uuid

import pytest

from support.http import client
from support.work_api import W
from support.work_api import error as _error
from support.work_api import ok as _ok


@pytest.fixture
def inbox(api, scope):
    return _ok(api.post(f"{W}/scopes/{scope['id']}/queues", json={"slug": "inbox"}), 201)


@pytest.fixture
def premium(api, scope):
    return _ok(api.post(f"{W}/scopes/{scope['id']}/queues", json={"slug": "premium"}), 201)


def test_rule_routes(api, scope, inbox, premium):
    base = f"{W}/scopes/{scope['id']}/routing-rules"
    rule = _ok(api.post(base, json={
        "name": "vip", "description": "premium customers", "priority": 5,
        "conditions": {"all": [{"field": "labels.customer_tier", "op": "eq", "value": "premium"}]},
        "action": {"type": "route", "queue_id": premium["id"]}, "source": {"queue_id": inbox["id"]}}), 201)
    assert rule["enabled"] is True and rule["trigger"] == "message_published" and rule["priority"] == 5
    assert rule["source"] == {"queue_id": inbox["id"]} and rule["action"]["queue_id"] == premium["id"]
    other = _ok(api.post(base, json={"name": "all", "action": {"type": "archive"}, "priority": 1, "enabled": False}),
                201)
    assert [r["name"] for r in _ok(api.get(base))] == ["all", "vip"]
    assert _ok(api.get(f"{base}/{rule['id']}"))["name"] == "vip"
    changed = _ok(api.patch(f"{base}/{rule['id']}", json={"priority": 50, "description": None}))
    assert changed["priority"] == 50 and changed["description"] is None and changed["name"] == "vip"
    assert _ok(api.post(f"{base}/{other['id']}/enable"))["enabled"] is True
    assert _ok(api.post(f"{base}/{other['id']}/disable"))["enabled"] is False
    dry = _ok(api.post(f"{base}/test", json={"message": {"labels": {"customer_tier": "premium"},
                                                         "queue_id": inbox["id"]}}))
    assert [r["id"] for r in dry["matches"]] == [rule["id"]] and dry["applied"]["id"] == rule["id"]
    assert _ok(api.post(f"{base}/test", json={"message": {"labels": {"customer_tier": "premium"}}}))["matches"] == []
    m = _ok(api.post(f"{W}/scopes/{scope['id']}/queues/{inbox['id']}/messages",
                     json={"body": "x", "labels": {"customer_tier": "premium"}}), 201)
    assert m["queue_id"] == premium["id"]
    assert _ok(api.delete(f"{base}/{rule['id']}")) == {"id": rule["id"], "deleted": True}
    for r in (api.get(f"{base}/{rule['id']}"), api.delete(f"{base}/{rule['id']}"),
              api.patch(f"{base}/{rule['id']}", json={"priority": 1}), api.post(f"{base}/{rule['id']}/enable"),
              api.get(f"{base}/not-a-uuid")):
        _error(r, 404, "SCAIQUEUE_RULE_NOT_FOUND")
    _error(api.get(f"{W}/scopes/{uuid.uuid4()}/routing-rules"), 404, "SCAIQUEUE_SCOPE_NOT_FOUND")


def test_rules_that_do_not_parse_are_refused_pointing_at_the_part(api, scope, inbox):
    base = f"{W}/scopes/{scope['id']}/routing-rules"

    def fields(body):
        return {d["field"] for d in _error(api.post(base, json=body), 422, "VALIDATION_ERROR")["details"]}

    assert fields({"name": "x", "action": {"type": "route", "queue_id": str(uuid.uuid4())}}) == {"action.queue_id"}
    assert fields({"name": "x", "action": {"type": "route"}}) == {"action"}
    assert fields({"name": "x", "action": {"type": "teleport"}}) == {"action.type"}
    assert fields({"name": "x", "action": {"type": "archive", "queue_id": inbox["id"]}}) == {"action"}
    nested = {"all": [{"field": "labels.a", "op": "eq", "value": "b"}, {"field": "nonsense", "op": "eq", "value": 1}]}
    assert fields({"name": "x", "action": {"type": "archive"}, "conditions": nested}) == {"conditions.all.1.field"}
    assert fields({"name": "x", "action": {"type": "archive"},
                   "conditions": {"field": "type", "op": "in", "value": "a"}}) == {"conditions"}
    assert fields({"name": "x", "action": {"type": "archive"},
                   "conditions": {"field": "type", "op": "like", "value": "a"}}) == {"conditions.op"}
    assert fields({"name": "x", "action": {"type": "archive"}, "trigger": "message_claimed"}) == {"trigger"}
    assert fields({"name": "x", "action": {"type": "archive"}, "source": {"queue_id": "nope"}}) == {"source.queue_id"}
    assert _ok(api.get(base)) == []


def test_rule_permissions(gateway, api, scope):
    base = f"{W}/scopes/{scope['id']}/routing-rules"
    with client(gateway.url, api.tenant.key_for("read")) as reader:
        assert _ok(reader.get(base)) == []
        _ok(reader.post(f"{base}/test", json={"message": {}}))
        _error(reader.post(base, json={"name": "x", "action": {"type": "archive"}}), 403, "AUTHZ_PERMISSION_DENIED")


def test_schema_routes_and_refused_publish(api, scope, inbox):
    base = f"{W}/scopes/{scope['id']}/schemas"
    order = {"type": "object", "required": ["qty"], "properties": {"qty": {"type": "integer", "minimum": 1}},
             "additionalProperties": False}
    s = _ok(api.post(base, json={"name": "order", "version": 1, "schema": order}), 201)
    assert s["version"] == "1" and s["deprecated"] is False and s["schema"] == order
    _error(api.post(base, json={"name": "order", "version": "1", "schema": order}), 409, "SCAIQUEUE_SLUG_CONFLICT")
    err = _error(api.post(base, json={"name": "bad", "version": "1", "schema": {"type": "wat"}}), 422,
                 "VALIDATION_ERROR")
    assert err["details"][0]["field"].startswith("schema")
    assert [x["name"] for x in _ok(api.get(base))] == ["order"]
    assert _ok(api.get(f"{base}/order/1"))["id"] == s["id"]
    _error(api.get(f"{base}/order/2"), 404, "SCAIQUEUE_SCHEMA_NOT_FOUND")
    assert _ok(api.post(f"{base}/order/1/validate", json={"payload": {"qty": 2}})) == {"valid": True, "errors": []}
    bad = _ok(api.post(f"{base}/order/1/validate", json={"payload": {"qty": 0, "x": 1}}))
    assert bad["valid"] is False and {e["field"] for e in bad["errors"]} == {"$", "qty"}

    q = f"{W}/scopes/{scope['id']}/queues/{inbox['id']}"
    _ok(api.post(f"{q}/messages", json={"body": {"anything": True}}), 201)  # no schema yet
    bound = _ok(api.put(f"{q}/schema", json={"name": "order", "version": 1}))
    assert bound == {"queue_id": inbox["id"], "schema": {"name": "order", "version": "1"}}
    assert _ok(api.get(q))["schema"] == {"name": "order", "version": "1"}
    err = _error(api.post(f"{q}/messages", json={"body": {"qty": "two"}}), 422, "VALIDATION_ERROR")
    assert err["details"] == [{"field": "body.qty", "message": "'two' is not of type 'integer'"}]
    _error(api.post(f"{q}/messages", json={"body": "a string"}), 422, "VALIDATION_ERROR")
    _ok(api.post(f"{q}/messages", json={"body": {"qty": 3}}), 201)
    assert _ok(api.get(f"{q}/stats"))["published_total"] == 2

    assert _ok(api.delete(f"{base}/order/1"))["deprecated"] is True
    _ok(api.post(f"{q}/messages", json={"body": {"qty": 4}}), 201)  # a queue naming it still validates
    _error(api.post(f"{q}/messages", json={"body": {"qty": 0}}), 422, "VALIDATION_ERROR")
    err = _error(api.put(f"{q}/schema", json={"name": "order", "version": "1"}), 422, "VALIDATION_ERROR")
    assert err["details"][0]["field"] == "version"
    assert _ok(api.put(f"{q}/schema", json={"name": None}))["schema"] is None
    _ok(api.post(f"{q}/messages", json={"body": {"qty": 0}}), 201)
    _error(api.put(f"{q}/schema", json={"name": "nope", "version": "1"}), 404, "SCAIQUEUE_SCHEMA_NOT_FOUND")
    _error(api.put(f"{W}/scopes/{scope['id']}/queues/{uuid.uuid4()}/schema", json={"name": None}), 404,
           "SCAIQUEUE_QUEUE_NOT_FOUND")


def test_a_schema_bound_elsewhere_is_learned_by_the_next_publish(api, scope, inbox):
    """Another process binds the schema: this one believed "no schema", the publish tells it."""
    from postbox import db

    base = f"{W}/scopes/{scope['id']}/schemas"
    s = _ok(api.post(base, json={"name": "n", "version": "1", "schema": {"type": "integer"}}), 201)
    q = f"{W}/scopes/{scope['id']}/queues/{inbox['id']}"
    _ok(api.post(f"{q}/messages", json={"body": "ok before"}), 201)
    with db.connection() as conn:  # behind this process's back
        conn.execute("UPDATE work_queues SET schema_id = %s WHERE queue_id = %s", (s["id"], inbox["id"]))
    _error(api.post(f"{q}/messages", json={"body": "not an integer"}), 422, "VALIDATION_ERROR")
    with db.connection() as conn:
        conn.execute("UPDATE work_queues SET schema_id = NULL WHERE queue_id = %s", (inbox["id"],))
    _ok(api.post(f"{q}/messages", json={"body": "fine again"}), 201)


def test_a_schema_whose_references_do_not_resolve_is_refused(api, scope, inbox):
    """$refs resolve within the schema only: a missing definition or a URL (never fetched) is refused
    at registration, naming where it is; one that resolves is kept."""
    base = f"{W}/scopes/{scope['id']}/schemas"
    for schema, field in (({"$ref": "http://169.254.169.254/latest"}, "schema.$ref"),
                          ({"$ref": "#/$defs/missing"}, "schema.$ref"),
                          ({"properties": {"a": {"prefixItems": [{"$ref": "#/nope"}]}}},
                           "schema.properties.a.prefixItems.0.$ref"),
                          ({"$dynamicRef": "#/$defs/gone"}, "schema.$dynamicRef")):
        err = _error(api.post(base, json={"name": "y", "version": "1", "schema": schema}), 422, "VALIDATION_ERROR")
        assert err["details"][0]["field"] == field, (schema, err)
    good = {"$defs": {"qty": {"type": "integer"}}, "properties": {"qty": {"$ref": "#/$defs/qty"}},
            "enum": [{"$ref": "not a reference: data"}, {"qty": 1}]}
    _ok(api.post(base, json={"name": "y", "version": "1", "schema": good}), 201)
    assert _ok(api.post(f"{base}/y/1/validate", json={"payload": {"qty": 1}}))["valid"] is True
    assert _ok(api.post(f"{base}/y/1/validate", json={"payload": {"qty": "x"}}))["valid"] is False


def test_a_stored_schema_that_cannot_resolve_refuses_publishes_with_422(api, scope, inbox):
    """A schema stored before references were checked fails its publishes with a clear 422, never 500."""
    from postbox import db

    base = f"{W}/scopes/{scope['id']}/schemas"
    s = _ok(api.post(base, json={"name": "old", "version": "1", "schema": {"type": "object"}}), 201)
    with db.connection() as conn:
        conn.execute("UPDATE work_schemas SET schema = '{\"$ref\": \"#/$defs/missing\"}' WHERE id = %s", (s["id"],))
    q = f"{W}/scopes/{scope['id']}/queues/{inbox['id']}"
    _ok(api.put(f"{q}/schema", json={"name": "old", "version": "1"}))
    err = _error(api.post(f"{q}/messages", json={"body": {"a": 1}}), 422, "VALIDATION_ERROR")
    assert "cannot resolve" in err["details"][0]["message"]
    found = _ok(api.post(f"{base}/old/1/validate", json={"payload": 1}))
    assert found["valid"] is False and "cannot resolve" in found["errors"][0]["message"]
