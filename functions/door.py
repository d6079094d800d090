"""What API Gateway does in front of a surface function, done by the function itself when a stack's
front door is the functions' own URLs (Lambda function URLs: `POSTBOX_FRONT_DOOR=function-url`,
a stack's `frontDoor`). Behind API Gateway (`api-gateway`, the default) none of this runs.

A function URL hands every request to its function, whatever its path, with no route, no throttle
and no size check but Lambda's own. So, with API Gateway's answers:
- the route: a request that no row of the route table sends to this function is `404 {"message":
  "Not Found"}`; one that a row matches gets its `routeKey` and `pathParameters`, as API Gateway
  fills them;
- the payload: a body over Lambda's 6 MB is `413 {"message": "Request Entity Too Large"}`
  (Lambda refuses larger invocations before the function runs, with the same status);
- the rate: a tenant over its plan's `requests_minute` is `429 {"message": "Too Many Requests"}`
  with `Retry-After` (counted per function instance; the stack caps instances with reserved
  concurrency, as API Gateway's stage throttle capped the whole API);
- CORS: the function URL's CORS configuration (`CORS_*` below, the origins from `corsAllowOrigins`)
  answers browsers' preflights; each answer also carries the allowed origin and the exposed headers.
The access log is the function's own line (`functions.request_record`).
"""

from __future__ import annotations

import json
import os
from typing import Any

API_GATEWAY, FUNCTION_URL = "api-gateway", "function-url"
DOORS = (API_GATEWAY, FUNCTION_URL)
MAX_EVENT_BODY_BYTES = 6 * 1024 * 1024  # Lambda's synchronous invocation payload

# The function URLs' CORS configuration (infra reads it; the local gateway answers preflights with it).
CORS_ALLOW_METHODS = ("*",)
CORS_ALLOW_HEADERS = (
    "content-type", "authorization", "apikey", "if-none-match", "if-match", "accept", "idempotency-key",
    "x-request-id", "x-amz-target", "x-amz-date", "x-amz-content-sha256", "x-amz-security-token",
    "stream-seq", "stream-ttl", "stream-expires-at", "stream-closed", "producer-id", "producer-epoch",
    "producer-seq", "stream-forked-from", "stream-fork-offset", "stream-fork-sub-offset", "stream-incarnation",
    "stream-snapshot-parts", "postbox-public",
)
CORS_EXPOSE_HEADERS = (
    "x-request-id", "retry-after", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "etag",
    "content-type", "location", "stream-next-offset", "stream-offset", "stream-cursor", "stream-up-to-date",
    "stream-closed", "producer-epoch", "producer-seq", "producer-expected-seq", "producer-received-seq",
    "stream-incarnation", "stream-snapshot-digest", "stream-snapshot-part", "stream-snapshot-offset",
    "stream-retained-offset", "stream-immutable", "stream-sse-data-encoding",
)
CORS_MAX_AGE_S = 300


def front_door() -> str:
    door = os.environ.get("POSTBOX_FRONT_DOOR", "") or API_GATEWAY
    return door if door in DOORS else API_GATEWAY


def is_function_url() -> bool:
    return front_door() == FUNCTION_URL


def allowed_origins() -> tuple[str, ...]:
    """`POSTBOX_CORS_ORIGINS`: comma-separated origins, `*` (the default) for any."""
    raw = os.environ.get("POSTBOX_CORS_ORIGINS", "") or "*"
    return tuple(o.strip() for o in raw.split(",") if o.strip()) or ("*",)


def _answer(status: int, message: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    """An answer as API Gateway gives its own: `{"message": ...}`."""
    return {"statusCode": status, "headers": {"Content-Type": "application/json", **(headers or {})},
            "body": json.dumps({"message": message})}


def serves(function: str) -> bool:
    """Whether `function` is an API surface (a row of the route table's functions): only those have
    a URL. The route table is read here, on a function URL's first request, never behind API Gateway."""
    from functions import routes

    return function in routes.FUNCTIONS


def admit(function: str, event: dict) -> dict | None:
    """Before the key is read: API Gateway's 404 for a request no route sends to `function`, its 413
    for a body too large; None when the request goes on (its route filled in, as API Gateway would)."""
    from functions import routes

    context = event.setdefault("requestContext", {})
    method = (context.get("http") or {}).get("method", "")
    found = routes.match(method, event.get("rawPath") or "/")
    if found is None or found[0].function != function:
        return _answer(404, "Not Found")
    body = event.get("body") or ""
    size = len(body) * 3 // 4 if event.get("isBase64Encoded") else len(body.encode())
    if size > MAX_EVENT_BODY_BYTES:
        return _answer(413, "Request Entity Too Large")
    route, params = found
    event["routeKey"] = context["routeKey"] = route.route_key
    if params:
        event["pathParameters"] = params
    return None


def throttle(tenant_id: str | None) -> dict | None:
    """API Gateway's 429 for a tenant over its plan's request rate (None: go on). An anonymous
    request (a public stream's read) is bounded by the function's reserved concurrency alone."""
    if not tenant_id:
        return None
    from postbox import ratelimit

    decision = ratelimit.check_requests(tenant_id)
    if decision.allowed:
        return None
    return _answer(429, "Too Many Requests", {"Retry-After": str(decision.retry_after_s)})


def with_cors(event: dict, result: Any) -> Any:
    """The CORS headers of an answer to a browser (a request with an allowed `Origin`), where the
    function did not set its own."""
    if not isinstance(result, dict) or "statusCode" not in result:
        return result
    origin = next((v for k, v in (event.get("headers") or {}).items() if k.lower() == "origin"), None)
    allowed = allowed_origins()
    if not origin or ("*" not in allowed and origin not in allowed):
        return result
    headers = result.get("headers")
    if not isinstance(headers, dict):
        headers = result["headers"] = {}
    present = {k.lower() for k in headers}
    if "access-control-allow-origin" not in present:
        headers["Access-Control-Allow-Origin"] = "*" if "*" in allowed else origin
        if "*" not in allowed:
            headers["Vary"] = "Origin"
    if "access-control-expose-headers" not in present:
        headers["Access-Control-Expose-Headers"] = ", ".join(CORS_EXPOSE_HEADERS)
    return result


def preflight(headers: dict[str, str]) -> dict | None:
    """What a function URL with our CORS configuration answers to a browser's preflight (an OPTIONS
    with `Origin` and `Access-Control-Request-Method`) before the function runs; None otherwise."""
    lower = {k.lower(): v for k, v in headers.items()}
    origin, method = lower.get("origin"), lower.get("access-control-request-method")
    if not origin or not method:
        return None
    allowed = allowed_origins()
    if "*" not in allowed and origin not in allowed:
        return {"statusCode": 200, "headers": {}, "body": ""}
    return {"statusCode": 200, "body": "", "headers": {
        "Access-Control-Allow-Origin": "*" if "*" in allowed else origin,
        "Access-Control-Allow-Methods": method.upper() if CORS_ALLOW_METHODS == ("*",) else
        ", ".join(CORS_ALLOW_METHODS),
        "Access-Control-Allow-Headers": ", ".join(CORS_ALLOW_HEADERS),
        "Access-Control-Max-Age": str(CORS_MAX_AGE_S),
        **({} if "*" in allowed else {"Vary": "Origin"}),
    }}
