"""Request bodies of the work surface's ACL and work API key routes.

Strict like every model of the surface: an unknown field, a wrong type, an id or CIDR that does not
parse is a VALIDATION_ERROR naming the field.
"""

from __future__ import annotations

import ipaddress
import uuid
from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from functions.api.work_schema import ActorId, ActorType, _Strict, not_reserved

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


class MintKey(_Strict):
    subject_id: ActorId
    subject_type: ActorType = "service"

    @field_validator("subject_type")
    @classmethod
    def _a_subject(cls, value: str) -> str:
        """A work key speaks for its own subject: never as Postbox (`system`, `redacted`) nor as a
        tenant key (`api_key`, whose id it could borrow)."""
        return not_reserved(value, ("system", "redacted", "api_key"))
    key_type: Literal["service", "agent", "user"] = "service"
    label: Annotated[str, Field(max_length=256)] | None = None
    allowed_scopes: Annotated[list[Id], Field(min_length=1, max_length=100)] | None = None
    allowed_operations: Annotated[list[Operation], Field(min_length=1, max_length=4)]
    ip_allowlist: Annotated[list[Cidr], Field(min_length=1, max_length=50)] | None = None
    expires_in_days: Annotated[int, Field(ge=1, le=3650)] | None = None
    grace_period_seconds: Annotated[int, Field(ge=0, le=30 * 86400)] = 300

    @field_validator("allowed_scopes")
    @classmethod
    def _scopes(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else [_uuid(v) for v in value]

    @field_validator("ip_allowlist")
    @classmethod
    def _cidrs(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        try:
            return [str(ipaddress.ip_network(v, strict=False)) for v in value]
        except ValueError as e:
            raise ValueError(f"not a CIDR: {e}") from None


class RevokeKey(_Strict):
    reason: Annotated[str, Field(max_length=1000)] | None = None
