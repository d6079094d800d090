"""The durable surface in OpenAPI terms, as well as OpenAPI can say it.

The Durable Streams protocol is driven by headers and raw bodies of the stream's own content type
(appends, NDJSON or JSON-array reads, server-sent events, multipart bootstrap), which no request
model can express. So each route of the route table is described here: its path parameters, the
query parameters and headers the protocol reads, the headers it answers with, and its error
envelope. The route table stays the source of which routes exist.
"""

from __future__ import annotations

from typing import Any

from functions.routes import routes_for

ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
        },
    },
}

_ANY_BODY = {"*/*": {"schema": {}}}


def _header(name: str, description: str) -> dict[str, Any]:
    return {"name": name, "in": "header", "required": False, "schema": {"type": "string"},
            "description": description}


def _query(name: str, description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": {"type": "string"},
            "description": description}


_READ = [
    _query("offset", "Where to start: an offset from `Stream-Next-Offset`, `-1` (the start) or `now` (the tail)."),
    _query("live", "`long-poll` to wait for data at the tail, `sse` for server-sent events."),
    _query("cursor", "The `Stream-Cursor` of the previous long-poll answer."),
    _header("If-None-Match", "An `ETag` of a previous read: 304 when nothing changed."),
    _header("Stream-Incarnation", "The incarnation a reader started on: 412 once the stream was recreated."),
]
_CREATE = [
    _header("Content-Type", "The stream's content type; `application/json` turns on JSON mode."),
    _header("Stream-TTL", "Seconds the stream lives after its last use (not with `Stream-Expires-At`)."),
    _header("Stream-Expires-At", "An RFC 3339 time the stream expires (not with `Stream-TTL`)."),
    _header("Stream-Closed", "`true` creates the stream closed."),
    _header("Stream-Forked-From", "Another stream to fork from."),
    _header("Stream-Fork-Offset", "The offset of the fork point."),
]
_APPEND = [
    _header("Content-Type", "Must be the stream's content type (409 otherwise)."),
    _header("Stream-Seq", "A writer sequence, compared bytewise: not greater than the last one is 409."),
    _header("Stream-Closed", "`true` closes the stream (with or without a final append)."),
    _header("Producer-Id", "Idempotent producer: its id (with `Producer-Epoch` and `Producer-Seq`)."),
    _header("Producer-Epoch", "Idempotent producer: its epoch; a stale epoch is 403."),
    _header("Producer-Seq", "Idempotent producer: its sequence; a duplicate is 204, a gap 409."),
]
_AUTH = [
    _header("apikey", "A Postbox key (or `Authorization: Bearer <key>`); public streams are readable without."),
]

_OPERATIONS: dict[str, tuple[str, str, list[dict[str, Any]], dict[str, str]]] = {
    "PUT": ("Create a stream", "201 with `Location` when created, 200 when it exists with the same settings, "
            "409 when the settings differ.", _CREATE,
            {"201": "Created", "200": "Exists with the same settings"}),
    "POST": ("Append to (or close) a stream", "The body is one message, or in JSON mode an array of messages. "
             "204 with `Stream-Next-Offset`; an idempotent producer's next sequence is 200.", _APPEND,
             {"204": "Appended", "200": "Appended by an idempotent producer"}),
    "GET": ("Read a stream", "The messages from `offset` with `Stream-Next-Offset`, `Stream-Up-To-Date` at the "
            "tail; a long-poll that times out is 204; offsets removed by retention are 410.", _READ,
            {"200": "Messages", "204": "Nothing new before the long-poll timed out", "304": "Not modified"}),
    "HEAD": ("A stream's metadata", "The headers a read would answer with, without a body.", [],
             {"200": "The stream exists"}),
    "DELETE": ("Delete a stream", "The stream and its messages; a later PUT creates a fresh one.", [],
               {"204": "Deleted"}),
    "OPTIONS": ("CORS preflight", "The CORS headers for browsers.", [], {"204": "Preflight answer"}),
}

# The hosted form's extensions: (method, the path after the stream) -> (summary, description, answers).
_EXTENSIONS: dict[tuple[str, str], tuple[str, str, dict[str, str]]] = {
    ("DELETE", "/snapshot/parts"): ("Discard staged snapshot parts", "Every staged part of the stream is dropped.",
                                    {"204": "Discarded"}),
    ("POST", "/snapshot/{offset}/parts"): ("Stage a snapshot part", "The body is one part; the answer's "
                                           "`Stream-Snapshot-Part` is its digest (at most 256 staged).",
                                           {"204": "Staged"}),
    ("GET", "/snapshot/{offset}"): ("Read a snapshot", "The snapshot at `offset` with its content type, "
                                    "`Stream-Snapshot-Offset` and `Stream-Snapshot-Digest`.", {"200": "The snapshot"}),
    ("HEAD", "/snapshot/{offset}"): ("A snapshot's metadata", "The headers a snapshot read answers with.",
                                     {"200": "The snapshot exists"}),
    ("PUT", "/snapshot/{offset}"): ("Write a snapshot", "The body (or the staged parts named in "
                                    "`Stream-Snapshot-Parts`) becomes the snapshot at `offset`; the same content "
                                    "again is 204, other content 409.", {"204": "Written"}),
    ("PUT", "/retention/{offset}"): ("Advance retention", "Appends below `offset` are removed and answer 410; "
                                     "retention never moves back.", {"204": "Retained from offset"}),
    ("GET", "/bootstrap"): ("Bootstrap", "`multipart/mixed`: the latest snapshot, then the updates after it.",
                            {"200": "Snapshot and updates"}),
    ("HEAD", "/bootstrap"): ("Bootstrap metadata", "The headers a bootstrap answers with.", {"200": "Available"}),
    ("GET", "/incarnation/{token}/chunk/{offset}"): ("Read a cacheable chunk", "The appends from `offset`, cut at "
                                                     "a fixed 1 MiB; `Stream-Immutable: true` once complete.",
                                                     {"200": "The chunk"}),
    ("HEAD", "/incarnation/{token}/chunk/{offset}"): ("A chunk's metadata", "The headers a chunk read answers with.",
                                                      {"200": "The chunk exists"}),
    ("GET", "/incarnation/{token}/snapshot/{offset}"): ("Read a cacheable snapshot", "The snapshot at `offset`, "
                                                        "`Stream-Immutable: true`.", {"200": "The snapshot"}),
    ("HEAD", "/incarnation/{token}/snapshot/{offset}"): ("A cacheable snapshot's metadata", "Its headers.",
                                                         {"200": "The snapshot exists"}),
}
_OTHER = ("Any other path under a stream", "404 `NOT_FOUND`, or 405 naming the methods served at that path.", {})

_PATH_PARAMS = {
    "name": "The stream's name (the open protocol's form).",
    "account": "The account (tenant) name (the hosted form).",
    "stream": "`s.{name}`: the stream's name in the hosted form.",
    "offset": "An offset (as `Stream-Next-Offset` gives them).",
    "token": "The stream's incarnation (its `Stream-Incarnation`).",
    "rest": "Any other path under the stream, slashes included.",
}


def _describe(method: str, path: str) -> tuple[str, str, list[dict[str, Any]], dict[str, str]]:
    """What a durable route does: a stream verb, one of the hosted form's extensions, or the catch-all."""
    base = path.split("/{stream}", 1)
    if len(base) == 1 or base[1] == "":
        return _OPERATIONS[method]
    if base[1] == "/{rest}":
        summary, description, ok = _OTHER
    else:
        summary, description, ok = _EXTENSIONS[(method, base[1])]
    return summary, description, [], ok


def openapi_path(path: str) -> str:
    """The route table's `{path+}` (API Gateway's greedy parameter) as OpenAPI's `{path}`."""
    return path.replace("+}", "}")


def paths(error_ref: str, gateway_ref: str) -> dict[str, dict[str, Any]]:
    """Every durable route of the route table as an OpenAPI path item."""
    out: dict[str, dict[str, Any]] = {}
    for route in routes_for("durable"):
        path = openapi_path(route.path)
        summary, description, params, ok = _describe(route.method, path)
        names = [seg[1:-1] for seg in path.split("/") if seg.startswith("{")]
        parameters = [{"name": n, "in": "path", "required": True, "schema": {"type": "string"},
                       "description": _PATH_PARAMS[n]} for n in names]
        responses: dict[str, Any] = {
            code: {"description": text, **({"content": _ANY_BODY} if code == "200" and route.method == "GET" else {})}
            for code, text in ok.items()
        }
        responses["default"] = {
            "description": "An error: `{\"error\": {\"code\", \"message\"}}`.",
            "content": {"application/json": {"schema": {"anyOf": [{"$ref": error_ref}, {"$ref": gateway_ref}]}},
                        "*/*": {"schema": {}}},
        }
        operation = {
            "tags": ["durable"],
            "summary": summary,
            "description": description,
            "operationId": "durable_" + "_".join([route.method.lower(), *(
                seg.strip("{}") for seg in path.split("/") if seg and not seg.startswith("v1"))]).replace(".", "_"),
            "parameters": parameters + params + _AUTH,
            "responses": responses,
        }
        if route.method in ("PUT", "POST"):
            operation["requestBody"] = {"required": False, "content": _ANY_BODY}
        out.setdefault(path, {})[route.method.lower()] = operation
    return out
