"""The OpenAPI 3 document of the whole API, generated from the resolvers themselves.

Each surface's resolver describes its routes from its own models (Powertools); this module merges
the surfaces into one document and adds what the resolvers cannot know: each surface's error
envelope (every operation's `default` answer, and its validation status), the answers of the
gateway itself (`{"message": …}`), the `apikey` and bearer security schemes, and the durable
protocol described from the route table. `make openapi` writes it to `docs/openapi.json`; the
local gateway serves it at `/openapi.json` with Swagger UI at `/docs`.
"""

from __future__ import annotations

import importlib
import json
from typing import Any

from functions.api.durable import openapi as durable_openapi
from functions.routes import FUNCTIONS, ROUTES
from postbox.inputs import INT64_MAX

TITLE = "Postbox"
VERSION = "1"

_SURFACES = {
    "queues": "Queues: pgmq-style queues of JSON messages with a visibility timeout.",
    "keyed-streams": "Keyed streams: append-only streams per project with subscriptions.",
    "partitioned": "Partitioned queues: Queen-style queues of ordered partitions with leases.",
    "flows": "Flows: streaming queries over partitioned queues (register, read state, commit a cycle).",
    "durable": "Durable streams: the Durable Streams protocol, driven by headers.",
    "work": "Work queues: scopes with system queues; fifo, priority and deadline queues; publish, claim, finish.",
}
# The web console's static files (pages for a browser, not part of the API) and SQS's endpoint (AWS's
# own protocol, which AWS's service model describes and SDKs read).
NOT_API = {"console", "sqs"}

_GATEWAY_ERROR = {
    "type": "object",
    "required": ["message"],
    "properties": {"message": {"type": "string"}},
    "description": "The gateway's own answer: no such route (404), a payload over 6 MB (413), a failed function (500).",
}

_DETAIL = {
    "type": "object",
    "required": ["loc", "msg", "type"],
    "properties": {
        "loc": {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]}},
        "msg": {"type": "string"},
        "type": {"type": "string"},
    },
}

ERRORS: dict[str, dict[str, Any]] = {
    "queues": {
        "type": "object",
        "required": ["detail"],
        "properties": {"detail": {"anyOf": [
            {"type": "string"},
            {"type": "object", "required": ["code", "message"],
             "properties": {"code": {"type": "string"}, "message": {"type": "string"}}},
            {"type": "array", "items": _DETAIL},
        ]}},
        "description": "`detail` is a sentence, a `{code, message}` to branch on (403, 413), or the fields that "
                       "failed validation (422).",
    },
    "keyed-streams": {
        "type": "object",
        "required": ["error"],
        "properties": {"error": {"type": "object", "required": ["code", "message"],
                                 "properties": {"code": {"type": "string"}, "message": {"type": "string"}}}},
        "description": "A validation error's code is `invalid_<field>`.",
    },
    "partitioned": {
        "type": "object",
        "required": ["error"],
        "properties": {"error": {"type": "string"}, "field": {"type": "string"}},
        "description": "`field` names the first field that failed validation.",
    },
    "flows": {
        "type": "object",
        "required": ["error"],
        "properties": {"success": {"type": "boolean", "const": False}, "error": {"type": "string"},
                       "denied": {"type": "boolean"}, "query_id": {"type": "string"}, "name": {"type": "string"}},
        "description": '`{"success": false, "error": …}`; the ownership gate answers 404 `{"error": "not found"}`.',
    },
    "durable": durable_openapi.ERROR,
    "work": {
        "type": "object",
        "required": ["error", "meta"],
        "properties": {
            "error": {"type": "object", "required": ["code", "message"],
                      "properties": {"code": {"type": "string"}, "message": {"type": "string"},
                                     "details": {}, "retry_after": {"type": "integer"}}},
            "meta": {"type": "object", "required": ["request_id"],
                     "properties": {"request_id": {"type": "string"}}},
        },
        "description": "`code` is one of the surface's error codes (`VALIDATION_ERROR` lists each field in "
                       "`details`); `meta.request_id` is also the `X-Request-Id` header.",
    },
}

_SECURITY_SCHEMES = {
    "apikey": {"type": "apiKey", "in": "header", "name": "apikey", "description": "A Postbox key."},
    "bearer": {"type": "http", "scheme": "bearer", "description": "A Postbox key as `Authorization: Bearer <key>`."},
}


def _app(function: str) -> Any:
    return importlib.import_module(FUNCTIONS[function].rpartition(".")[0]).app


def _exact(node: Any) -> Any:
    """Integral floats back to integers (Powertools writes bounds as floats; 2^63-1 became 2^63)."""
    if isinstance(node, dict):
        return {k: _exact(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_exact(v) for v in node]
    if isinstance(node, float) and node.is_integer():
        return INT64_MAX if node == float(INT64_MAX) else int(node)
    return node


def surface_document(function: str) -> dict[str, Any]:
    """One surface's own document, from its resolver's routes and models."""
    schema = _app(function).get_openapi_schema(title=f"{TITLE} {function}", version=VERSION)
    return _exact(json.loads(schema.model_dump_json(by_alias=True, exclude_none=True)))


def _error_responses(function: str, validation_status: int) -> dict[str, Any]:
    ref = {"$ref": f"#/components/schemas/{_error_name(function)}"}
    either = {"anyOf": [ref, {"$ref": "#/components/schemas/GatewayError"}]}
    return {
        str(validation_status): {"description": "A field is missing, of the wrong type, or not allowed; the "
                                                "answer names it.", "content": {"application/json": {"schema": ref}}},
        "401": {"description": "No valid key.", "content": {"application/json": {"schema": ref}}},
        "default": {"description": "An error in the surface's envelope (or the gateway's own answer).",
                    "content": {"application/json": {"schema": either}}},
    }


def _error_name(function: str) -> str:
    return "".join(part.capitalize() for part in function.split("-")) + "Error"


def _rename(doc: dict[str, Any], taken: dict[str, Any], prefix: str) -> dict[str, Any]:
    """Give this surface's schemas that clash with another surface's a prefixed name."""
    schemas = doc.get("components", {}).get("schemas", {})
    clashes = {name for name, body in schemas.items() if name in taken and taken[name] != body}
    if not clashes:
        return doc
    text = json.dumps(doc)
    for name in clashes:
        text = text.replace(f'"#/components/schemas/{name}"', f'"#/components/schemas/{prefix}{name}"')
    out = json.loads(text)
    out["components"]["schemas"] = {(prefix + k if k in clashes else k): v
                                    for k, v in out["components"]["schemas"].items()}
    return out


_POWERTOOLS_ERRORS = ("HTTPValidationError", "ValidationError", "ResponseValidationError")


def document() -> dict[str, Any]:
    """The whole API: every route of the route table, each with its surface's envelopes."""
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {"GatewayError": _GATEWAY_ERROR}
    for function in FUNCTIONS:
        if function in NOT_API:
            continue
        schemas[_error_name(function)] = ERRORS[function]
        if function == "durable":
            paths.update(durable_openapi.paths(f"#/components/schemas/{_error_name(function)}",
                                               "#/components/schemas/GatewayError"))
            continue
        app = _app(function)
        doc = _rename(surface_document(function), schemas, function.capitalize())
        for name, body in doc.get("components", {}).get("schemas", {}).items():
            if name not in _POWERTOOLS_ERRORS:
                schemas[name] = body
        errors = _error_responses(function, app.validation_status)
        for path, item in doc["paths"].items():
            for method, operation in item.items():
                operation["tags"] = [function]
                operation["summary"] = operation.get("summary", "").replace(f"{method.upper()} ", "", 1) or path
                responses = operation["responses"]
                responses.pop("422", None)
                for answer in responses.values():
                    if answer.get("content") == {}:
                        del answer["content"]  # no body (a 204)
                responses.update(errors)
                paths.setdefault(path, {})[method] = operation
    return {
        "openapi": "3.1.0",
        "info": {"title": TITLE, "version": VERSION,
                 "description": "Durable queues and streams on PostgreSQL. Limits and rules: docs/limits.md."},
        "tags": [{"name": f, "description": d} for f, d in _SURFACES.items()],
        "paths": dict(sorted(paths.items())),
        "components": {"schemas": dict(sorted(schemas.items())), "securitySchemes": _SECURITY_SCHEMES},
        "security": [{"apikey": []}, {"bearer": []}, {}],
    }


def routes_described(doc: dict[str, Any]) -> set[tuple[str, str]]:
    return {(method.upper(), path) for path, item in doc["paths"].items() for method in item}


def route_keys() -> set[tuple[str, str]]:
    return {(r.method, durable_openapi.openapi_path(r.path)) for r in ROUTES if r.function not in NOT_API}


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=1, ensure_ascii=False, sort_keys=False) + "\n"


def main() -> None:
    """`python -m functions.openapi [file]`: write the document (stdout without a file)."""
    import sys

    text = dumps(document())
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
