"""Routes and request bodies of messages: publish, claim, list and read, the correlation chain,
and their ends (complete, fail, release, extend, cancel, one at a time or in batches).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Query
from pydantic import Field, ValidationError, model_validator

from functions.api.common import first_invalid
from functions.api.work.envelope import Cursor, Limit, caller, data, data_text, envelope, listing
from functions.api.work.fields import MAX_TTL_S, MAX_VISIBILITY_S, UUID_TEXT, Priority, Text, _Strict
from functions.api.work.queues import QUEUE
from postbox.errors import PostboxError, Unprocessable
from postbox.work import browse, messages
from postbox.work.messages import MAX_BATCH

router = Router()


class PatternRef(_Strict):
    """A HITL pattern a message's spec is expanded from."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")]
    version: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$")] | Annotated[int, Field(ge=0)]
    parameters: dict[str, str | int | float | bool | None] | None = None


class StreamChunk(_Strict):
    """Marks a published message as chunk `seq` of the stream `id` (`final`: the last one)."""

    id: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")]
    seq: Annotated[int, Field(ge=0, le=10_000_000)]
    final: bool = False


class Publish(_Strict):
    body: str | dict[str, Any]
    type: Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")] = "task"
    priority: Priority | None = None
    labels: dict[str, Annotated[str, Field(max_length=256)]] | None = None
    content_type: Text = "application/json"
    correlation_id: Text | None = None
    causation_id: Text | None = None
    parent_id: Text | None = None
    ttl_seconds: Annotated[int, Field(ge=1, le=MAX_TTL_S)] | None = None
    deadline: datetime | None = Field(default=None, strict=False)
    max_retries: Annotated[int, Field(ge=1, le=100)] | None = None
    visibility_timeout_s: Annotated[int, Field(ge=1, le=MAX_VISIBILITY_S)] | None = None
    idempotency_key: Text | None = None
    hitl_spec: dict[str, Any] | None = None
    hitl_pattern: PatternRef | None = None
    stream: StreamChunk | None = None
    visible_at: datetime | None = Field(default=None, strict=False)

    @model_validator(mode="after")
    def _one_spec(self) -> Publish:
        if self.hitl_spec is not None and self.hitl_pattern is not None:
            raise ValueError("give hitl_spec or hitl_pattern, not both")
        return self


def _entries_are_messages(schema: dict[str, Any]) -> None:
    """Document each entry as a publish body: the model also takes any other value, so that an entry
    that does not fit is refused in its place (by the route) instead of failing the whole batch."""
    schema["items"] = schema["items"]["anyOf"][0]


class PublishBatch(_Strict):
    """The batch extension's publish: 1-100 messages into the queue in one call, each what a publish
    body holds; `atomic` publishes all of them or none."""

    messages: Annotated[list[Publish | Any], Field(min_length=1, max_length=MAX_BATCH,
                                                   json_schema_extra=_entries_are_messages)]
    atomic: bool = False


class Claim(_Strict):
    batch_size: Annotated[int, Field(ge=1, le=100)] = 1
    visibility_timeout_s: Annotated[int, Field(ge=1, le=MAX_VISIBILITY_S)] | None = None


class LeanClaim(Claim):
    """The lean-answer extension: `attributes` names the document's fields each claimed message
    answers besides id and claim_token (absent: the full representation)."""

    attributes: Annotated[list[Annotated[str, Field(pattern=r"^[a-z_]{1,64}$")]], Field(max_length=64)] | None = None


Token = Annotated[str, Field(max_length=64)]
SubscriptionId = Annotated[str, Field(pattern=UUID_TEXT)]


class QueueClaim(LeanClaim):
    """A claim through the queue's route; `subscription_id` makes it that subscription's claim."""

    subscription_id: SubscriptionId | None = None


class Complete(_Strict):
    response: dict[str, Any] | None = None
    claim_token: Token | None = None


class Fail(_Strict):
    reason: Annotated[str, Field(max_length=2000)] = ""
    claim_token: Token | None = None


class Release(_Strict):
    claim_token: Token | None = None


class _BySubscriber(_Strict):
    """The scope's complete, fail and release: `subscription_id` ends that subscription's delivery."""

    subscription_id: SubscriptionId | None = None


class CompleteAs(Complete, _BySubscriber):
    pass


class FailAs(Fail, _BySubscriber):
    pass


class ReleaseAs(Release, _BySubscriber):
    pass


class Extend(_Strict):
    seconds: Annotated[int, Field(ge=1, le=MAX_VISIBILITY_S)]
    claim_token: Token | None = None


class BatchItem(_Strict):
    id: Annotated[str, Field(max_length=64)]
    claim_token: Token | None = None
    response: dict[str, Any] | None = None
    reason: Annotated[str, Field(max_length=2000)] | None = None


class Batch(_Strict):
    """The batch extension: complete, fail or release up to 100 claimed messages in one call."""

    items: Annotated[list[BatchItem], Field(min_length=1, max_length=100)]


@router.post(QUEUE + "/messages", responses={200: {"description": "An idempotent replay: the original message"},
                                             201: {"description": "Published"}})
def publish(scope_id: str, queue_id: str, request: Annotated[Publish, Body()]):
    # (not named `body`: the resolver would read a parameter named like a field of the JSON as that field)
    message, replayed = messages.publish(caller(), scope_id, queue_id, request.fields())
    return data(message, 200 if replayed else 201)


@router.post(QUEUE + "/messages/batch", responses={200: {"description": (
    "One answer per message, in order, in `data`: `{ok: true, status: 201, id, queue_id, state, replayed}` "
    "(status 200 and `replayed: true` for an idempotent replay), or `{ok: false, status, error: {code, message, "
    "details}}` with what a single publish of it would have answered; a refused entry changes nothing and the "
    "others are published. With `atomic: true` the call publishes every entry or none (the first refusal is "
    "the call's own error).")}})
def publish_batch(scope_id: str, queue_id: str, request: Annotated[PublishBatch, Body()]):
    answers = messages.publish_batch(caller(), scope_id, queue_id, [_entry(m) for m in request.messages],
                                     atomic=request.atomic)
    return data([_entry_answer(a) for a in answers])


def _entry(value: Any) -> dict[str, Any] | Unprocessable:
    """A batch entry's fields, or the refusal a single publish of it would have met (422 naming its fields),
    validated as the resolver validates a publish body."""
    try:
        return (value if isinstance(value, Publish) else Publish.model_validate(value, from_attributes=True)).fields()
    except ValidationError as error:
        details = {"errors": [{"loc": ["body", *e["loc"]], "msg": e["msg"], "type": e["type"]}
                              for e in error.errors()]}
        field, why = first_invalid(details)
        return Unprocessable(f"{field}: {why}", **details)


def _entry_answer(answer: dict[str, Any] | PostboxError) -> dict[str, Any]:
    """An entry published (201) or replayed (200), or refused with the status and the error body a
    single publish would have answered."""
    if isinstance(answer, PostboxError):
        return {"ok": False, "status": answer.status,
                "error": envelope(answer.status, answer.code, answer.message, answer.details)["error"]}
    return {"ok": True, "status": 200 if answer["replayed"] else 201, **answer}


@router.post(QUEUE + "/messages/claim")
def claim(scope_id: str, queue_id: str, body: Annotated[QueueClaim | None, Body()] = None):
    body = body or QueueClaim()
    return data_text(messages.claim_text(caller(), scope_id, queue_id, body.batch_size, body.visibility_timeout_s,
                                         body.subscription_id, attributes=body.attributes))


@router.get(QUEUE + "/messages")
def list_messages(scope_id: str, queue_id: str, state: Annotated[Literal[browse.STATES] | None, Query()] = None,
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
def complete(scope_id: str, msg_id: str, body: Annotated[CompleteAs | None, Body()] = None):
    return data(messages.finish(caller(), scope_id, msg_id, "complete", (body or CompleteAs()).fields()))


@router.post(MESSAGE + "/fail")
def fail(scope_id: str, msg_id: str, body: Annotated[FailAs | None, Body()] = None):
    return data(messages.finish(caller(), scope_id, msg_id, "fail", (body or FailAs()).fields()))


@router.post(MESSAGE + "/release")
def release(scope_id: str, msg_id: str, body: Annotated[ReleaseAs | None, Body()] = None):
    return data(messages.finish(caller(), scope_id, msg_id, "release", (body or ReleaseAs()).fields()))


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
