"""Message move tasks: StartMessageMoveTask moves a dead-letter queue's visible messages back to
the queues they were dead-lettered from (or all to one named queue), ListMessageMoveTasks reports
them. A task runs within its request, in one transaction, so it is COMPLETED (or FAILED) by the
time the caller lists it; MaxNumberOfMessagesPerSecond is recorded, not applied."""

from __future__ import annotations

from typing import Any

from .. import db, tenancy
from ..tenancy import Principal
from . import errors, identity
from .queues import find

_MOVE = """
WITH moved AS (
    DELETE FROM queue_messages m
    WHERE m.queue_id = %(src)s AND m.vt <= clock_timestamp() AND coalesce(%(dest)s, m.dead_from) IS NOT NULL
    RETURNING m.*
)
INSERT INTO queue_messages (queue_id, vt, enqueued_at, message, headers, size)
SELECT coalesce(%(dest)s, d.id), clock_timestamp(), x.enqueued_at, x.message, x.headers, x.size
FROM moved x LEFT JOIN queues d ON d.id = x.dead_from
WHERE coalesce(%(dest)s, d.id) IS NOT NULL
"""


def start(principal: Principal, request: dict[str, Any]) -> dict[str, Any]:
    tenancy.require(principal, "manage")
    source_arn = request.get("SourceArn")
    if source_arn is None:
        raise errors.missing_parameter("SourceArn")
    source_name = identity.name_from_arn(principal.tenant_id, source_arn, "SourceArn")
    destination_arn = request.get("DestinationArn")
    rate = request.get("MaxNumberOfMessagesPerSecond")
    if rate is not None and (not isinstance(rate, int) or isinstance(rate, bool) or not 1 <= rate <= 500):
        raise errors.invalid_parameter("MaxNumberOfMessagesPerSecond must be an integer from 1 to 500.")
    with db.transaction() as conn:
        source = find(conn, principal, source_name, lock=True)
        if not conn.execute("SELECT EXISTS (SELECT 1 FROM queues WHERE dead_letter_queue_id = %s)",
                            (source.id,)).fetchone()[0]:
            raise errors.invalid_parameter("Source queue must be configured as a Dead Letter Queue.")
        dest_id = None
        if destination_arn is not None:
            dest_id = find(conn, principal, identity.name_from_arn(
                principal.tenant_id, destination_arn, "DestinationArn")).id
        if conn.execute("SELECT EXISTS (SELECT 1 FROM sqs_move_tasks WHERE source_id = %s AND status = 'RUNNING')",
                        (source.id,)).fetchone()[0]:
            raise errors.unsupported("There is already a task running. Only one active task is allowed for a source "
                                     "queue arn at a given time.")
        to_move = conn.execute("SELECT count(*) FROM queue_messages WHERE queue_id = %s", (source.id,)).fetchone()[0]
        moved = conn.execute(_MOVE, {"src": source.id, "dest": dest_id}).rowcount
        row = conn.execute(
            "INSERT INTO sqs_move_tasks (tenant_id, source_id, destination_id, source_arn, destination_arn, status,"
            " moved, to_move, max_per_second) VALUES (%s, %s, %s, %s, %s, 'COMPLETED', %s, %s, %s)"
            " RETURNING task_handle",
            (principal.tenant_id, source.id, dest_id, source_arn, destination_arn, moved, to_move, rate),
        ).fetchone()
    return {"TaskHandle": str(row[0])}


def list_tasks(principal: Principal, request: dict[str, Any]) -> dict[str, Any]:
    tenancy.require(principal, "read")
    source_arn = request.get("SourceArn")
    if source_arn is None:
        raise errors.missing_parameter("SourceArn")
    limit = request.get("MaxResults", 1)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 10:
        raise errors.invalid_parameter("MaxResults must be an integer from 1 to 10.")
    name = identity.name_from_arn(principal.tenant_id, source_arn, "SourceArn")
    with db.transaction() as conn:
        source = find(conn, principal, name)
        rows = conn.execute(
            "SELECT task_handle, status, source_arn, destination_arn, max_per_second, moved, to_move,"
            " failure_reason, (extract(epoch FROM started_at) * 1000)::bigint FROM sqs_move_tasks"
            " WHERE source_id = %s ORDER BY started_at DESC LIMIT %s", (source.id, limit),
        ).fetchall()
    results = []
    for handle, status, src, dest, rate, moved, to_move, reason, started in rows:
        item: dict[str, Any] = {"Status": status, "SourceArn": src, "ApproximateNumberOfMessagesMoved": moved,
                                "ApproximateNumberOfMessagesToMove": to_move, "StartedTimestamp": started}
        if status == "RUNNING":
            item["TaskHandle"] = str(handle)
        if dest:
            item["DestinationArn"] = dest
        if rate:
            item["MaxNumberOfMessagesPerSecond"] = rate
        if reason:
            item["FailureReason"] = reason
        results.append(item)
    return {"Results": results}
