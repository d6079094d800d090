"""Routes of the work surface's access control: a scope's ACL (grants, per-queue entries, trusted
scopes), the tenant's work API keys, and `whoami`.

Parses and shapes only; the rules live in `postbox.work.acl` and `postbox.work.keys`.
"""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body

from functions.api.work_acl_schema import CreateGrant, CreateQueueEntry, CreateTrust, MintKey, RevokeKey
from functions.api.work_envelope import caller, data
from postbox.work import acl, keys

router = Router()
ACL = "/scopes/<scope_id>/acl"
KEYS = "/tenants/<tenant_id>/api-keys"
CREATED = {201: {"description": "Created"}}

# ---- ACL ----------------------------------------------------------------------------------------


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


# ---- work API keys ------------------------------------------------------------------------------


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
