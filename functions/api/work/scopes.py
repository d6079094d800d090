"""Routes and request bodies of the work surface's scopes: create, list, read, delete, and the
lifecycle transitions (pause, resume, archive …).
"""

from __future__ import annotations

from typing import Annotated, Literal

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body
from pydantic import Field

from functions.api.work.envelope import Cursor, Limit, caller, data, listing
from functions.api.work.fields import SLUG, QueueDefaults, Text, _Strict
from postbox.work import scopes

router = Router()


class CreateScope(_Strict):
    slug: Annotated[str, Field(pattern=SLUG)]
    display_name: Text | None = None
    description: Annotated[str, Field(max_length=2000)] | None = None
    defaults: QueueDefaults | None = None
    # Extensions: which optional events the scope's `_events` queue receives, retention of ended
    # messages, and the dead-letter depth at which the monitor raises an alert event.
    emit_events: list[Literal["published", "claimed"]] | None = None
    retention_days: Annotated[int, Field(ge=1, le=365)] | None = None
    dead_letter_alert_threshold: Annotated[int, Field(ge=1, le=10_000_000)] | None = None


@router.post("/scopes", responses={201: {"description": "Created"}})
def create_scope(body: Annotated[CreateScope, Body()]):
    return data(scopes.create_scope(caller(), body.fields()), 201)


@router.get("/scopes")
def list_scopes(limit: Limit = 50, cursor: Cursor = None):
    return listing(scopes.list_scopes(caller(), limit, cursor))


@router.get("/scopes/<scope_id>")
def get_scope(scope_id: str):
    return data(scopes.get_scope(caller(), scope_id))


@router.delete("/scopes/<scope_id>")
def delete_scope(scope_id: str):
    scopes.delete_scope(caller(), scope_id)
    return data({"id": scope_id, "deleted": True})


def _scope_transition(action: str) -> None:
    @router.post(f"/scopes/<scope_id>/{action}")
    def transition(scope_id: str):
        return data(scopes.transition(caller(), scope_id, action))


for _action in scopes.TRANSITIONS:
    _scope_transition(_action)
