"""Routes of the work surface's chunk streams: list, describe, cancel, assemble.

Parses and shapes only; chunks are recorded by the publish, streams live in `postbox.work.chunks`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Query

from functions.api.work.envelope import Cursor, Limit, caller, data, listing
from postbox.work import chunks

router = Router()
STREAM = "/scopes/<scope_id>/streams/<stream_id>"


@router.get("/scopes/<scope_id>/streams")
def list_streams(scope_id: str, state: Annotated[Literal[chunks.STATES] | None, Query()] = None,
                 limit: Limit = 50, cursor: Cursor = None):
    return listing(chunks.list_streams(caller(), scope_id, state, limit, cursor))


@router.get(STREAM)
def get_stream(scope_id: str, stream_id: str):
    return data(chunks.get_stream(caller(), scope_id, stream_id))


@router.post(STREAM + "/cancel")
def cancel_stream(scope_id: str, stream_id: str):
    return data(chunks.cancel(caller(), scope_id, stream_id))


@router.get(STREAM + "/assembled")
def assembled(scope_id: str, stream_id: str, mode: Annotated[Literal[chunks.MODES], Query()] = "concatenate"):
    return data(chunks.assembled(caller(), scope_id, stream_id, mode))
