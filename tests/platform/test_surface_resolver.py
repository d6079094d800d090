"""SurfaceResolver keeps the current request per thread (the local gateway runs requests on threads)."""

from __future__ import annotations

import json
import threading

from functions.api.queues.app import app


def test_current_event_and_context_are_per_thread():
    app.current_event = "main-thread-event"
    app.context = {"who": "main"}
    seen = {}

    def other():
        seen["event"] = getattr(app._local, "event", None)
        seen["context"] = dict(app.context)
        app.current_event = "other-thread-event"

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen == {"event": None, "context": {}}
    assert app.current_event == "main-thread-event" and app.context == {"who": "main"}


BODIES = {
    "plain": {"messages": [{"n": 1, "x": 1.5, "ok": True, "none": None, "text": "café ☕ \u2028", "tags": ["a", "b"]},
                           {"nested": {"deep": [[1, 2], {"k": "v"}]}, "big": 2**63, "neg": -0.0}], "count": 2},
    "list": [1, "two", {"three": [3.0]}],
    "datetime": {"at": __import__("datetime").datetime(2026, 11, 30, 13, 0, 0, 123456,
                                                       tzinfo=__import__("datetime").timezone.utc)},
    "tuple": {"pair": (1, 2), 3: "int key"},
}


def _answers(resolver_class, **kwargs):
    from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

    from functions.local.events import http_event
    from functions.local.lambda_context import LocalContext

    app = resolver_class(**kwargs) if resolver_class is not APIGatewayHttpResolver else resolver_class(
        enable_validation=True)

    @app.get("/<which>")
    def untyped(which: str):
        return BODIES[which]

    @app.get("/typed/<which>")
    def typed(which: str) -> dict:
        return BODIES[which]

    out = {}
    for which in BODIES:
        for path in (f"/{which}", f"/typed/{which}"):
            if path == "/typed/list":
                continue
            result = app.resolve(http_event("GET", path), LocalContext("t"))
            out[path] = (result["statusCode"], result["headers"].get("Content-Type"), result["body"])
    return out


def test_a_dict_or_list_answer_is_serialized_to_the_same_json_as_powertools_does():
    """The resolver serializes JSON-typed answers itself (skipping Powertools' per-value walk, and by
    orjson); the status, the content type and the JSON value must be those of Powertools' own path,
    for every kind of answer, typed or not. Text beyond ASCII is written as UTF-8, not escaped."""
    from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

    from functions.api.common import SurfaceResolver

    ours = _answers(SurfaceResolver, envelope=lambda status, code, message, details: {"error": code},
                    anonymous=True)
    theirs = _answers(APIGatewayHttpResolver)
    assert ours.keys() == theirs.keys()
    for path, (status, content_type, body) in ours.items():
        assert (status, content_type) == theirs[path][:2], path
        assert json.loads(body) == json.loads(theirs[path][2]), path
    assert ours["/plain"][2].startswith('{"messages":[{"n":1,"x":1.5,"ok":true,"none":null,"text":"café ☕')
    assert ours["/plain"][2] != theirs["/plain"][2]  # the same value, spelt by orjson


def test_a_json_typed_answer_is_not_walked_value_by_value(monkeypatch):
    from aws_lambda_powertools.event_handler.middlewares import openapi_validation

    walked = []
    real = openapi_validation.jsonable_encoder

    def counting(value, *args, **kwargs):
        walked.append(value)
        return real(value, *args, **kwargs)

    monkeypatch.setattr(openapi_validation, "jsonable_encoder", counting)
    from functions.api.common import SurfaceResolver

    _answers(SurfaceResolver, envelope=lambda status, code, message, details: {"error": code}, anonymous=True)
    # Only the answers left to Powertools (a datetime) or orjson cannot take (an int key) are walked.
    assert [v for v in walked if not isinstance(v, str)] == [BODIES["datetime"], BODIES["tuple"]]
