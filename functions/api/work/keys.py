"""Routes and request bodies of the tenant's work API keys (mint, list, read, rotate, revoke),
`whoami`, which tells a key what it is, and the tenant itself (`/tenants/{tenant_id}`, by id or
name, as every `/tenants/...` route takes it).
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body
from pydantic import AwareDatetime, Field, field_validator

from functions.api.work.acl import Cidr, Id, Operation, _uuid
from functions.api.work.envelope import caller, data
from functions.api.work.fields import ActorId, ActorType, _Strict, not_reserved
from postbox.work import keys, tenants

router = Router()
KEYS = "/tenants/<tenant_id>/api-keys"
CREATED = {201: {"description": "Created"}}


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
    # extension: an exact time, so a key that expires can mint one living exactly as long as itself
    expires_at: AwareDatetime | None = Field(default=None, strict=False)
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


@router.post(KEYS, responses=CREATED)
def mint_key(tenant_id: str, body: Annotated[MintKey, Body()]):
    return data(keys.mint(caller(), tenant_id, body.fields()), 201)


@router.get(KEYS)
def list_keys(tenant_id: str):
    return data(keys.list_keys(caller(), tenant_id))


@router.get(KEYS + "/<key_id>")
def get_key(tenant_id: str, key_id: str):
    return data(keys.get_key(caller(), tenant_id, key_id))


@router.post(KEYS + "/<key_id>/rotate")
def rotate_key(tenant_id: str, key_id: str):
    return data(keys.rotate(caller(), tenant_id, key_id))


@router.post(KEYS + "/<key_id>/revoke")
def revoke_key(tenant_id: str, key_id: str, body: Annotated[RevokeKey | None, Body()] = None):
    return data(keys.revoke(caller(), tenant_id, key_id, (body or RevokeKey()).reason))


@router.get("/whoami")
def whoami():
    return data(keys.whoami(caller()))


@router.get("/tenants/<tenant_id>")
def get_tenant(tenant_id: str):
    return data(tenants.get_tenant(caller(), tenant_id))
