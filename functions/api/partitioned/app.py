"""The partitioned queue surface (Queen-style `/api/v1/push`, `/pop`, `/ack`, `/transaction`, `/resources`,
`/fetch`, `/consumer-groups`, `/traces`, and `/health`), the routes Queen's own client calls.

Parses, calls `postbox.partitioned.service`, shapes. Errors are `{"error": "<message>"}` with the
status code; a malformed body or query is a 400 whose message names the field.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, NamedTuple

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body, Query

from functions.api.common import HistoryWindow, SurfaceResolver, first_invalid, json_response
from functions.api.partitioned.schema import (
    AckBatch,
    AckBody,
    Configure,
    Extend,
    Fetch,
    Push,
    Replay,
    Trace,
    Transaction,
)
from functions.observability import instrument
from postbox.errors import Invalid, NotFound
from postbox.inputs import INT64_MAX
from postbox.partitioned import service
from postbox.partitioned.service import PopRequest

logger, metrics, lambda_handler = instrument("partitioned", resolve_keys=True)

API = "/api/v1"
UNKNOWN_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]  # the catch-all's rows in the route table


def envelope(status: int, code: str, message: str, details: dict[str, Any]) -> dict[str, Any]:
    """`{"error": message}`; a validation error names the first field that failed."""
    if details.get("errors"):
        field, why = first_invalid(details)
        return {"error": f"{field}: {why}", "field": field}
    return {"error": message}


class PartitionedResolver(SurfaceResolver):
    """The surface's resolver; its `<path>` parameter is greedy, as API Gateway's `{path+}` is, for
    the catch-all that answers an unknown `/api/v1` route in Queen's error shape."""

    greedy, route_regex = "path", "^{}$"


app = PartitionedResolver(envelope, validation_status=400)


@app.post(API + "/configure")
def configure(body: Annotated[Configure, Body()]):
    options = body.options.changes() if body.options else {}
    answer = service.configure(app.principal(), body.queue, options)
    return service.echo_options(answer, body.options.given() if body.options else {})


@app.post(API + "/push", responses={201: {"description": "Each item's outcome, in order"}})
def push(body: Annotated[Push, Body()]):
    results = service.push(app.principal(), body.to_items())
    metrics.add_metric(name="MessagesPushed", unit="Count", value=sum(r["status"] == "queued" for r in results))
    return json_response(201, results)


def _start(mode: str | None, since: str | None) -> str | datetime:
    """A new group's starting point: `new` (`new-only`, or from `now`), a time, else `all` (as in
    Queen, any other mode, `from_beginning` among them, reads from the start)."""
    if since and since.lower() != "now":
        try:
            moment = datetime.fromisoformat(since)
        except ValueError:
            raise Invalid("subscriptionFrom: must be an ISO-8601 timestamp or 'now'") from None
        if moment.tzinfo is None:
            raise Invalid("subscriptionFrom: the timestamp needs a time zone (e.g. Z)")
        return moment
    if since or (mode or "").lower() in ("new", "new-only"):
        return "new"
    return "all"


# What a pop that leaves its size to the server (Queen's `autopilot=true` without `batch`) gets.
AUTOPILOT_BATCH = 100


class PopQuery(NamedTuple):
    """The query of both pop routes (Queen's names); unknown parameters are ignored, as Queen does."""

    batch: int | None
    wait: bool
    timeout: int | None
    consumer_group: str | None
    auto_ack: bool
    mode: str | None
    since: str | None
    partitions: int | None
    autopilot: bool

    def request(self, queue: str, partition: str | None) -> PopRequest:
        batch = self.batch or (AUTOPILOT_BATCH if self.autopilot else 1)
        return PopRequest(queue, partition, batch, self.wait, self.timeout, self.consumer_group or None,
                          self.auto_ack, _start(self.mode, self.since), self.partitions or 1)


def _pop(query: PopQuery, queue: str, partition: str | None):
    request = query.request(queue, partition)
    found = service.pop(app.principal(), request)
    if not found:
        return Response(status_code=204, content_type="application/json", body="")
    metrics.add_metric(name="MessagesPopped", unit="Count", value=len(found))
    if query.autopilot:  # what the server chose, as Queen echoes it
        return {"messages": found, "autopilot": {"partitions": request.partitions, "batch": request.batch}}
    return {"messages": found}


Batch = Annotated[int | None, Query(ge=1, le=10_000)]
Wait = Annotated[bool, Query()]
Timeout = Annotated[int | None, Query(ge=0, le=3_600_000)]
Group = Annotated[str | None, Query(alias="consumerGroup", max_length=256)]
AutoAck = Annotated[bool, Query(alias="autoAck")]
Mode = Annotated[str | None, Query(alias="subscriptionMode", max_length=64)]
Since = Annotated[str | None, Query(alias="subscriptionFrom", max_length=64)]
Partitions = Annotated[int | None, Query(ge=1, le=100)]
Autopilot = Annotated[bool, Query()]


_POPPED = {200: {"description": "Messages"}, 204: {"description": "No message", "content": {}}}


@app.get(API + "/pop/queue/<queue>", responses=_POPPED)
def pop_queue(queue: str, batch: Batch = None, wait: Wait = False, timeout: Timeout = None,
              consumer_group: Group = None, auto_ack: AutoAck = False, subscription_mode: Mode = None,
              subscription_from: Since = None, partitions: Partitions = None, autopilot: Autopilot = False):
    return _pop(PopQuery(batch, wait, timeout, consumer_group, auto_ack, subscription_mode, subscription_from,
                         partitions, autopilot), queue, None)


@app.get(API + "/pop/queue/<queue>/partition/<partition>", responses=_POPPED)
def pop_partition(queue: str, partition: str, batch: Batch = None, wait: Wait = False, timeout: Timeout = None,
                  consumer_group: Group = None, auto_ack: AutoAck = False, subscription_mode: Mode = None,
                  subscription_from: Since = None, autopilot: Autopilot = False):
    return _pop(PopQuery(batch, wait, timeout, consumer_group, auto_ack, subscription_mode, subscription_from,
                         None, autopilot), queue, partition)


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
    results = service.transaction(app.principal(), body.to_operations(), body.requiredLeases)
    return {"success": True, "results": results}


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


@app.get(API + "/resources/queues/<queue>/history")
def queue_history(queue: str, window: HistoryWindow = "hour"):
    return service.queue_history(app.principal(), queue, window)


@app.delete(API + "/resources/queues/<queue>")
def delete_queue(queue: str):
    return service.delete_queue(app.principal(), queue)


@app.get(API + "/resources/queues")
def list_queues(limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                offset: Annotated[int, Query(ge=0, le=INT64_MAX)] = 0):
    return service.list_queues(app.principal(), limit, offset)


@app.get(API + "/resources/overview")
def overview():
    return service.overview(app.principal())


@app.delete(API + "/consumer-groups/<group>")
def delete_consumer_group(group: str, delete_metadata: Annotated[bool, Query(alias="deleteMetadata")] = True):
    return service.delete_group(app.principal(), group, delete_metadata)


@app.post(API + "/fetch")
def fetch(body: Annotated[Fetch, Body()]):
    return {"entries": service.fetch(app.principal(), body.to_entries(), body.maxBytes)}


@app.post(API + "/traces")
def traces(body: Annotated[Trace, Body()]):
    """Accepted (the key and the body are checked) and not kept: Postbox has no trace store."""
    app.principal()
    return {"success": True, "stored": False}


@app.get("/health")
def health():
    return service.health(app.principal())


@app.route(API + "/<path>", method=UNKNOWN_METHODS)
def unknown_route(path: str):
    """Any other `/api/v1` route: 404 in Queen's error shape (Queen's client reads `error`)."""
    raise NotFound(f"no such route: {app.current_event.http_method} {API}/{path}")


@lambda_handler
def handler(event: dict, context: Any) -> dict:
    return app.resolve(event, context)
