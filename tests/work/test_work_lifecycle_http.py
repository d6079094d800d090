"""Routing rules on lifecycle triggers over HTTP: accepted with route or copy, refused otherwise."""

from __future__ import annotations

from support.work_api import W
from support.work_api import error as _error
from support.work_api import ok as _ok


def test_lifecycle_triggers_take_route_or_copy(api):
    scope = _ok(api.post(f"{W}/scopes", json={"slug": "life"}), 201)
    side = _ok(api.post(f"{W}/scopes/{scope['id']}/queues", json={"slug": "side"}), 201)
    base = f"{W}/scopes/{scope['id']}/routing-rules"
    for trigger in ("message_completed", "message_failed", "message_dead_lettered"):
        rule = _ok(api.post(base, json={"name": trigger, "trigger": trigger,
                                        "action": {"type": "copy", "queue_id": side["id"]}}), 201)
        assert rule["trigger"] == trigger
    err = _error(api.post(base, json={"name": "t", "trigger": "message_failed",
                                      "action": {"type": "escalate"}}), 422, "VALIDATION_ERROR")
    assert err["details"] == [{"field": "action.type", "message": "route or copy on this trigger"}]
    _error(api.post(base, json={"name": "t", "trigger": "message_claimed", "action": {"type": "archive"}}),
           422, "VALIDATION_ERROR")
    dry = _ok(api.post(f"{base}/test", json={"trigger": "message_completed", "message": {"body": {}}}))
    assert dry["applied"]["name"] == "message_completed"
    assert len(_ok(api.get(base))) == 3
