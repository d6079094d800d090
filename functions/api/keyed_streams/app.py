"""The streams surface (`/v1/streams`): keyed streams with subscriptions. Parses, calls the domain,
shapes; errors are `{"error": {"code", "message"}}`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query
from pydantic import ValidationError

from functions.api.common import HistoryWindow, SurfaceResolver, first_invalid
from functions.api.keyed_streams.schema import (
    Consume,
    CreateProject,
    CreateStream,
    CreateSubscription,
    Nack,
    OutgoingMessage,
    PatchStream,
    Publish,
    PublishBatch,
    Receipts,
)
from functions.observability import instrument
from postbox import projects as project_service
from postbox.errors import Invalid
from postbox.inputs import INT64_MAX
from postbox.keyed_streams import service
from postbox.keyed_streams.durations import parse_instant
from postbox.keyed_streams.publishing import Outgoing, Refused

logger, metrics, lambda_handler = instrument("keyed-streams", resolve_keys=True)

Project = Annotated[str | None, Query(max_length=64)]
Offset = Annotated[int, Path(ge=0, le=INT64_MAX)]
Before = Annotated[int | None, Query(ge=0, le=INT64_MAX)]


def envelope(status: int, code: str, message: str, details: dict[str, Any]) -> dict[str, Any]:
    """`{"error": {"code", "message"}}`; a validation failure names the first field that failed."""
    if "errors" in details:
        field, why = first_invalid(details)
        return {"error": {"code": f"invalid_{field.split('.')[0]}", "message": f"{field}: {why}"}}
    return {"error": {"code": code, "message": message}}


app = SurfaceResolver(envelope, validation_status=400)
projects = Router()
streams = Router()
messages = Router()
subscriptions = Router()


@projects.get("")
def list_projects() -> dict:
    return project_service.listing(app.principal())


@projects.post("")
def create_project(body: Annotated[CreateProject, Body()]) -> dict:
    return project_service.create(app.principal(), body.name)


@streams.get("")
def list_streams(project: Project = None) -> dict:
    return service.list_streams(app.principal(), project)


@streams.post("")
def create_stream(body: Annotated[CreateStream, Body()], project: Project = None) -> dict:
    return service.create_stream(app.principal(), body.name, body.project or project, body.retention,
                                 body.max_backlog)


@streams.get("/<stream>")
def get_stream(stream: str, project: Project = None) -> dict:
    return service.get_stream(app.principal(), stream, project)


@streams.get("/<stream>/history")
def stream_history(stream: str, window: HistoryWindow = "hour", project: Project = None) -> dict:
    return service.stream_history(app.principal(), stream, project, window)


@streams.patch("/<stream>")
def patch_stream(stream: str, body: Annotated[PatchStream, Body()], project: Project = None) -> dict:
    return service.patch_stream(app.principal(), stream, project, body.changes())


@streams.delete("/<stream>")
def delete_stream(stream: str, project: Project = None) -> dict:
    return service.delete_stream(app.principal(), stream, project)


def _outgoing(body: OutgoingMessage) -> Outgoing:
    return Outgoing(
        payload=body.payload,
        key=body.key,
        headers=body.headers,
        idempotency_key=body.idempotency_key,
        deliver_at=parse_instant(body.deliver_at, field="deliver_at") if body.deliver_at else None,
        expires_at=parse_instant(body.expires_at, field="expires_at") if body.expires_at else None,
    )


def _item(value: Any) -> Outgoing | Refused:
    """A batch item as a message, or its refusal with the code and message a single publish of it
    would have answered (the field first named)."""
    try:
        return _outgoing(value if isinstance(value, OutgoingMessage) else OutgoingMessage.model_validate(value))
    except ValidationError as error:
        field, why = first_invalid({"errors": error.errors()})
        if field == "body":
            return Refused("invalid_message", "message: must be a JSON object with a payload, as a publish body is")
        return Refused(f"invalid_{field.split('.')[0]}", f"{field}: {why}")
    except Invalid as error:
        return Refused(error.code, error.message, error.status)


@messages.post("/<stream>/messages")
def publish(stream: str, body: Annotated[Publish, Body()], project: Project = None) -> dict:
    [(message, replayed)] = service.publish(app.principal(), stream, body.project or project, [_outgoing(body)])
    if not replayed:
        metrics.add_metric(name="MessagesPublished", unit="Count", value=1)
    return {"message": message, "replayed": replayed}


@messages.post("/<stream>/messages/batch")
def publish_batch(stream: str, body: Annotated[PublishBatch, Body()], project: Project = None) -> dict:
    answers = service.publish_each(app.principal(), stream, body.project or project,
                                   [_item(m) for m in body.messages])
    results: list[dict[str, Any]] = []
    published = 0
    for answer in answers:
        if isinstance(answer, Refused):
            results.append({"ok": False, "error": {"code": answer.code, "message": answer.message}})
        else:
            results.append({"ok": True, **answer[0], "replayed": answer[1]})
            published += not answer[1]
    if published:
        metrics.add_metric(name="MessagesPublished", unit="Count", value=published)
    return {"results": results}


@messages.get("/<stream>/messages")
def browse(
    stream: str,
    project: Project = None,
    key: Annotated[str | None, Query(max_length=256)] = None,
    status: Annotated[Literal["scheduled", "available", "cancelled", "expired"] | None, Query()] = None,
    q: Annotated[str | None, Query(max_length=256)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    before_offset: Before = None,
) -> dict:
    return service.browse(app.principal(), stream, project, key=key, status=status, q=q or None, limit=limit,
                          before_offset=before_offset)


@messages.get("/<stream>/messages/<offset>")
def get_message(stream: str, offset: Offset, project: Project = None) -> dict:
    return service.get_message(app.principal(), stream, project, offset)


@messages.post("/<stream>/messages/<offset>/cancel")
def cancel(stream: str, offset: Offset, project: Project = None) -> dict:
    return {"message": service.cancel(app.principal(), stream, project, offset)}


@subscriptions.get("/<stream>/subscriptions")
def list_subscriptions(stream: str, project: Project = None) -> dict:
    return service.list_subscriptions(app.principal(), stream, project)


@subscriptions.post("/<stream>/subscriptions")
def create_subscription(stream: str, body: Annotated[CreateSubscription, Body()], project: Project = None) -> dict:
    return service.create_subscription(app.principal(), stream, project, body.name,
                                       max_deliveries=body.max_deliveries, lease_ms=body.lease_ms, start=body.start)


@subscriptions.get("/<stream>/subscriptions/<subscription>")
def get_subscription(stream: str, subscription: str, project: Project = None) -> dict:
    return service.get_subscription(app.principal(), stream, project, subscription)


@subscriptions.delete("/<stream>/subscriptions/<subscription>")
def delete_subscription(stream: str, subscription: str, project: Project = None) -> dict:
    return service.delete_subscription(app.principal(), stream, project, subscription)


@subscriptions.get("/<stream>/subscriptions/<subscription>/dead")
def dead_letters(
    stream: str,
    subscription: str,
    project: Project = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    before_offset: Before = None,
) -> dict:
    return service.dead_letters(app.principal(), stream, project, subscription, limit=limit,
                                before_offset=before_offset)


@subscriptions.post("/<stream>/subscriptions/<subscription>/consume")
def consume(stream: str, subscription: str, body: Annotated[Consume | None, Body()] = None,
            project: Project = None) -> dict:
    body = body or Consume()
    found = service.consume(app.principal(), stream, project, subscription, max_messages=body.max_messages,
                            lease_ms=body.lease_ms, wait_ms=body.wait_ms)
    if found["messages"]:
        metrics.add_metric(name="MessagesDelivered", unit="Count", value=len(found["messages"]))
    return found


@subscriptions.post("/<stream>/subscriptions/<subscription>/ack")
def ack(stream: str, subscription: str, body: Annotated[Receipts, Body()], project: Project = None) -> dict:
    return service.ack(app.principal(), stream, project, subscription, body.receipts)


@subscriptions.post("/<stream>/subscriptions/<subscription>/nack")
def nack(stream: str, subscription: str, body: Annotated[Nack, Body()], project: Project = None) -> dict:
    return service.nack(app.principal(), stream, project, subscription, body.receipts, body.delay_ms)


app.include_router(projects, prefix="/v1/projects")
app.include_router(streams, prefix="/v1/streams")
app.include_router(messages, prefix="/v1/streams")
app.include_router(subscriptions, prefix="/v1/streams")


@lambda_handler
def handler(event: dict, context: Any) -> dict:
    return app.resolve(event, context)

