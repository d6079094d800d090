"""Message move tasks as SQS's three actions. StartMessageMoveTask counts a dead-letter queue's
visible messages, moves a first batch of them (back to the queues they were dead-lettered from, or
all to DestinationArn) and answers the task's handle; the move agent (`mover`) moves the rest at
MaxNumberOfMessagesPerSecond. ListMessageMoveTasks reports tasks, CancelMessageMoveTask stops one. A
task's handle is SQS's: base64 of a JSON object naming the task's id and its source queue's ARN.
The rules and the moving are SQL functions (sqs_moves.sql); here the parameters are checked and
the domain's refusals answered as SQS answers them."""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from .. import db, tenancy
from ..errors import Conflict, Invalid, NotFound
from ..tenancy import Principal
from . import errors, identity
from .messages import integer_parameter

MAX_RATE = 500  # SQS's limit of MaxNumberOfMessagesPerSecond, and the rate of a task started without one
BATCH = 100  # the most messages one batch (one transaction) moves
T = TypeVar("T")


def task_handle(task_id: uuid.UUID | str, source_arn: str) -> str:
    """A task's handle as SQS writes one: base64 of the JSON {"taskId", "sourceArn"}."""
    doc = json.dumps({"taskId": str(task_id), "sourceArn": source_arn}, separators=(",", ":"))
    return base64.b64encode(doc.encode()).decode()


def read_handle(handle: Any) -> tuple[str, str]:
    """(taskId, sourceArn) of a task handle, or SQS's answer to one that is not a handle."""
    if handle is None:
        raise errors.missing_parameter("TaskHandle")
    try:
        doc = json.loads(base64.b64decode(handle + "=" * (-len(handle) % 4), validate=True))
    except (TypeError, ValueError, binascii.Error):
        doc = None
    if not isinstance(doc, dict) or not isinstance(doc.get("taskId"), str) or \
            not isinstance(doc.get("sourceArn"), str):
        raise errors.invalid_parameter("Value for parameter TaskHandle is invalid.")
    return doc["taskId"], doc["sourceArn"]


def _not_found(parameter: str) -> errors.SqsError:
    return errors.resource_not_found(f"The resource that you specified for the {parameter} parameter doesn't exist.")


def _answered(run: Callable[[], T]) -> T:
    """The move functions' refusals as SQS's errors: an unknown source (or destination, or task) is
    ResourceNotFoundException, a second active task InvalidParameterValue, as SQS answers them."""
    try:
        with db.domain_errors():
            return run()
    except NotFound as e:
        if e.code == "no_destination":
            raise _not_found("DestinationArn") from None
        if e.code == "no_move_task":
            raise _no_task() from None
        raise _not_found("SourceArn") from None
    except (Invalid, Conflict) as e:
        raise errors.invalid_parameter(e.message) from None


def _queue(principal: Principal, arn: str, parameter: str) -> str:
    """The queue an ARN names; another account's ARN names no queue of the caller's."""
    try:
        return identity.name_from_arn(principal.tenant_id, arn, parameter)
    except errors.SqsError as e:
        if e.kind == "QueueDoesNotExist":
            raise _not_found(parameter) from None
        raise


def _source(principal: Principal, request: dict[str, Any]) -> tuple[str, str]:
    source_arn = request.get("SourceArn")
    if source_arn is None:
        raise errors.missing_parameter("SourceArn")
    return source_arn, _queue(principal, source_arn, "SourceArn")


def start(principal: Principal, request: dict[str, Any]) -> dict[str, Any]:
    tenancy.require(principal, "manage")
    source_arn, source = _source(principal, request)
    destination_arn = request.get("DestinationArn")
    destination = None
    if destination_arn is not None:
        destination = _queue(principal, destination_arn, "DestinationArn")
    rate = integer_parameter(request.get("MaxNumberOfMessagesPerSecond"), "MaxNumberOfMessagesPerSecond", 1,
                             MAX_RATE)
    args = (principal.tenant_id, tenancy.project_id(principal), source, source_arn, destination, destination_arn,
            rate, min(rate or MAX_RATE, BATCH))

    def run() -> uuid.UUID:
        with db.connection() as conn:
            return conn.execute("SELECT sqs_move_start(%s, %s, %s, %s, %s, %s, %s, %s)", args).fetchone()[0]

    return {"TaskHandle": task_handle(_answered(run), source_arn)}


def list_tasks(principal: Principal, request: dict[str, Any]) -> dict[str, Any]:
    """The source's most recent tasks (MaxResults, 1 by default, at most 10), newest first; a running
    one with its TaskHandle."""
    tenancy.require(principal, "read")
    _, source = _source(principal, request)
    limit = integer_parameter(request.get("MaxResults"), "MaxResults", 1, 10) or 1
    args = (principal.tenant_id, tenancy.project_id(principal), source, limit)

    def run() -> list[dict[str, Any]]:
        with db.connection() as conn:
            return conn.execute("SELECT sqs_move_list(%s, %s, %s, %s)", args).fetchone()[0]

    results = _answered(run)
    for entry in results:
        if "TaskHandle" in entry:
            entry["TaskHandle"] = task_handle(entry["TaskHandle"], entry["SourceArn"])
    return {"Results": results}


def cancel(principal: Principal, request: dict[str, Any]) -> dict[str, Any]:
    """A running task, named by its handle (its id and source queue), stops; how many it moved."""
    tenancy.require(principal, "manage")
    task_id, source_arn = read_handle(request.get("TaskHandle"))
    source = _queue(principal, source_arn, "SourceArn")
    try:
        task = uuid.UUID(task_id)
    except ValueError:
        raise _no_task() from None
    args = (principal.tenant_id, tenancy.project_id(principal), source, task)

    def run() -> int:
        with db.connection() as conn:
            return conn.execute("SELECT sqs_move_cancel(%s, %s, %s, %s)", args).fetchone()[0]

    return {"ApproximateNumberOfMessagesMoved": _answered(run)}


def _no_task() -> errors.SqsError:
    return errors.resource_not_found("Task does not exist.")
