"""The flows surface (`/streams/v1`): query registration, state reads (and which partitions hold
ripe windows) and the cycle commit.

Errors: `{"success": false, "error": …}` (400 validation, 403 with `denied: true`, and `limit` when it
is a plan limit, 409 naming the query); the ownership gate answers 404 `{"error": "not found"}`. A
completed cycle is always 200.
"""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body

from functions.api.common import SurfaceResolver, field_of, json_response
from functions.api.flows.schema import Cycle, DueState, GetState, RegisterQuery
from functions.observability import instrument
from postbox.errors import Invalid
from postbox.flows import cycle, queries, state

logger, metrics, lambda_handler = instrument("flows", resolve_keys=True)

_KEEP = ("denied", "query_id", "name", "limit")


def envelope(status: int, code: str, message: str, details: dict[str, Any]) -> dict[str, Any]:
    if code == "ownership":
        return {"error": "not found"}
    if "errors" in details:
        parts = [f"{field_of(e['loc'])}: {e['msg']}" for e in details["errors"]]
        return {"success": False, "error": "; ".join(parts) or "invalid request body"}
    body: dict[str, Any] = {"success": False, "error": message}
    body.update({k: details[k] for k in _KEEP if k in details})
    if "limit" in details:  # a plan limit refuses as the grant does: retrying fixes nothing
        body["denied"] = True
    return body


app = SurfaceResolver(envelope, validation_status=400)
router = Router()


@router.post("/queries")
def register(body: Annotated[RegisterQuery, Body()]):
    if not body.config_hash:
        raise Invalid("config_hash is required")
    return queries.register(app.principal(), body.name, body.source_queue, body.sink_queue, body.config_hash,
                            bool(body.reset))


@router.post("/state/get")
def get_state(body: Annotated[GetState, Body()]):
    if not body.query_id or body.partition_id in (None, ""):
        raise Invalid("query_id and partition_id are required")
    return state.get(app.principal(), body.query_id, str(body.partition_id), keys=body.keys,
                     key_prefix=body.key_prefix or None, ripe_at_or_before=body.ripe_at_or_before)


@router.post("/state/due")
def due_partitions(body: Annotated[DueState, Body()]):
    if not body.query_id:
        raise Invalid("query_id is required")
    return state.due(app.principal(), body.query_id, consumer_group=body.consumer_group or None,
                     key_prefix=body.key_prefix or None, ripe_at_or_before=body.ripe_at_or_before,
                     limit=body.limit or state.MAX_DUE)


@router.post("/cycle")
def run_cycle(body: Annotated[Cycle, Body()]):
    stats: dict[str, int] = {}
    result = cycle.run(app.principal(), cycle.parse(body.model_dump()), stats)
    if result["success"]:
        metrics.add_metric(name="CyclePushes", unit="Count", value=stats.get("pushed", 0))
        metrics.add_metric(name="CycleAcks", unit="Count", value=(result["ack_result"] or {}).get("count", 0))
    return json_response(200, result)


app.include_router(router, prefix="/streams/v1")


@lambda_handler
def handler(event: dict, context: Any) -> dict:
    return app.resolve(event, context)
