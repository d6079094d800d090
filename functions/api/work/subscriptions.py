"""Routes and request bodies of the work surface's subscriptions: CRUD, pause and resume, pull,
list and finish deliveries, and check-processed.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Query
from pydantic import Field

from functions.api.work.envelope import Cursor, Limit, caller, data, listing
from functions.api.work.fields import UUID_TEXT, _Strict
from functions.api.work.messages import Claim, Complete, Fail, Release
from functions.api.work.rules import Condition
from postbox.work import (
    assign,
    subscriptions,
)

router = Router()

InFlight = Annotated[int, Field(ge=1, le=10_000)]
PushUrl = Annotated[str, Field(max_length=2048, pattern=r"^https?://[^\s/?#]+[^\s]*$")]


class CreateSubscription(_Strict):
    subscriber_type: Literal["user", "agent", "service"]
    subscriber_id: Annotated[str, Field(min_length=1, max_length=256)]
    queue_id: Annotated[str, Field(pattern=UUID_TEXT)]
    filter: Condition | None = None
    delivery_mode: Literal["pull", "push"] = "pull"
    push_url: PushUrl | None = None
    auto_claim: bool = False
    max_in_flight: InFlight = 100

    def fields(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_unset=True, by_alias=True)


class UpdateSubscription(_Strict):
    filter: Condition | None = None
    delivery_mode: Literal["pull", "push"] | None = None
    push_url: PushUrl | None = None
    auto_claim: bool | None = None
    max_in_flight: InFlight | None = None

    def fields(self) -> dict[str, Any]:
        out = self.model_dump(mode="json", exclude_unset=True, by_alias=True)
        return {k: v for k, v in out.items() if v is not None or k == "filter"}


class CheckProcessed(_Strict):
    message_ids: Annotated[list[Annotated[str, Field(max_length=64)]], Field(min_length=1, max_length=1000)]


SUBS = "/scopes/<scope_id>/subscriptions"
SUB = SUBS + "/<sub_id>"


@router.post(SUBS)
def create_subscription(scope_id: str, body: Annotated[CreateSubscription, Body()]):
    return data(subscriptions.create(caller(), scope_id, body.fields()), 201)


@router.get(SUBS)
def list_subscriptions(scope_id: str):
    return data(subscriptions.list_subscriptions(caller(), scope_id))


@router.get(SUB)
def get_subscription(scope_id: str, sub_id: str):
    return data(subscriptions.get(caller(), scope_id, sub_id))


@router.patch(SUB)
def update_subscription(scope_id: str, sub_id: str, body: Annotated[UpdateSubscription, Body()]):
    return data(subscriptions.update(caller(), scope_id, sub_id, body.fields()))


@router.delete(SUB)
def delete_subscription(scope_id: str, sub_id: str):
    subscriptions.delete(caller(), scope_id, sub_id)
    return data({"id": sub_id, "deleted": True})


@router.post(SUB + "/pause")
def pause_subscription(scope_id: str, sub_id: str):
    return data(subscriptions.update(caller(), scope_id, sub_id, {"state": "paused"}))


@router.post(SUB + "/resume")
def resume_subscription(scope_id: str, sub_id: str):
    return data(subscriptions.update(caller(), scope_id, sub_id, {"state": "active"}))


@router.post(SUB + "/claim")
def claim_deliveries(scope_id: str, sub_id: str, body: Annotated[Claim | None, Body()] = None):
    body = body or Claim()
    return data(subscriptions.claim(caller(), scope_id, sub_id, body.batch_size, body.visibility_timeout_s))


@router.get(SUB + "/deliveries")
def list_deliveries(scope_id: str, sub_id: str, state: Annotated[Literal[assign.STATES], Query()] = "claimed",
                    limit: Limit = 50, cursor: Cursor = None):
    return listing(assign.list_deliveries(caller(), scope_id, sub_id, state, limit, cursor))


@router.post(SUB + "/messages/<msg_id>/complete")
def complete_delivery(scope_id: str, sub_id: str, msg_id: str, body: Annotated[Complete | None, Body()] = None):
    return data(subscriptions.finish(caller(), scope_id, sub_id, msg_id, "complete", (body or Complete()).fields()))


@router.post(SUB + "/messages/<msg_id>/fail")
def fail_delivery(scope_id: str, sub_id: str, msg_id: str, body: Annotated[Fail | None, Body()] = None):
    return data(subscriptions.finish(caller(), scope_id, sub_id, msg_id, "fail", (body or Fail()).fields()))


@router.post(SUB + "/messages/<msg_id>/release")
def release_delivery(scope_id: str, sub_id: str, msg_id: str, body: Annotated[Release | None, Body()] = None):
    return data(subscriptions.finish(caller(), scope_id, sub_id, msg_id, "release", (body or Release()).fields()))


@router.post("/subscriptions/<sub_id>/check-processed")
def check_processed(sub_id: str, body: Annotated[CheckProcessed, Body()]):
    return data(subscriptions.processed(caller(), sub_id, body.message_ids))
