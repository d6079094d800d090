"""The work surface (`/v1/modules/scaiqueue`): scopes, queues, messages, claims, system agents;
the registries (rules, schemas, HITL patterns) and subscriptions are routed by their own modules.

Parses and shapes only. Answers `{"data": …}` (lists with `meta.next_cursor`); errors are
`{"error": {"code", "message", "details"}, "meta": {"request_id"}}` with the same id in
`X-Request-Id` and in every log line of the request (see `functions.observability`). Every request
of an authenticated tenant first takes a token from its rate limit.

Each module's routes come in with the first request that reaches them (`ROUTERS`, see
`functions.api.lazy_routers`): a container imports the modules it serves, not all of them.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler.api_gateway import Router

from functions.api.common import principal_from, retry_headers
from functions.api.work.envelope import MOUNT, REQUEST_ID_PREFIX, app, caller, data, envelope
from functions.observability import instrument
from postbox import jsoncodec
from postbox.errors import PostboxError
from postbox.tenancy import require
from postbox.work import ratelimit
from postbox.work.common import VIEW

logger, metrics, lambda_handler = instrument("work", request_id_prefix=REQUEST_ID_PREFIX, resolve_keys=True)
MAX_BODY = 1024 * 1024  # a request body over this is a 413 before anything is parsed
router = Router()


@router.get("/system-agents")
def system_agents():
    # Imported here: an operator's view, which the agent table would cost every cold start.
    from functions.schedules import AGENTS
    from postbox import agents

    require(caller(), VIEW)
    return data(agents.status(a.name for a in AGENTS))


# The module of functions.api.work whose router serves a path below the mount: the first rule that
# matches (tests/platform/test_cold_imports.py holds every route of every module to them).
ROUTERS = [
    (r"/scopes/[^/]+/queues/[^/]+/messages(/|$)", "messages"),
    (r"/scopes/[^/]+/queues/[^/]+/schema/?$", "schemas"),
    (r"/scopes/[^/]+/queues(/|$)", "queues"),
    (r"/scopes/[^/]+/messages(/|$)", "messages"),
    (r"/scopes/[^/]+/routing-rules(/|$)", "rules"),
    (r"/scopes/[^/]+/schemas(/|$)", "schemas"),
    (r"/scopes/[^/]+/hitl-patterns(/|$)", "hitl"),
    (r"/scopes/[^/]+/subscriptions(/|$)|/subscriptions/", "subscriptions"),
    (r"/scopes/[^/]+/streams(/|$)", "chunks"),
    (r"/scopes/[^/]+/acl(/|$)", "acl"),
    (r"/scopes/[^/]+/audit(/|$)|/tenants/[^/]+/audit/?$", "audit"),
    (r"/tenants/[^/]+(/api-keys(/|$)|/?$)|/whoami/?$", "keys"),
    (r"/tenants/[^/]+/data-(erasure|export)(/|$)", "gdpr"),
    (r"/scopes(/|$)", "scopes"),
]
app.include_router(router, prefix=MOUNT)
app.include_lazily("functions.api.work", MOUNT, ROUTERS)


def _limited(event: dict) -> tuple[dict | None, dict[str, str]]:
    """(a 429 answer or None, the rate-limit headers) for this request's tenant."""
    context = ((event.get("requestContext") or {}).get("authorizer") or {}).get("lambda")
    principal = principal_from(context)
    if principal is None:
        return None, {}
    try:  # the plan's limit is read from the database once a while: it may be unavailable then
        decision = ratelimit.check(principal.tenant_id)
    except PostboxError as e:
        return _answer(e.status, e.code, e.message, e.details, retry_headers(e)), {}
    headers = decision.headers()
    if decision.allowed:
        return None, headers
    return _answer(429, "SCAIQUEUE_RATE_LIMITED", "Tenant rate limit reached; retry later.",
                   {"retry_after": decision.retry_after_s}), headers


def _too_large(event: dict) -> dict | None:
    body = event.get("body") or ""
    size = len(body) * 3 // 4 if event.get("isBase64Encoded") else len(body.encode())
    if size <= MAX_BODY:
        return None
    return _answer(413, "PAYLOAD_TOO_LARGE", f"A request body is at most {MAX_BODY} bytes.", {})


def _answer(status: int, code: str, message: str, details: dict, headers: dict[str, str] | None = None) -> dict:
    """An answer in the work envelope given before the resolver (which maps the routes' own errors)."""
    return {"statusCode": status, "headers": {"Content-Type": "application/json", **(headers or {})},
            "body": jsoncodec.dumps(envelope(status, code, message, details)).decode()}


@lambda_handler
def handler(event: dict, context: Any) -> dict:
    refused, limit_headers = _limited(event)
    result = refused or _too_large(event) or app.resolve(event, context)
    result.setdefault("headers", {}).update(limit_headers)  # X-Request-Id: added by `lambda_handler`
    return result
