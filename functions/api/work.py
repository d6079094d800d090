"""The work surface (`/v1/modules/scaiqueue`): scopes, queues, messages, claims, system agents;
the registries (rules, schemas, HITL patterns) and subscriptions are routed by their own modules.

Parses and shapes only. Answers `{"data": …}` (lists with `meta.next_cursor`); errors are
`{"error": {"code", "message", "details"}, "meta": {"request_id"}}` with the same id in
`X-Request-Id`. Every request of an authenticated tenant first takes a token from its rate limit.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Query

from functions.api import work_acl, work_audit, work_gdpr, work_registry, work_streams, work_subscriptions
from functions.api.common import principal_from
from functions.api.work_envelope import MOUNT, Cursor, Limit, app, caller, data, envelope, listing, request_state
from functions.api.work_schema import (
    Batch,
    Claim,
    Complete,
    CreateQueue,
    CreateScope,
    Extend,
    Fail,
    Publish,
    Release,
)
from functions.observability import instrument
from functions.schedules import AGENTS
from postbox import agents, jsoncodec
from postbox.tenancy import require
from postbox.work import browse, messages, queues, ratelimit, scopes
from postbox.work.common import VIEW

logger, metrics, lambda_handler = instrument("work")
MAX_BODY = 1024 * 1024  # a request body over this is a 413 before anything is parsed
router = Router()

# ---- scopes -------------------------------------------------------------------------------------


@router.post("/scopes", responses={201: {"description": "Created"}})
def create_scope(body: Annotated[CreateScope, Body()]):
    return data(scopes.create_scope(caller(), body.fields()), 201)


@router.get("/scopes")
def list_scopes(limit: Limit = 50, cursor: Cursor = None):
    return listing(scopes.list_scopes(caller(), limit, cursor))


@router.get("/scopes/<scope_id>")
def get_scope(scope_id: str):
    return data(scopes.get_scope(caller(), scope_id))


@router.delete("/scopes/<scope_id>")
def delete_scope(scope_id: str):
    scopes.delete_scope(caller(), scope_id)
    return data({"id": scope_id, "deleted": True})


def _scope_transition(action: str) -> None:
    @router.post(f"/scopes/<scope_id>/{action}")
    def transition(scope_id: str):
        return data(scopes.transition(caller(), scope_id, action))


for _action in scopes.TRANSITIONS:
    _scope_transition(_action)

# ---- queues -------------------------------------------------------------------------------------

QUEUE = "/scopes/<scope_id>/queues/<queue_id>"


@router.post("/scopes/<scope_id>/queues", responses={201: {"description": "Created"}})
def create_queue(scope_id: str, body: Annotated[CreateQueue, Body()]):
    return data(queues.create_queue(caller(), scope_id, body.fields()), 201)


@router.get("/scopes/<scope_id>/queues")
def list_queues(scope_id: str, limit: Limit = 50, cursor: Cursor = None):
    return listing(queues.list_queues(caller(), scope_id, limit, cursor))


@router.get(QUEUE)
def get_queue(scope_id: str, queue_id: str):
    return data(queues.get_queue(caller(), scope_id, queue_id))


@router.delete(QUEUE)
def delete_queue(scope_id: str, queue_id: str):
    queues.delete_queue(caller(), scope_id, queue_id)
    return data({"id": queue_id, "deleted": True})


@router.get(QUEUE + "/stats")
def queue_stats(scope_id: str, queue_id: str):
    return data(queues.stats(caller(), scope_id, queue_id))


@router.post(QUEUE + "/pause")
def pause_queue(scope_id: str, queue_id: str):
    return data(queues.set_paused(caller(), scope_id, queue_id, True))


@router.post(QUEUE + "/resume")
def resume_queue(scope_id: str, queue_id: str):
    return data(queues.set_paused(caller(), scope_id, queue_id, False))


# ---- messages -----------------------------------------------------------------------------------


@router.post(QUEUE + "/messages", responses={200: {"description": "An idempotent replay: the original message"},
                                             201: {"description": "Published"}})
def publish(scope_id: str, queue_id: str, request: Annotated[Publish, Body()]):
    # (not named `body`: the resolver would read a parameter named like a field of the JSON as that field)
    message, replayed = messages.publish(caller(), scope_id, queue_id, request.fields())
    return data(message, 200 if replayed else 201)


@router.post(QUEUE + "/messages/claim")
def claim(scope_id: str, queue_id: str, body: Annotated[Claim | None, Body()] = None):
    body = body or Claim()
    return data(messages.claim(caller(), scope_id, queue_id, body.batch_size, body.visibility_timeout_s))


@router.get(QUEUE + "/messages")
def list_messages(scope_id: str, queue_id: str, state: Annotated[Literal[browse.STATES], Query()] = "pending",
                  limit: Limit = 50, cursor: Cursor = None):
    return listing(browse.list_messages(caller(), scope_id, queue_id, state, limit, cursor))


@router.get(QUEUE + "/messages/<msg_id>")
def get_message(scope_id: str, queue_id: str, msg_id: str):
    return data(browse.get_message(caller(), scope_id, queue_id, msg_id))


@router.get("/scopes/<scope_id>/messages")
def correlation_chain(scope_id: str, correlation_id: Annotated[str, Query(min_length=1, max_length=256)]):
    return data(browse.correlation_chain(caller(), scope_id, correlation_id))


MESSAGE = "/scopes/<scope_id>/messages/<msg_id>"


@router.post(MESSAGE + "/complete")
def complete(scope_id: str, msg_id: str, body: Annotated[Complete | None, Body()] = None):
    return data(messages.finish(caller(), scope_id, msg_id, "complete", (body or Complete()).fields()))


@router.post(MESSAGE + "/fail")
def fail(scope_id: str, msg_id: str, body: Annotated[Fail | None, Body()] = None):
    return data(messages.finish(caller(), scope_id, msg_id, "fail", (body or Fail()).fields()))


@router.post(MESSAGE + "/release")
def release(scope_id: str, msg_id: str, body: Annotated[Release | None, Body()] = None):
    return data(messages.finish(caller(), scope_id, msg_id, "release", (body or Release()).fields()))


@router.post(MESSAGE + "/extend")
def extend(scope_id: str, msg_id: str, body: Annotated[Extend, Body()]):
    return data(messages.finish(caller(), scope_id, msg_id, "extend", body.fields()))


@router.post(MESSAGE + "/cancel")
def cancel(scope_id: str, msg_id: str):
    return data(messages.finish(caller(), scope_id, msg_id, "cancel", {}))


def _batch_route(action: str) -> None:
    @router.post(f"/scopes/<scope_id>/messages/{action}-batch")
    def batch(scope_id: str, body: Annotated[Batch, Body()]):
        return data(messages.finish_batch(caller(), scope_id, action, [i.fields() for i in body.items]))


for _action in ("complete", "fail", "release"):
    _batch_route(_action)

# ---- system agents ------------------------------------------------------------------------------


@router.get("/system-agents")
def system_agents():
    require(caller(), VIEW)
    return data(agents.status(a.name for a in AGENTS))


app.include_router(router, prefix=MOUNT)
app.include_router(work_registry.router, prefix=MOUNT)
app.include_router(work_subscriptions.router, prefix=MOUNT)
app.include_router(work_streams.router, prefix=MOUNT)
app.include_router(work_acl.router, prefix=MOUNT)
app.include_router(work_gdpr.router, prefix=MOUNT)
app.include_router(work_audit.router, prefix=MOUNT)


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
    request_state.id = "req_" + uuid.uuid4().hex[:24]
    refused, limit_headers = _limited(event)
    result = refused or _too_large(event) or app.resolve(event, context)
    result.setdefault("headers", {}).update({"X-Request-Id": request_state.id, **limit_headers})
    return result
