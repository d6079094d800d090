"""The work surface (`/v1/modules/scaiqueue`): scopes, queues, messages, claims, system agents;
the registries (rules, schemas, HITL patterns) and subscriptions are routed by their own modules.

Parses and shapes only. Answers `{"data": …}` (lists with `meta.next_cursor`); errors are
`{"error": {"code", "message", "details"}, "meta": {"request_id"}}` with the same id in
`X-Request-Id` and in every log line of the request (see `functions.observability`). Every request
of an authenticated tenant first takes a token from its rate limit.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler.api_gateway import Router

from functions.api.common import principal_from
from functions.api.work import (
    acl,
    audit,
    chunks,
    gdpr,
    hitl,
    keys,
    messages,
    queues,
    rules,
    schemas,
    scopes,
    subscriptions,
)
from functions.api.work.envelope import MOUNT, REQUEST_ID_PREFIX, app, caller, data, envelope
from functions.observability import instrument
from functions.schedules import AGENTS
from postbox import agents, jsoncodec
from postbox.tenancy import require
from postbox.work import ratelimit
from postbox.work.common import VIEW

logger, metrics, lambda_handler = instrument("work", request_id_prefix=REQUEST_ID_PREFIX, resolve_keys=True)
MAX_BODY = 1024 * 1024  # a request body over this is a 413 before anything is parsed
router = Router()


@router.get("/system-agents")
def system_agents():
    require(caller(), VIEW)
    return data(agents.status(a.name for a in AGENTS))


app.include_router(scopes.router, prefix=MOUNT)
app.include_router(queues.router, prefix=MOUNT)
app.include_router(messages.router, prefix=MOUNT)
app.include_router(rules.router, prefix=MOUNT)
app.include_router(schemas.router, prefix=MOUNT)
app.include_router(hitl.router, prefix=MOUNT)
app.include_router(subscriptions.router, prefix=MOUNT)
app.include_router(chunks.router, prefix=MOUNT)
app.include_router(acl.router, prefix=MOUNT)
app.include_router(keys.router, prefix=MOUNT)
app.include_router(gdpr.router, prefix=MOUNT)
app.include_router(audit.router, prefix=MOUNT)
app.include_router(router, prefix=MOUNT)


def _limited(event: dict) -> tuple[dict | None, dict[str, str]]:
    """(a 429 answer or None, the rate-limit headers) for this request's tenant."""
    context = ((event.get("requestContext") or {}).get("authorizer") or {}).get("lambda")
    principal = principal_from(context)
    if principal is None:
        return None, {}
    decision = ratelimit.check(principal.tenant_id)
    headers = decision.headers()
    if decision.allowed:
        return None, headers
    body = envelope(429, "SCAIQUEUE_RATE_LIMITED", "Tenant rate limit reached; retry later.",
                    {"retry_after": decision.retry_after_s})
    return {"statusCode": 429, "headers": {"Content-Type": "application/json"}, "body": _dumps(body)}, headers


def _too_large(event: dict) -> dict | None:
    body = event.get("body") or ""
    size = len(body) * 3 // 4 if event.get("isBase64Encoded") else len(body.encode())
    if size <= MAX_BODY:
        return None
    answer = envelope(413, "PAYLOAD_TOO_LARGE", f"A request body is at most {MAX_BODY} bytes.", {})
    return {"statusCode": 413, "headers": {"Content-Type": "application/json"}, "body": _dumps(answer)}


def _dumps(value: Any) -> str:
    return jsoncodec.dumps(value).decode()


@lambda_handler
def handler(event: dict, context: Any) -> dict:
    refused, limit_headers = _limited(event)
    result = refused or _too_large(event) or app.resolve(event, context)
    result.setdefault("headers", {}).update(limit_headers)  # X-Request-Id: added by `lambda_handler`
    return result
