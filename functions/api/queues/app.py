"""The queues surface (`/api/v1/queues`): pgmq-style queues. Parses, calls the domain, shapes."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Query

from functions.api.common import HistoryWindow, SurfaceResolver, json_response
from functions.api.queues.schema import (
    CreateQueue,
    MessageIds,
    PopMessages,
    Purge,
    QueueSettings,
    ReadMessages,
    SendBatch,
    SendMessage,
    SetVisibility,
)
from functions.observability import instrument
from postbox.inputs import INT64_MAX
from postbox.queues import service

logger, metrics, lambda_handler = instrument("queues", resolve_keys=True)

_BRANCHABLE = {403, 413}


def envelope(status: int, code: str, message: str, details: dict[str, Any]) -> dict[str, Any]:
    """`{"detail": …}`: a sentence, a {code, message} to branch on, or the fields that failed."""
    if "errors" in details:
        return {"detail": details["errors"]}
    if status in _BRANCHABLE:
        return {"detail": {"code": code, "message": message}}
    return {"detail": message}


app = SurfaceResolver(envelope)
queues = Router()
messages = Router()


@queues.get("")
def list_queues() -> dict:
    return service.list_queues(app.principal())


@queues.post("", responses={201: {"description": "Created"}})
def create_queue(body: Annotated[CreateQueue, Body()]):
    settings = body.changes()
    settings.pop("name", None)
    return json_response(201, service.create_queue(app.principal(), body.name, settings))


@queues.get("/<name>")
def get_queue(name: str) -> dict:
    return service.get_queue(app.principal(), name)


@queues.patch("/<name>")
def patch_queue(name: str, body: Annotated[QueueSettings, Body()]) -> dict:
    return service.patch_queue(app.principal(), name, body.changes())


@queues.delete("/<name>")
def delete_queue(name: str) -> dict:
    return service.delete_queue(app.principal(), name)


@queues.get("/<name>/metrics")
def queue_metrics(name: str) -> dict:
    return service.queue_metrics(app.principal(), name)


@queues.get("/<name>/history")
def queue_history(name: str, window: HistoryWindow = "hour") -> dict:
    return service.queue_history(app.principal(), name, window)


@messages.post("/<name>/send", responses={201: {"description": "Sent"}})
def send(name: str, body: Annotated[SendMessage, Body()]):
    ids = service.send_messages(app.principal(), name, [body.message], delay=body.delay, headers=body.headers)
    metrics.add_metric(name="MessagesSent", unit="Count", value=1)
    return json_response(201, {"msg_id": ids[0]})


@messages.post("/<name>/send_batch", responses={201: {"description": "Sent"}})
def send_batch(name: str, body: Annotated[SendBatch, Body()]):
    ids = service.send_messages(app.principal(), name, body.messages, delay=body.delay, headers=body.headers)
    metrics.add_metric(name="MessagesSent", unit="Count", value=len(ids))
    return json_response(201, {"msg_ids": ids})


@messages.post("/<name>/read")
def read(name: str, body: Annotated[ReadMessages | None, Body()] = None) -> dict:
    body = body or ReadMessages()
    found = service.read_messages(app.principal(), name, body.qty, body.vt, body.wait_seconds)
    return {"messages": found}


@messages.post("/<name>/pop")
def pop(name: str, body: Annotated[PopMessages | None, Body()] = None) -> dict:
    body = body or PopMessages()
    return {"messages": service.pop_messages(app.principal(), name, body.qty)}


@messages.post("/<name>/archive")
def archive(name: str, body: Annotated[MessageIds, Body()]) -> dict:
    return {"archived": service.archive_messages(app.principal(), name, body.msg_ids)}


@messages.post("/<name>/delete")
def delete(name: str, body: Annotated[MessageIds, Body()]) -> dict:
    return {"deleted": service.delete_messages(app.principal(), name, body.msg_ids)}


@messages.delete("/<name>/messages/<msg_id>")
def delete_one(name: str, msg_id: int) -> dict:
    return {"deleted": service.delete_message(app.principal(), name, msg_id)}


@messages.post("/<name>/set_vt")
def set_vt(name: str, body: Annotated[SetVisibility, Body()]) -> dict:
    return {"message": service.set_visibility(app.principal(), name, body.msg_id, body.vt)}


@messages.post("/<name>/purge")
def purge(name: str, body: Annotated[Purge | None, Body()] = None) -> dict:
    body = body or Purge()
    return {"purged": service.purge_queue(app.principal(), name, body.include_archived)}


@messages.get("/<name>/messages")
def browse(
    name: str,
    state: Annotated[Literal["waiting", "archived", "dead"], Query()] = "waiting",
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    before: Annotated[int | None, Query(ge=0, le=INT64_MAX)] = None,
) -> dict:
    return service.browse_messages(app.principal(), name, state, limit, before)


app.include_router(queues, prefix="/api/v1/queues")
app.include_router(messages, prefix="/api/v1/queues")
# The SQS credentials' routes come in with the first request to them: few containers serve one.
app.include_lazily("functions.api.queues", "/api/v1/sqs/credentials", [(r"(/|$)", "sqs_credentials")])


@lambda_handler
def handler(event: dict, context: Any) -> dict:
    return app.resolve(event, context)
