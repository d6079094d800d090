"""SQS credentials over the queues surface (`/api/v1/sqs/credentials`): a manage key mints an
access key id and secret for its tenant (and a project) with a role and an optional expiry, lists
them (no secrets) and revokes one, each only within its own power (`postbox.key_power`). The SQS
endpoint itself takes only SigV4-signed requests made with such a credential.

The queues function includes this router with the first request to its mount (see
`functions.api.lazy_routers`): few of its containers ever serve one."""

from __future__ import annotations

from typing import Annotated, Literal

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body
from pydantic import AwareDatetime, Field

from functions.api.common import json_response
from functions.api.common_schema import StrictBody
from functions.api.queues.app import app
from postbox import tenancy
from postbox.sqs import credentials


class MintCredential(StrictBody):
    role: Literal["read", "write", "manage"] = "write"
    project: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    name: Annotated[str, Field(max_length=200)] = ""
    expires_in_days: Annotated[int, Field(ge=1, le=3650)] | None = None
    expires_at: AwareDatetime | None = Field(default=None, strict=False)


router = Router()


@router.post("", responses={201: {"description": "Minted; the secret is shown once"}})
def mint(body: Annotated[MintCredential | None, Body()] = None):
    principal = app.principal()
    tenancy.require(principal, "manage", what="SQS credentials")
    body = body or MintCredential()
    return json_response(201, credentials.mint(principal.tenant_id, body.role, project=body.project,
                                               name=body.name, expires_in_days=body.expires_in_days,
                                               expires_at=body.expires_at, caller=principal))


@router.get("")
def list_credentials() -> dict:
    principal = app.principal()
    tenancy.require(principal, "manage", what="SQS credentials")
    return {"credentials": credentials.list_credentials(principal.tenant_id, principal)}


@router.delete("/<access_key_id>")
def revoke(access_key_id: str) -> dict:
    principal = app.principal()
    tenancy.require(principal, "manage", what="SQS credentials")
    return credentials.revoke(principal.tenant_id, access_key_id, principal)
