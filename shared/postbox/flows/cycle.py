"""The cycle: state ops, sink pushes and the source ack in ONE transaction, or nothing.

The lease is the exactly-once guard: an ack whose lease is absent, another worker's or expired
raises, and the state writes and sink pushes roll back with it. An idle flush (`ack: null`) has no
lease to show, so with `quiet: true` it commits only while the partition is quiet for the consumer
group (its cursor row locked, nothing left to consume, no live lease), and its guarded deletes only
if the rows still hold what was read: a flush and a fold of one partition cannot interleave, whoever
runs them. A completed call answers `success: true` or `success: false` (with the error and its
`code`, nothing committed); only a failure of the call itself (the database unreachable) escapes as
an exception (500).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import psycopg

from .. import db
from ..errors import Invalid, NotFound, PostboxError
from ..tenancy import Principal
from . import queries, sinks, state


class AckRequest(NamedTuple):
    lease_id: str
    status: str | None = "completed"
    count: int | None = None  # (it shadows tuple.count, which nothing calls on an ack)
    transaction_id: str | None = None


class CycleRequest(NamedTuple):
    query_id: str
    partition_id: str
    consumer_group: str | None = None
    state_ops: list[Any] | None = None
    push_items: list[dict[str, Any]] | None = None
    ack: AckRequest | None = None
    release_lease: bool = True
    quiet: bool = False


def parse(body: dict[str, Any]) -> CycleRequest:
    """A cycle request from its wire body (the route's and the in-process client's one reader);
    400 without `query_id` or `partition_id`."""
    query_id, partition_id = body.get("query_id"), body.get("partition_id")
    if not query_id or partition_id in (None, ""):
        raise Invalid("query_id and partition_id are required")
    ack = body.get("ack")
    release = body.get("release_lease")
    return CycleRequest(
        query_id=query_id, partition_id=str(partition_id), consumer_group=body.get("consumer_group") or None,
        state_ops=body.get("state_ops"), push_items=body.get("push_items"),
        ack=None if ack is None else AckRequest(lease_id=ack.get("leaseId") or "", status=ack.get("status"),
                                                count=ack.get("count"), transaction_id=ack.get("transactionId")),
        release_lease=True if release is None else release, quiet=bool(body.get("quiet")),
    )


def sink_items(raw: list[dict[str, Any]]) -> list[sinks.Item]:
    """Push items as the partitioned queues take them: `data` accepted for `payload`, `partition`
    defaults to Default, an empty `queue` is skipped; ids stay None for the push to stamp a UUIDv7
    message id and reuse it as the transaction id."""
    items = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise Invalid(f"push_items[{i}]: must be an object")
        queue = item.get("queue")
        if not queue:
            continue
        if not isinstance(queue, str):
            raise Invalid(f"push_items[{i}].queue: must be a string")
        payload = item["payload"] if "payload" in item else item.get("data")
        tid, mid = item.get("transactionId"), item.get("messageId")
        for field, value in (("transactionId", tid), ("messageId", mid)):
            if value is not None and not isinstance(value, str):
                raise Invalid(f"push_items[{i}].{field}: must be a string")
        partition = item.get("partition") or sinks.DEFAULT_PARTITION
        if not isinstance(partition, str):
            raise Invalid(f"push_items[{i}].partition: must be a string")
        items.append(sinks.Item(queue=queue, payload=payload, partition=partition, transaction_id=tid or None,
                                message_id=mid or None))
    return items


def _push_results(pushed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One result per (queue, partition) group, in first-appearance order: `queued` with the first
    offset appended, or `duplicate` (every item repeated a stored transactionId) with the offset of
    the first message repeated."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for r in pushed:
        g = groups.setdefault((r["queue"], r["partition"]), {
            "queue": r["queue"], "partition": r["partition"], "status": "duplicate", "baseOffset": None})
        if r["status"] == "queued" and g["status"] != "queued":
            g.update(status="queued", baseOffset=r["offset"])
        elif g["baseOffset"] is None:
            g["baseOffset"] = r["offset"]
    return list(groups.values())


def run(principal: Principal, request: CycleRequest, stats: dict[str, int] | None = None) -> dict[str, Any]:
    """Commit one cycle. Raises only for missing ids (400) and the ownership gate (404, checked
    first in the transaction); everything else answers in the body. `stats` receives the number
    of messages pushed."""
    tenant = queries.require(principal, "write")
    if not request.query_id or not request.partition_id:
        raise Invalid("query_id and partition_id are required")
    group = request.consumer_group or sinks.QUEUE_MODE
    answer: dict[str, Any] = {
        "success": False, "query_id": request.query_id, "partition_id": str(request.partition_id),
        "queueName": None, "state_ops_applied": 0, "push_results": [], "ack_result": None,
    }

    def cycle(conn: psycopg.Connection) -> tuple[dict[str, Any], int]:
        found = state.refs(conn, tenant, request.partition_id, request.query_id)  # 404 before anything runs
        if request.quiet and request.ack is not None:
            raise Invalid("quiet: only on an idle-flush cycle (ack: null)")
        ops = state.check_ops(request.state_ops or [])
        items = sink_items(request.push_items or [])
        return _commit(conn, tenant, found, group, request, ops, items)

    try:
        body, pushed = db.transact(cycle)  # run again from the start if the database breaks it off
    except NotFound as missing:
        if missing.code == "ownership":
            raise
        answer["error"], answer["code"] = missing.message, missing.code
        return answer
    except (PostboxError, psycopg.DataError, psycopg.IntegrityError, psycopg.ProgrammingError) as failed:
        answer["error"] = getattr(failed, "message", None) or str(failed).strip()
        answer["code"] = failed.code if isinstance(failed, PostboxError) else "invalid"
        return answer
    if stats is not None:
        stats["pushed"] = pushed
    return {**answer, **body, "success": True}


def _commit(conn: psycopg.Connection, tenant: str, found: state.Refs, group: str, request: CycleRequest,
            ops: list[state.StateOp], items: list[sinks.Item]) -> tuple[dict[str, Any], int]:
    query, queue_name, partition = found.query, found.queue_name, found.partition
    if query is None:
        raise NotFound("query not found")
    if queue_name is None:
        raise NotFound("partition not found")
    if request.quiet:
        sinks.lock_quiet(conn, partition, group)
    applied = state.apply(conn, query.id, partition, ops)
    pushed = sinks.push(conn, tenant, items)
    ack_result = None
    if request.ack is not None:
        a = request.ack
        ack_result = sinks.ack(conn, tenant, str(request.partition_id), group, a.lease_id, a.status,
                               request.release_lease, a.count)
    body = {"queueName": queue_name, "state_ops_applied": applied, "push_results": _push_results(pushed),
            "ack_result": ack_result}
    return body, sum(r["status"] == "queued" for r in pushed)
