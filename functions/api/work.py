"""The work surface (`/v1/modules/scaiqueue`): scopes, queues, messages, claims, system agents.

Parses and shapes only. Answers `{"data": …}` (lists with `meta.next_cursor`); errors are
`{"error": {"code", "message", "details"}, "meta": {"request_id"}}` with the same id in
`X-Request-Id`. Every request of an authenticated tenant first takes a token from its rate limit.
"""

from __future__ import annotations

import threading
import uuid
from typing import Annotated, Any, Literal

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Query

from functions.api.common import SurfaceResolver, json_response, principal_from
from functions.api.work_schema import (
    Batch,
    Claim,
    Complete,
    CreateQueue,
    CreateRule,
    CreateScope,
    DryRun,
    ExpandPattern,
    Extend,
    Fail,
    Publish,
    QueueSchema,
    RegisterPattern,
    RegisterSchema,
    Release,
    UpdateRule,
    ValidatePayload,
)
from functions.authorizer import key_from_headers
from functions.observability import instrument
from functions.schedules import AGENTS
from postbox import agents, jsoncodec
from postbox.errors import Unauthorized
from postbox.tenancy import Principal, require
from postbox.work import browse, hitl, messages, queues, ratelimit, routing, schemas, scopes
from postbox.work.common import VIEW

logger, metrics, lambda_handler = instrument("work")

MOUNT = "/v1/modules/scaiqueue"
MAX_BODY = 1024 * 1024  # a request body over this is a 413 before anything is parsed
_request = threading.local()

# Postbox's generic codes as the work surface spells them.
_CODES = {
    "validation": "VALIDATION_ERROR",
    "forbidden": "AUTHZ_PERMISSION_DENIED",
    "unauthorized": "AUTH_TOKEN_INVALID",
    "not_found": "NOT_FOUND",
    "too_large": "PAYLOAD_TOO_LARGE",
    "invalid": "VALIDATION_ERROR",
}


_TYPE_TAGS = {"str", "int", "float", "bool", "list", "dict", "function-after", "function-before"}


def _field_errors(details: dict[str, Any]) -> list[dict[str, str]]:
    """Pydantic's errors as [{field, message}], one per field: the field dotted without the
    `body`/`query` root or the tags pydantic adds for each member of a union (`str`, `dict[…]`)."""
    out: dict[str, str] = {}
    for e in details.get("errors", ()):
        loc = [str(p) for p in e.get("loc", ())]
        if loc and loc[0] in ("body", "query", "path"):
            loc = loc[1:]
        loc = [p for p in loc if p not in _TYPE_TAGS and "[" not in p]
        message = "unknown field" if e.get("type") == "extra_forbidden" else e.get("msg", "")
        out.setdefault(".".join(loc) or "body", message)
    return [{"field": f, "message": m} for f, m in out.items()] + list(details.get("fields", ()))


def envelope(status: int, code: str, message: str, details: dict[str, Any]) -> dict[str, Any]:
    code = _CODES.get(code, code)
    error: dict[str, Any] = {"code": code, "message": message or "The request is not valid.", "details": details}
    if code == "VALIDATION_ERROR":
        error["details"] = _field_errors(details)
    if "retry_after" in details:
        error["retry_after"] = details["retry_after"]
        error["details"] = {k: v for k, v in details.items() if k != "retry_after"}
    return {"error": error, "meta": {"request_id": getattr(_request, "id", "")}}


app = SurfaceResolver(envelope)
router = Router()


def caller() -> Principal:
    """The caller, or 401 AUTH_TOKEN_MISSING (no key sent) / AUTH_TOKEN_INVALID (a key we refused)."""
    event = app.current_event
    found = principal_from(event.request_context.authorizer.get_lambda)
    if found is None:
        if key_from_headers(event.headers) is None:
            raise Unauthorized("No bearer token or API key was sent.", code="AUTH_TOKEN_MISSING")
        raise Unauthorized("The key is invalid, expired or revoked.", code="AUTH_TOKEN_INVALID")
    return found


def data(value: Any, status: int = 200):
    return json_response(status, {"data": value})


def listing(found: tuple[list, str | None]):
    items, cursor = found
    return json_response(200, {"data": items, "meta": {"next_cursor": cursor}})


Limit = Annotated[int, Query(ge=1, le=200)]
Cursor = Annotated[str | None, Query(max_length=512)]

# ---- scopes -------------------------------------------------------------------------------------


@router.post("/scopes")
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


@router.post("/scopes/<scope_id>/queues")
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


@router.post(QUEUE + "/messages")
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

# ---- routing rules ------------------------------------------------------------------------------

RULES = "/scopes/<scope_id>/routing-rules"


@router.post(RULES)
def create_rule(scope_id: str, body: Annotated[CreateRule, Body()]):
    return data(routing.create_rule(caller(), scope_id, body.fields()), 201)


@router.get(RULES)
def list_rules(scope_id: str):
    return data(routing.list_rules(caller(), scope_id))


@router.post(RULES + "/test")
def test_rules(scope_id: str, body: Annotated[DryRun, Body()]):
    return data(routing.dry_run(caller(), scope_id, body.trigger, body.message.fields()))


@router.get(RULES + "/<rule_id>")
def get_rule(scope_id: str, rule_id: str):
    return data(routing.get_rule(caller(), scope_id, rule_id))


@router.patch(RULES + "/<rule_id>")
def update_rule(scope_id: str, rule_id: str, body: Annotated[UpdateRule, Body()]):
    return data(routing.update_rule(caller(), scope_id, rule_id, body.fields()))


@router.delete(RULES + "/<rule_id>")
def delete_rule(scope_id: str, rule_id: str):
    routing.delete_rule(caller(), scope_id, rule_id)
    return data({"id": rule_id, "deleted": True})


@router.post(RULES + "/<rule_id>/enable")
def enable_rule(scope_id: str, rule_id: str):
    return data(routing.update_rule(caller(), scope_id, rule_id, {"enabled": True}))


@router.post(RULES + "/<rule_id>/disable")
def disable_rule(scope_id: str, rule_id: str):
    return data(routing.update_rule(caller(), scope_id, rule_id, {"enabled": False}))


# ---- message schemas ----------------------------------------------------------------------------

SCHEMAS = "/scopes/<scope_id>/schemas"
SCHEMA = SCHEMAS + "/<name>/<version>"


@router.post(SCHEMAS)
def register_schema(scope_id: str, body: Annotated[RegisterSchema, Body()]):
    return data(schemas.register(caller(), scope_id, body.name, str(body.version), body.schema_), 201)


@router.get(SCHEMAS)
def list_schemas(scope_id: str):
    return data(schemas.list_schemas(caller(), scope_id))


@router.get(SCHEMA)
def get_schema(scope_id: str, name: str, version: str):
    return data(schemas.get_schema(caller(), scope_id, name, version))


@router.post(SCHEMA + "/validate")
def validate_payload(scope_id: str, name: str, version: str, body: Annotated[ValidatePayload, Body()]):
    return data(schemas.validate(caller(), scope_id, name, version, body.payload))


@router.delete(SCHEMA)
def deprecate_schema(scope_id: str, name: str, version: str):
    return data(schemas.deprecate(caller(), scope_id, name, version))


@router.put(QUEUE + "/schema")
def queue_schema(scope_id: str, queue_id: str, body: Annotated[QueueSchema, Body()]):
    version = None if body.version is None else str(body.version)
    return data(schemas.bind_queue(caller(), scope_id, queue_id, body.name, version))


# ---- HITL patterns ------------------------------------------------------------------------------

PATTERNS = "/scopes/<scope_id>/hitl-patterns"


@router.post(PATTERNS)
def register_pattern(scope_id: str, body: Annotated[RegisterPattern, Body()]):
    return data(hitl.register(caller(), scope_id, body.fields()), 201)


@router.get(PATTERNS)
def list_patterns(scope_id: str):
    return data(hitl.list_patterns(caller(), scope_id))


@router.get(PATTERNS + "/<name>/<version>")
def get_pattern(scope_id: str, name: str, version: str):
    return data(hitl.get_pattern(caller(), scope_id, name, version))


@router.post(PATTERNS + "/<name>/expand")
def expand_pattern(scope_id: str, name: str, body: Annotated[ExpandPattern, Body()]):
    return data(hitl.expand_pattern(caller(), scope_id, name, str(body.version), body.parameters or {}))


# ---- system agents ------------------------------------------------------------------------------


@router.get("/system-agents")
def system_agents():
    require(caller(), VIEW)
    return data(agents.status(a.name for a in AGENTS))


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
    _request.id = "req_" + uuid.uuid4().hex[:24]
    refused, limit_headers = _limited(event)
    result = refused or _too_large(event) or app.resolve(event, context)
    result.setdefault("headers", {}).update({"X-Request-Id": _request.id, **limit_headers})
    return result
