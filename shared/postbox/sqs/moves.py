"""Message move tasks as SQS's three actions. StartMessageMoveTask counts a dead-letter queue's
visible messages, moves a first batch of them (back to the queues they were dead-lettered from, or
all to DestinationArn) and answers the task's handle; the move agent (`mover`) moves the rest at
MaxNumberOfMessagesPerSecond. ListMessageMoveTasks reports tasks, CancelMessageMoveTask stops one.
The rules and the moving are SQL functions (sqs_moves.sql); here the parameters are checked and
the domain's refusals answered as SQS answers them."""

from __future__ import annotations

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


def _answered(run: Callable[[], T], not_found: Callable[[], errors.SqsError]) -> T:
    """The move functions' refusals as SQS's errors."""
    try:
        with db.domain_errors():
            return run()
    except NotFound:
        raise not_found() from None
    except Invalid as e:
        raise errors.invalid_parameter(e.message) from None
    except Conflict as e:
        raise errors.unsupported(e.message) from None


def _source(principal: Principal, request: dict[str, Any]) -> tuple[str, str]:
    source_arn = request.get("SourceArn")
    if source_arn is None:
        raise errors.missing_parameter("SourceArn")
    return source_arn, identity.name_from_arn(principal.tenant_id, source_arn, "SourceArn")


def start(principal: Principal, request: dict[str, Any]) -> dict[str, Any]:
    tenancy.require(principal, "manage")
    source_arn, source = _source(principal, request)
    destination_arn = request.get("DestinationArn")
    destination = None
    if destination_arn is not None:
        destination = identity.name_from_arn(principal.tenant_id, destination_arn, "DestinationArn")
    rate = integer_parameter(request.get("MaxNumberOfMessagesPerSecond"), "MaxNumberOfMessagesPerSecond", 1,
                             MAX_RATE)
    args = (principal.tenant_id, tenancy.project_id(principal), source, source_arn, destination, destination_arn,
            rate, min(rate or MAX_RATE, BATCH))

    def run() -> str:
        with db.connection() as conn:
            return conn.execute("SELECT sqs_move_start(%s, %s, %s, %s, %s, %s, %s, %s)", args).fetchone()[0]

    return {"TaskHandle": str(_answered(run, errors.no_queue))}


def list_tasks(principal: Principal, request: dict[str, Any]) -> dict[str, Any]:
    tenancy.require(principal, "read")
    _, source = _source(principal, request)
    limit = integer_parameter(request.get("MaxResults"), "MaxResults", 1, 10) or 1
    args = (principal.tenant_id, tenancy.project_id(principal), source, limit)

    def run() -> list[dict[str, Any]]:
        with db.connection() as conn:
            return conn.execute("SELECT sqs_move_list(%s, %s, %s, %s)", args).fetchone()[0]

    return {"Results": _answered(run, errors.no_queue)}


def cancel(principal: Principal, request: dict[str, Any]) -> dict[str, Any]:
    tenancy.require(principal, "manage")
    handle = request.get("TaskHandle")
    if handle is None:
        raise errors.missing_parameter("TaskHandle")
    if not isinstance(handle, str):
        raise errors.invalid_parameter("Value for parameter TaskHandle is invalid. Reason: it must be a string.")
    try:
        task = uuid.UUID(handle)
    except ValueError:
        raise _no_task() from None
    args = (principal.tenant_id, tenancy.project_id(principal), task)

    def run() -> int:
        with db.connection() as conn:
            return conn.execute("SELECT sqs_move_cancel(%s, %s, %s)", args).fetchone()[0]

    return {"ApproximateNumberOfMessagesMoved": _answered(run, _no_task)}


def _no_task() -> errors.SqsError:
    return errors.resource_not_found("Task does not exist, or it is not running.")
