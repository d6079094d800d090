"""Routes and request bodies of a scope's access control: grants, per-queue entries and trusted
scopes. Strict: an id or CIDR that does not parse is a VALIDATION_ERROR naming the field.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body
from pydantic import Field, field_validator, model_validator

from functions.api.work.envelope import caller, data
from functions.api.work.fields import ActorId, ActorType, _Strict, not_reserved
from postbox.work import acl

router = Router()
ACL = "/scopes/<scope_id>/acl"
CREATED = {201: {"description": "Created"}}


Role = Literal["viewer", "publisher", "consumer", "manager"]


Operation = Literal["scaiqueue:view", "scaiqueue:publish", "scaiqueue:consume", "scaiqueue:manage"]


Id = Annotated[str, Field(min_length=1, max_length=64)]


Cidr = Annotated[str, Field(min_length=1, max_length=64)]


MessageType = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")]


def _uuid(value: str) -> str:
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise ValueError("not an id") from None


class Conditions(_Strict):
    """When an entry holds: from `not_before` (inclusive) until `not_after` (exclusive); both optional,
    each an ISO 8601 time with its offset."""

    not_before: datetime | None = None
    not_after: datetime | None = None

    @field_validator("not_before", "not_after", mode="before")
    @classmethod
    def _iso(cls, value: object) -> object:
        if isinstance(value, str):
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
            if parsed.tzinfo is None:
                raise ValueError("a time needs its UTC offset")
            return parsed
        return value

    @model_validator(mode="after")
    def _ordered(self) -> Conditions:
        if self.not_before and self.not_after and self.not_after <= self.not_before:
            raise ValueError("not_after must be later than not_before")
        return self


class CreateGrant(_Strict):
    actor_type: ActorType
    actor_id: ActorId
    role: Role
    conditions: Conditions | None = None

    @field_validator("actor_type")
    @classmethod
    def _an_actor(cls, value: str) -> str:
        return not_reserved(value)


class CreateQueueEntry(CreateGrant):
    queue_id: Id
    effect: Literal["allow", "deny"] = "allow"


class CreateTrust(_Strict):
    target_scope_id: Id
    direction: Literal["outbound", "inbound", "both"] = "outbound"
    allowed_types: Annotated[list[MessageType], Field(max_length=100)] | None = None
    allowed_queues: Annotated[list[Id], Field(max_length=100)] | None = None
    identity_mode: Literal["source", "scope"] = "source"

    @field_validator("target_scope_id")
    @classmethod
    def _target(cls, value: str) -> str:
        return _uuid(value)

    @field_validator("allowed_queues")
    @classmethod
    def _queues(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else [_uuid(v) for v in value]


@router.get(ACL)
def get_acl(scope_id: str):
    return data(acl.get_acl(caller(), scope_id))


@router.post(ACL + "/grants", responses=CREATED)
def add_grant(scope_id: str, body: Annotated[CreateGrant, Body()]):
    return data(acl.add_grant(caller(), scope_id, body.fields()), 201)


@router.delete(ACL + "/grants/<grant_id>")
def delete_grant(scope_id: str, grant_id: str):
    acl.delete_entry(caller(), scope_id, "grant", grant_id)
    return data({"id": grant_id, "deleted": True})


@router.post(ACL + "/queue-acl", responses=CREATED)
def add_queue_entry(scope_id: str, body: Annotated[CreateQueueEntry, Body()]):
    return data(acl.add_queue_entry(caller(), scope_id, body.fields()), 201)


@router.delete(ACL + "/queue-acl/<entry_id>")
def delete_queue_entry(scope_id: str, entry_id: str):
    acl.delete_entry(caller(), scope_id, "queue_acl", entry_id)
    return data({"id": entry_id, "deleted": True})


@router.post(ACL + "/trusted-scopes", responses=CREATED)
def add_trust(scope_id: str, body: Annotated[CreateTrust, Body()]):
    return data(acl.add_trust(caller(), scope_id, body.fields()), 201)


@router.delete(ACL + "/trusted-scopes/<trust_id>")
def delete_trust(scope_id: str, trust_id: str):
    acl.delete_entry(caller(), scope_id, "trust", trust_id)
    return data({"id": trust_id, "deleted": True})
