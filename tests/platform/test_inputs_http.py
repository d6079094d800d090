"""Every input that crashed a request is a 4xx in the surface's own envelope, naming the field, with
nothing written; a request without a key is 401 before its body is read. Over HTTP, through the
local gateway, on every surface that takes a JSON body."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from postbox.flows import quotas

JSON = {"content-type": "application/json"}
DEEP = '{"message": ' + "[" * 5000 + "]" * 5000 + "}"


@dataclass(frozen=True)
class Surface:
    name: str
    path: str  # a route that writes, with a JSON body
    body: dict[str, Any]  # a valid body for it, whose first field names where a value goes
    field: str  # the field of `body` that holds a value
    validation_status: int

    def setup(self, api) -> None:
        if self.name == "queues":
            assert api.post("/api/v1/queues", json={"name": "q"}).status_code == 201
        if self.name == "flows":
            quotas.grant(api.tenant.tenant_id)

    def nothing_written(self, api) -> bool:
        if self.name == "queues":
            return api.get("/api/v1/queues/q/metrics").json()["queue_length"] == 0
        if self.name == "streams":
            return api.get("/v1/streams/s").status_code == 404
        if self.name == "partitioned":
            return api.get("/api/v1/resources/queues/pq").status_code == 404
        return api.post("/streams/v1/queries", json={**self.body, "config_hash": "other"}).status_code == 200

    def names(self, response, field: str, status: int | None = None) -> None:
        """The answer is this surface's error envelope, with its status, and names `field`."""
        assert response.status_code == (status or self.validation_status), response.text
        body = response.json()
        if self.name == "queues":
            assert [".".join(map(str, d["loc"][1:])) or d["loc"][0] for d in body["detail"]][0] == field, body
        elif self.name == "streams":
            assert body["error"]["code"] == f"invalid_{field.split('.')[0]}", body
            assert body["error"]["message"].startswith(f"{field}: "), body
        elif self.name == "partitioned":
            assert body["field"] == field and body["error"].startswith(f"{field}: "), body
        else:
            assert body["success"] is False and body["error"].startswith(f"{field}: "), body


SURFACES = [
    Surface("queues", "/api/v1/queues/q/send", {"message": "m"}, "message", 422),
    Surface("streams", "/v1/streams/s/messages", {"payload": "m"}, "payload", 400),
    Surface("partitioned", "/api/v1/push", {"items": [{"queue": "pq", "payload": "m"}]}, "items.0.payload", 400),
    Surface("flows", "/streams/v1/queries", {"name": "fq", "source_queue": "src", "config_hash": "h"}, "name", 400),
]


def _with(surface: Surface, value_json: str) -> str:
    """The surface's valid body with `value_json` (raw JSON text) where its value goes."""
    marker = "__VALUE__"
    body = json.loads(json.dumps(surface.body))
    target, *path = surface.field.split(".")
    if path:
        body[target][int(path[0])][path[1]] = marker
    else:
        body[target] = marker
    return json.dumps(body).replace(f'"{marker}"', value_json)


@pytest.fixture(params=SURFACES, ids=[s.name for s in SURFACES])
def surface(request, api) -> Surface:
    request.param.setup(api)
    return request.param


def test_json_nested_thousands_deep_is_refused_naming_the_body(api, surface):
    surface.names(api.post(surface.path, content=_with(surface, "[" * 5000 + "]" * 5000), headers=JSON), "body")
    assert surface.nothing_written(api)


def test_nul_in_a_json_string_is_refused_naming_the_field(api, surface):
    surface.names(api.post(surface.path, content=_with(surface, '"a\\u0000b"'), headers=JSON), surface.field)
    assert surface.nothing_written(api)


def test_nul_in_a_member_name_and_lone_surrogates_are_refused(api, surface):
    bad_key = _with(surface, '{"k\\u0000": 1}')
    surface.names(api.post(surface.path, content=bad_key, headers=JSON), surface.field + ".k\x00")
    surrogate = _with(surface, '"\\ud800"')
    surface.names(api.post(surface.path, content=surrogate, headers=JSON), surface.field)
    assert surface.nothing_written(api)


def test_a_body_that_is_not_utf8_is_refused_naming_the_body(api, surface):
    raw = _with(surface, '"caf\u00e9"').encode("latin-1")
    surface.names(api.post(surface.path, content=raw, headers=JSON), "body")
    assert surface.nothing_written(api)


def test_numbers_json_cannot_hold_are_refused(api, surface):
    for text in ("1e400", "NaN", "-Infinity"):
        surface.names(api.post(surface.path, content=_with(surface, text), headers=JSON), surface.field)
    assert surface.nothing_written(api)


def test_a_non_json_content_type_is_415_in_the_surface_envelope(api, surface):
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "application/xml"):
        answer = api.post(surface.path, content=json.dumps(surface.body), headers={"content-type": content_type})
        assert answer.status_code == 415, answer.text
        body = answer.json()
        assert {"queues": "detail", "flows": "error", "streams": "error", "partitioned": "error"}[surface.name] in body
        if surface.name == "flows":
            assert body["success"] is False
    assert surface.nothing_written(api)


def test_json_with_a_charset_or_in_capitals_is_read(api, surface):
    for content_type in ("application/json; charset=utf-8", "Application/JSON"):
        body = {**surface.body, "name": "fq2"} if surface.name == "flows" and content_type[0] == "A" else surface.body
        answer = api.post(surface.path, content=json.dumps(body), headers={"content-type": content_type})
        assert answer.status_code in (200, 201), answer.text


def test_an_unknown_field_is_refused_by_name(api, surface):
    surface.names(api.post(surface.path, json={**surface.body, "surplus": 1}), "surplus")
    assert surface.nothing_written(api)


def test_a_missing_required_field_is_refused_by_name(api, surface):
    required = next(iter(surface.body))
    body = {k: v for k, v in surface.body.items() if k != required}
    surface.names(api.post(surface.path, json=body), required)
    assert surface.nothing_written(api)


def test_a_nul_in_a_query_parameter_or_a_path_segment_is_refused(api, surface):
    surface.names(api.post(surface.path, params={"x": "a\x00b"}, json=surface.body), "x")
    if surface.name in ("queues", "streams"):
        path = surface.path.replace("/q/", "/a%00b/").replace("/s/", "/a%00b/")
        surface.names(api.post(path, json=surface.body), "name" if surface.name == "queues" else "stream")
    assert surface.nothing_written(api)


def test_no_key_is_401_before_the_body_is_read(gateway, surface):
    import httpx

    with httpx.Client(base_url=gateway.url) as anonymous:
        for content in ("{}", "{nope", DEEP, '{"x": "\\u0000"}'):
            answer = anonymous.post(surface.path, content=content, headers=JSON)
            assert answer.status_code == 401, answer.text
        answer = anonymous.post(surface.path, content="{}", headers={"content-type": "text/plain"})
        assert answer.status_code == 401, answer.text


def test_a_body_over_the_lambda_limit_is_413_and_over_10_mb_is_refused_unread(api, surface):
    big = _with(surface, json.dumps("x" * (6 * 1024 * 1024)))
    answer = api.post(surface.path, content=big, headers=JSON)
    assert answer.status_code == 413 and answer.json() == {"message": "Request Entity Too Large"}
    answer = api.post(surface.path, content=b"x" * (10 * 1024 * 1024 + 1), headers=JSON)
    assert answer.status_code == 413
    assert surface.nothing_written(api)


# ---- integers beyond the column ---------------------------------------------------------------------


def test_integers_beyond_their_column_are_refused_naming_the_field(api):
    api.post("/api/v1/queues", json={"name": "q"})
    answer = api.get("/api/v1/queues/q/messages", params={"before": 2**63})
    assert answer.status_code == 422 and answer.json()["detail"][0]["loc"] == ["query", "before"]

    answer = api.post("/api/v1/configure", json={"queue": "pq", "options": {"retentionSeconds": 2**31}})
    assert answer.status_code == 400 and answer.json()["field"] == "options.retentionSeconds"
    assert api.get("/api/v1/resources/queues/pq").status_code == 404
    answer = api.post("/api/v1/ack", json={"leaseId": "l", "transactionId": "t", "partitionId": 2**63})
    assert answer.status_code == 400 and answer.json()["field"].startswith("partitionId")
    answer = api.get("/api/v1/dlq", params={"offset": 2**63})
    assert answer.status_code == 400 and answer.json()["field"] == "offset"

    api.post("/v1/streams", json={"name": "s"})
    for path, params in ((f"/v1/streams/s/messages/{2**63}", {}), ("/v1/streams/s/messages", {"before_offset": 2**63})):
        answer = api.get(path, params=params)
        assert answer.status_code == 400 and answer.json()["error"]["code"].startswith("invalid_"), answer.text

    quotas.grant(api.tenant.tenant_id)
    answer = api.post("/streams/v1/state/get", json={"query_id": "x", "partition_id": 2**63})
    assert answer.status_code == 400 and answer.json()["error"].startswith("partition_id")


# ---- names -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["'; drop table x;--", "x" * 10_000, "caf\u00e9"])
def test_publish_creates_no_stream_the_create_route_would_refuse(api, name):
    assert api.post("/v1/streams", json={"name": name}).status_code == 400
    answer = api.post(f"/v1/streams/{name}/messages", json={"payload": 1})
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid_name", answer.text
    assert api.get("/v1/streams").json()["streams"] == []


def test_flow_queue_names_follow_the_partitioned_queue_rule(api):
    quotas.grant(api.tenant.tenant_id)
    for field in ("source_queue", "sink_queue"):
        for bad in ("q" * 10_000, "has space"):
            body = {"name": "fq", "source_queue": "src", "config_hash": "h", field: bad}
            answer = api.post("/streams/v1/queries", json=body)
            assert answer.status_code == 400 and answer.json()["error"].startswith(field), answer.text
    assert api.post("/streams/v1/queries", json={"name": "fq", "source_queue": "src", "config_hash": "h"}).json()[
        "fresh"] is True


@pytest.mark.parametrize("name", ["\u65e5\u672c", "\U0001f4e6", "a b", "caf\u00e9"])
def test_a_unicode_name_in_a_path_is_the_resources_not_found(api, name):
    answer = api.get(f"/api/v1/queues/{name}")
    assert answer.status_code == 404 and "detail" in answer.json() and answer.json()["detail"] != "No such route."
    answer = api.get(f"/v1/streams/{name}")
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "stream_not_found"
    answer = api.get(f"/api/v1/resources/queues/{name}")
    assert answer.status_code == 404 and "not found" in answer.json()["error"]


# ---- answers ------------------------------------------------------------------------------------------


def test_an_answer_over_the_lambda_limit_fails_as_lambda_fails_it(api):
    api.post("/api/v1/queues", json={"name": "big"})
    message = "x" * (1024 * 1024 - 100)
    for _ in range(2):
        assert api.post("/api/v1/queues/big/send_batch", json={"messages": [message] * 4}).status_code == 201
    answer = api.post("/api/v1/queues/big/read", json={"qty": 8})
    assert answer.status_code == 500 and answer.json() == {"message": "Internal Server Error"}


def test_the_gateway_serves_the_openapi_document_and_swagger_ui(gateway):
    import httpx

    with httpx.Client(base_url=gateway.url) as c:
        doc = c.get("/openapi.json")
        assert doc.status_code == 200 and doc.json()["openapi"].startswith("3.")
        assert "/api/v1/queues/{name}/send" in doc.json()["paths"]
        page = c.get("/docs")
        assert page.status_code == 200 and "/docs/swagger-ui-bundle.js" in page.text and "http" not in page.text
        script = c.get("/docs/swagger-ui-bundle.js")
        assert script.status_code == 200 and len(script.content) > 100_000
        assert c.get("/docs/swagger-ui.css").status_code == 200


def test_lenient_bodies_that_lost_data_are_refused(api):
    """`{}` or `{"msg": …}` to send stored a null message; an unknown setting on create was dropped."""
    answer = api.post("/api/v1/queues", json={"name": "q", "visibility_timeout": 60})
    assert answer.status_code == 422 and answer.json()["detail"][0]["loc"] == ["body", "visibility_timeout"]
    assert api.get("/api/v1/queues/q").status_code == 404
    api.post("/api/v1/queues", json={"name": "q", "visibility_timeout_sec": 60})
    for body, loc in (({}, ["body", "message"]), ({"msg": 1}, ["body", "message"])):
        answer = api.post("/api/v1/queues/q/send", json=body)
        assert answer.status_code == 422 and answer.json()["detail"][0]["loc"] == loc, answer.text
    answer = api.post("/api/v1/queues/q/send", content='{"message": 1}',
                      headers={"content-type": "application/x-www-form-urlencoded"})  # what `curl -d` sends
    assert answer.status_code == 415
    assert api.get("/api/v1/queues/q/metrics").json()["queue_length"] == 0
    assert api.post("/api/v1/queues/q/send", json={"message": None}).status_code == 201  # null is a message
    assert api.post("/api/v1/queues/q/send", content=b'{"message": 2}').status_code == 201  # no Content-Type: JSON
