"""The OpenAPI document: generated from the resolvers, every route of the route table in it, and the
committed `docs/openapi.json` never stale."""

from __future__ import annotations

import json
from pathlib import Path

from functions import openapi

COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"


def test_the_committed_document_is_the_generated_one():
    assert COMMITTED.read_text(encoding="utf-8") == openapi.dumps(openapi.document()), (
        "docs/openapi.json is stale: run `make openapi` and commit it")


def test_every_route_of_the_route_table_is_described_and_nothing_else():
    doc = openapi.document()
    assert openapi.routes_described(doc) == openapi.route_keys()


def test_operations_carry_bodies_envelopes_and_security():
    doc = openapi.document()
    send = doc["paths"]["/api/v1/queues/{name}/send"]["post"]
    assert send["requestBody"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/SendMessage"}
    assert set(send["responses"]) == {"201", "401", "422", "default"}
    schema = doc["components"]["schemas"]["SendMessage"]
    assert schema["required"] == ["message"] and schema["additionalProperties"] is False
    push = doc["paths"]["/api/v1/push"]["post"]["responses"]
    assert push["400"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/PartitionedError"}
    retention = doc["components"]["schemas"]["QueueOptions"]["properties"]["retentionSeconds"]
    assert retention["anyOf"][0]["maximum"] == 2**31 - 1
    assert set(doc["components"]["securitySchemes"]) == {"apikey", "bearer"}
    durable = doc["paths"]["/v1/stream/{name}"]["post"]
    assert {p["name"] for p in durable["parameters"]} >= {"name", "Producer-Id", "Stream-Seq", "Content-Type"}
    assert "{rest}" in "".join(doc["paths"]) and "+}" not in "".join(doc["paths"])  # greedy as plain
    json.dumps(doc)  # plain JSON all the way down


def test_the_work_batch_publish_describes_its_per_entry_answers():
    """A batch's answer is one entry per message, partial failures in their places (issue 41): the
    document says so where a client generator and a reader look, beside the request's 1-100 entries."""
    doc = openapi.document()
    batch = doc["paths"]["/v1/modules/scaiqueue/scopes/{scope_id}/queues/{queue_id}/messages/batch"]["post"]
    answer = batch["responses"]["200"]["description"]
    assert all(words in answer for words in ("in order", "ok: true", "ok: false", "error: {code", "atomic"))
    schema = doc["components"]["schemas"]["WorkPublishBatch"]
    assert schema["properties"]["messages"]["maxItems"] == 100 and "atomic" in schema["properties"]
