"""Synthetic API Gateway events for calling handlers directly, as API Gateway would."""

from __future__ import annotations

import json
from typing import Any

from functions.local.events import http_event
from functions.routes import match


def api_event(method: str, path: str, *, key: str | None = None, body: Any = None, query: str = "",
              raw_body: str | None = None, headers: dict[str, str] | None = None,
              source_ip: str = "127.0.0.1") -> dict[str, Any]:
    """The event API Gateway would send for a request (`key` in the `apikey` header): no key's answer
    in it, which the surface's own function resolves (a test calling a resolver directly adds one)."""
    found = match(method, path)
    assert found is not None, f"no route for {method} {path}"
    route, params = found
    hdrs = {"content-type": "application/json", **(headers or {})}
    if key:
        hdrs["apikey"] = key
    payload = raw_body if raw_body is not None else (json.dumps(body) if body is not None else None)
    return http_event(method, path, query=query, headers=hdrs, body=payload, route=route, path_parameters=params,
                      source_ip=source_ip)


def url_event(method: str, path: str, *, key: str | None = None, body: Any = None, query: str = "",
              raw_body: str | None = None, headers: dict[str, str] | None = None,
              source_ip: str = "127.0.0.1") -> dict[str, Any]:
    """The event a Lambda function URL would send for a request: no route in it, whatever the path."""
    hdrs = {"content-type": "application/json", **(headers or {})}
    if key:
        hdrs["apikey"] = key
    payload = raw_body if raw_body is not None else (json.dumps(body) if body is not None else None)
    return http_event(method, path, query=query, headers=hdrs, body=payload, source_ip=source_ip, function_url=True)
