"""Work API keys: keys for the services, agents and users that call the work surface.

A work key is a row of `api_keys` with role `work` (so the authorizer resolves it with the same
one query as any key, and no other surface accepts it): it speaks for its subject
(`subject_type`, `subject_id`, the actor ACL entries name), holds only its `allowed_operations`,
and may be limited to scopes, client addresses (CIDRs) and a lifetime. The raw key is shown once;
only its SHA-256 is stored. Rotation gives a new secret under the same key id and keeps the old
one valid for `grace_period_seconds`; revocation ends both at once.

Every key operation holds to `postbox.key_power`: a caller mints, rotates (and so reads the new
secret of), revokes, reads or lists only keys within its own power. A minted key records its
lineage (the minting key and that key's own), so an ACL deny on any of them binds it too.

The tenant in the path must be the caller's own: another tenant's id is answered 404, exactly
like a tenant that does not exist.
"""

from __future__ import annotations

import secrets
from typing import Any

import psycopg

from .. import db, key_power, limits
from ..errors import Conflict, Forbidden, NotFound
from ..tenancy import KEY_PREFIX, WORK_ROLE, Principal, hash_key
from . import audit
from .acl import invalid_field, parse_body_id, rotation_beyond
from .common import INVALID_TRANSITION, SCOPE_NOT_FOUND, own_tenant, parse_id

KEY_NOT_FOUND = "SCAIQUEUE_API_KEY_NOT_FOUND"

_DOC = """jsonb_build_object(
    'id', k.id, 'tenant_id', k.tenant_id, 'label', k.name, 'prefix', k.prefix, 'subject_type', k.subject_type,
    'subject_id', k.subject_id, 'key_type', k.key_type, 'allowed_scopes', k.allowed_scopes,
    'allowed_operations', k.scopes, 'ip_allowlist', k.ip_allowlist, 'expires_at', k.expires_at,
    'grace_period_seconds', k.grace_period_seconds, 'rotated_at', k.rotated_at,
    'previous_valid_until', CASE WHEN k.previous_valid_until > clock_timestamp() THEN k.previous_valid_until END,
    'revoked_at', k.revoked_at, 'revoked_reason', k.revoked_reason, 'created_at', k.created_at,
    'state', CASE WHEN k.revoked_at IS NOT NULL THEN 'revoked'
                  WHEN k.expires_at <= clock_timestamp() THEN 'expired' ELSE 'active' END)"""


# A new key's lineage: the minting key, then the keys that key descends from, as stored (none for
# `postbox admin`). Read from the minting key's row, so it is what that key's own lineage is now.
_LINEAGE = """coalesce((SELECT m.id || m.lineage FROM api_keys m WHERE m.id::text = %s AND m.tenant_id = %s),
    '{}')"""


def _missing() -> NotFound:
    return NotFound("API key not found.", code=KEY_NOT_FOUND)


def _key_id(value: str) -> str:
    try:
        return parse_id(value, SCOPE_NOT_FOUND)
    except NotFound:
        raise _missing() from None


def _one(conn: psycopg.Connection, tenant_id: str, key_id: str, *, lock: bool = False) -> dict[str, Any]:
    row = conn.execute(f"SELECT {_DOC} FROM api_keys k WHERE k.id = %s AND k.tenant_id = %s AND k.role = %s"
                       + (" FOR UPDATE" if lock else ""), (key_id, tenant_id, WORK_ROLE)).fetchone()
    if row is None:
        raise _missing()
    return row[0]


def _secret() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def _scopes(conn: psycopg.Connection, tenant_id: str, scopes: list[str] | None) -> list[str] | None:
    """The allowed scopes as ids, each a scope of the tenant (422 naming the one that is not)."""
    if scopes is None:
        return None
    ids = [parse_body_id(s, f"allowed_scopes.{i}") for i, s in enumerate(scopes)]
    found = {r[0] for r in conn.execute(
        "SELECT id::text FROM work_scopes WHERE tenant_id = %s AND id = ANY(%s::uuid[])", (tenant_id, ids))}
    for i, scope_id in enumerate(ids):
        if scope_id not in found:
            raise invalid_field(f"allowed_scopes.{i}", "no such scope")
    return ids


def mint(principal: Principal, tenant_id: str, fields: dict[str, Any]) -> dict[str, Any]:
    """A new work key, within the plan's keys: its metadata and, this once, the raw `key`. The key must
    be within the caller's own power, field by field (`postbox.key_power`), else nothing is minted
    (403 naming the field)."""
    tenant_id = own_tenant(principal, tenant_id)
    key = _secret()
    with db.transaction() as conn:
        scopes = _scopes(conn, tenant_id, fields.get("allowed_scopes"))
        limits.check(conn, tenant_id, limits.API_KEYS)
        expires_at = key_power.new_expiry(conn, fields.get("expires_in_days"), fields.get("expires_at"))
        doc = conn.execute(
            "INSERT INTO api_keys AS k (tenant_id, name, prefix, key_hash, role, scopes, subject_type, subject_id,"
            " key_type, allowed_scopes, ip_allowlist, grace_period_seconds, expires_at, lineage)"
            f" VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s::uuid[], %s, %s, %s, {_LINEAGE})"
            f" RETURNING {_DOC}",
            (tenant_id, fields.get("label") or "", key[:10], hash_key(key), WORK_ROLE,
             sorted(set(fields["allowed_operations"])), fields.get("subject_type") or "service", fields["subject_id"],
             fields.get("key_type") or "service", scopes, fields.get("ip_allowlist"),
             fields.get("grace_period_seconds", 300), expires_at, principal.key_id, tenant_id),
        ).fetchone()[0]
        key_power.require_within(principal, key_power.work_key(doc), "mint")
        _audit(conn, principal, "created", doc)
    return {**doc, "key": key}


def list_keys(principal: Principal, tenant_id: str) -> list[dict[str, Any]]:
    """The tenant's work keys within the caller's power (all of them for a full-power tenant key),
    oldest first (tenant keys are `postbox admin`'s)."""
    tenant_id = own_tenant(principal, tenant_id)
    with db.connection() as conn:
        rows = conn.execute(f"SELECT {_DOC} FROM api_keys k WHERE k.tenant_id = %s AND k.role = %s"
                            " ORDER BY k.created_at, k.id", (tenant_id, WORK_ROLE)).fetchall()
    return [r[0] for r in rows if key_power.within(principal, key_power.work_key(r[0]))]


def get_key(principal: Principal, tenant_id: str, key_id: str) -> dict[str, Any]:
    """One key's metadata, if it is within the caller's power (403 naming the field beyond it)."""
    tenant_id = own_tenant(principal, tenant_id)
    with db.connection() as conn:
        return _within(principal, _one(conn, tenant_id, _key_id(key_id)), "read")


def _within(principal: Principal, doc: dict[str, Any], doing: str) -> dict[str, Any]:
    key_power.require_within(principal, key_power.work_key(doc), doing)
    return doc


def rotate(principal: Principal, tenant_id: str, key_id: str) -> dict[str, Any]:
    """A new secret for the key (returned once); the current one stays valid for the key's
    `grace_period_seconds` (a secret from an earlier rotation stops now). Only a key within the
    caller's power can be rotated (403 otherwise: nothing changes, no secret is shown), and one
    whose secret would give the caller what the ACL keeps from it (`acl.rotation_beyond`) neither.
    A revoked or expired key cannot be rotated (SCAIQUEUE_INVALID_TRANSITION)."""
    tenant_id = own_tenant(principal, tenant_id)
    key_id = _key_id(key_id)
    key = _secret()
    with db.transaction() as conn:
        state = _within(principal, _one(conn, tenant_id, key_id, lock=True), "rotate")["state"]
        standing = rotation_beyond(conn, principal, tenant_id, key_id)
        if standing is not None:  # its new secret would carry the caller past the ACL
            raise Forbidden(f"This key cannot rotate a key beyond its own power: acl {standing}.", field="acl")
        if state != "active":
            raise Conflict(f"A key that is {state} cannot be rotated.", code=INVALID_TRANSITION, state=state)
        doc = conn.execute(
            "UPDATE api_keys AS k SET previous_hash = key_hash, key_hash = %s, prefix = %s,"
            " previous_valid_until = clock_timestamp() + make_interval(secs => grace_period_seconds),"
            f" rotated_at = clock_timestamp() WHERE id = %s RETURNING {_DOC}",
            (hash_key(key), key[:10], key_id)).fetchone()[0]
        _audit(conn, principal, "rotated", doc)
    return {**doc, "key": key}


def revoke(principal: Principal, tenant_id: str, key_id: str, reason: str | None) -> dict[str, Any]:
    """Revoke the key and any secret still in its grace period; a revoked key stays revoked (409).
    Only a key within the caller's power can be revoked: no key ends a more powerful one."""
    tenant_id = own_tenant(principal, tenant_id)
    key_id = _key_id(key_id)
    with db.transaction() as conn:
        if _within(principal, _one(conn, tenant_id, key_id, lock=True), "revoke")["state"] == "revoked":
            raise Conflict("The key is already revoked.", code=INVALID_TRANSITION, state="revoked")
        doc = conn.execute(
            "UPDATE api_keys AS k SET revoked_at = clock_timestamp(), revoked_reason = %s, previous_valid_until = NULL"
            f" WHERE id = %s RETURNING {_DOC}", (reason, key_id)).fetchone()[0]
        _audit(conn, principal, "revoked", doc, reason=reason)
        return doc


def _audit(conn: psycopg.Connection, principal: Principal, what: str, doc: dict[str, Any], **details: Any) -> None:
    """The tenant-level audit event of a key minted, rotated or revoked (never its secret)."""
    audit.record(conn, principal, f"scaiqueue.api_key.{what}", "api_key", doc["id"],
                 details={"subject_type": doc.get("subject_type"), "subject_id": doc.get("subject_id"), **details})


def whoami(principal: Principal) -> dict[str, Any]:
    """What a client learns of itself from its key: its tenant, project, key and actor."""
    actor_type, actor_id = principal.actor
    return {"tenant_id": principal.tenant_id, "project_id": principal.project_id, "key_id": principal.key_id,
            "key_kind": "work" if principal.is_work_key else "tenant", "role": principal.role,
            "operations": list(principal.scopes) if principal.is_work_key else None,
            "actor_type": actor_type, "actor_id": actor_id}
