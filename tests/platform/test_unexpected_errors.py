"""What nobody expected is a 500 in the surface's own envelope on every resolver, and it is logged."""

from __future__ import annotations

import importlib
import json
import logging

import pytest

from functions import routes as route_table
from functions.local.lambda_context import LocalContext
from support.events import api_event

CASES = [
    ("queues", "postbox.queues.service", "list_queues", ("GET", "/api/v1/queues", None),
     {"detail": "internal error"}),
    ("keyed-streams", "postbox.keyed_streams.service", "list_streams", ("GET", "/v1/streams", None),
     {"error": {"code": "internal", "message": "internal error"}}),
    ("partitioned", "postbox.partitioned.service", "dead_letters", ("GET", "/api/v1/dlq", None),
     {"error": "internal error"}),
    ("flows", "postbox.flows.state", "get", ("POST", "/streams/v1/state/get", {"query_id": "q", "partition_id": 1}),
     {"success": False, "error": "internal error"}),
    ("durable", "postbox.durable.reads", "read", ("GET", "/v1/stream/x", None), None),
]


@pytest.mark.parametrize(("function", "module", "attr", "request_", "body"), CASES, ids=[c[0] for c in CASES])
def test_an_unexpected_error_is_500_in_the_envelope(tenant, monkeypatch, caplog, function, module, attr, request_,
                                                     body):
    def boom(*_a, **_k):
        raise RuntimeError("a bug of ours")

    monkeypatch.setattr(importlib.import_module(module), attr, boom)  # fails loudly if the target moved
    module_name, _, entry = route_table.FUNCTIONS[function].rpartition(".")
    handler = getattr(importlib.import_module(module_name), entry)
    method, path, payload = request_
    with caplog.at_level(logging.ERROR):
        result = handler(api_event(method, path, key=tenant.key, body=payload), LocalContext(function))
    assert result["statusCode"] == 500
    if body is not None:
        assert json.loads(result["body"]) == body
    else:
        assert json.loads(result["body"] or "{}").get("error", {}).get("code") == "internal"
    assert "a bug of ours" in caplog.text or "RuntimeError" in caplog.text
