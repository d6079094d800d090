"""The partitioned queue surface (Queen-style `/api/v1/push`, `/pop`, `/ack`, `/transaction`, `/resources`, …).

Parses, calls `postbox.partitioned.service`, shapes. Errors are `{"error": "<message>"}` with the
status code; a malformed body or query is a 400 whose message names the field.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body, Query

from functions.api.common import SurfaceResolver, first_invalid, json_response
from functions.api.partitioned_schema import AckBatch, AckBody, Configure, Extend, Push, Replay, Transaction
from functions.observability import instrument
from postbox.errors import Invalid
from postbox.inputs import INT64_MAX
from postbox.partitioned import service
from postbox.partitioned.service import PopRequest

logger, metrics, lambda_handler = instrument("partitioned")

API = "/api/v1"


def envelope(status: int, code: str, message: str, details: dict[str, Any]) -> dict[str, Any]:
    """`{"error": message}`; a validation error names the first field that failed."""
    if details.get("errors"):
        field, why = first_invalid(details)
        return {"error": f"{field}: {why}", "field": field}
    return {"error": message}


app = SurfaceResolver(envelope, validation_status=400)


@app.post(API + "/configure")
def configure(body: Annotated[Configure, Body()]):
    options = body.options.changes() if body.options else {}
    return service.configure(app.principal(), body.queue, options)


@app.post(API + "/push", responses={201: {"description": "Each item's outcome, in order"}})
def push(body: Annotated[Push, Body()]):
    results = service.push(app.principal(), body.to_items())
    metrics.add_metric(name="MessagesPushed", unit="Count", value=sum(r["status"] == "queued" for r in results))
    return json_response(201, results)


def _start(mode: str | None, since: str | None) -> str | datetime:
    """A new group's starting point: `all`, `new` (also `new-only` or from `now`) or a time."""
    if since and since.lower() != "now":
        try:
            moment = datetime.fromisoformat(since)
        except ValueError:
            raise Invalid("subscriptionFrom: must be an ISO-8601 timestamp or 'now'") from None
        if moment.tzinfo is None:
            raise Invalid("subscriptionFrom: the timestamp needs a time zone (e.g. Z)")
        return moment
    if since or mode in ("new", "new-only"):
        return "new"
    return "all"


def _pop(queue: str, partition: str | None, batch: int, wait: bool, timeout: int | None, group: str | None,
         auto_ack: bool, mode: str | None, since: str | None):
    request = PopRequest(queue, partition, batch, wait, timeout, group or None, auto_ack, _start(mode, since))
    found = service.pop(app.principal(), request)
    if not found:
        return Response(status_code=204, content_type="application/json", body="")
    metrics.add_metric(name="MessagesPopped", unit="Count", value=len(found))
    return {"messages": found}


Batch = Annotated[int, Query(ge=1, le=10_000)]
Timeout = Annotated[int | None, Query(ge=0, le=3_600_000)]
Group = Annotated[str | None, Query(alias="consumerGroup", max_length=256)]
AutoAck = Annotated[bool, Query(alias="autoAck")]
Mode = Annotated[Literal["all", "new", "new-only"] | None, Query(alias="subscriptionMode")]
Since = Annotated[str | None, Query(alias="subscriptionFrom", max_length=64)]


_POPPED = {200: {"description": "Messages"}, 204: {"description": "No message", "content": {}}}


@app.get(API + "/pop/queue/<queue>", responses=_POPPED)
def pop_queue(queue: str, batch: Batch = 1, wait: Annotated[bool, Query()] = False, timeout: Timeout = None,
              consumer_group: Group = None, auto_ack: AutoAck = False, subscription_mode: Mode = None,
              subscription_from: Since = None):
    return _pop(queue, None, batch, wait, timeout, consumer_group, auto_ack, subscription_mode, subscription_from)


@app.get(API + "/pop/queue/<queue>/partition/<partition>", responses=_POPPED)
def pop_partition(queue: str, partition: str, batch: Batch = 1, wait: Annotated[bool, Query()] = False,
                  timeout: Timeout = None, consumer_group: Group = None, auto_ack: AutoAck = False,
                  subscription_mode: Mode = None, subscription_from: Since = None):
    return _pop(queue, partition, batch, wait, timeout, consumer_group, auto_ack, subscription_mode,
                subscription_from)


@app.post(API + "/ack")
def ack(body: Annotated[AckBody, Body()]):
    return service.ack(app.principal(), [body.ack()])[0]


@app.post(API + "/ack/batch")
def ack_batch(body: Annotated[AckBatch, Body()]):
    results = service.ack(app.principal(), body.acks())
    return {"processed": len(results), "results": results}


@app.post(API + "/lease/<leaseId>/extend")
def extend(leaseId: str, body: Annotated[Extend | None, Body()] = None):  # the route names it leaseId
    return service.extend(app.principal(), leaseId, body.seconds if body else None)


@app.post(API + "/transaction")
def transaction(body: Annotated[Transaction, Body()]):
    return {"success": True, "results": service.transaction(app.principal(), body.to_operations())}


@app.get(API + "/dlq")
def dead_letters(queue: Annotated[str | None, Query(max_length=128)] = None,
                 partition: Annotated[str | None, Query(max_length=256)] = None, consumer_group: Group = None,
                 limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                 offset: Annotated[int, Query(ge=0, le=INT64_MAX)] = 0):
    return service.dead_letters(app.principal(), queue, partition, consumer_group, limit, offset)


@app.post(API + "/dlq/replay")
def replay(body: Annotated[Replay, Body()]):
    return service.replay(app.principal(), [int(i) for i in body.ids])


@app.get(API + "/resources/queues/<queue>")
def queue_resource(queue: str):
    return service.queue_resource(app.principal(), queue)


@lambda_handler
def handler(event: dict, context: Any) -> dict:
    return app.resolve(event, context)
