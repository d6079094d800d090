"""Routes and request bodies of a scope's queues: create, list, read, delete, stats, pause and
resume.
"""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body
from pydantic import Field

from functions.api.common import HistoryWindow
from functions.api.work.envelope import Cursor, Limit, caller, data, listing
from functions.api.work.fields import SLUG, QueueDefaults, Text
from postbox.work import queues

router = Router()


class CreateQueue(QueueDefaults):
    slug: Annotated[str, Field(pattern=SLUG)]
    display_name: Text | None = None
    description: Annotated[str, Field(max_length=2000)] | None = None


QUEUE = "/scopes/<scope_id>/queues/<queue_id>"


@router.post("/scopes/<scope_id>/queues", responses={201: {"description": "Created"}})
def create_queue(scope_id: str, body: Annotated[CreateQueue, Body()]):
    return data(queues.create_queue(caller(), scope_id, body.fields()), 201)


@router.get("/scopes/<scope_id>/queues")
def list_queues(scope_id: str, limit: Limit = 50, cursor: Cursor = None):
    return listing(queues.list_queues(caller(), scope_id, limit, cursor))


@router.get(QUEUE)
def get_queue(scope_id: str, queue_id: str):
    return data(queues.get_queue(caller(), scope_id, queue_id))


@router.delete(QUEUE)
def delete_queue(scope_id: str, queue_id: str):
    queues.delete_queue(caller(), scope_id, queue_id)
    return data({"id": queue_id, "deleted": True})


@router.get(QUEUE + "/stats")
def queue_stats(scope_id: str, queue_id: str):
    return data(queues.stats(caller(), scope_id, queue_id))


@router.get(QUEUE + "/history")
def queue_history(scope_id: str, queue_id: str, window: HistoryWindow = "hour"):
    return data(queues.queue_history(caller(), scope_id, queue_id, window))


@router.post(QUEUE + "/pause")
def pause_queue(scope_id: str, queue_id: str):
    return data(queues.set_paused(caller(), scope_id, queue_id, True))


@router.post(QUEUE + "/resume")
def resume_queue(scope_id: str, queue_id: str):
    return data(queues.set_paused(caller(), scope_id, queue_id, False))
